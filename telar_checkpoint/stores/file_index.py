"""The index of a `FileStore`: an SQLite database in the store's directory (``.index/index.sqlite3``).

Files cannot hold an index that one write keeps in step with a history, so a file store keeps
its index (see `Store.index`) in an `SQLiteStore` beside the files, which `FileIndex` holds: each thread's key as a value
of its own (an empty string), which gives the keys in order, and its terms in that store's index.
A key is recorded before its file is created and forgotten after its file is removed, and every
write is durable when it returns, so the database never lists fewer threads than the directory.
The database and SQLite's files beside it are the store's own: a symbolic link in their place
(to another store's index, to any file, or dangling) is removed before SQLite opens anything,
so nothing outside the store is created or changed, and the index is rebuilt.

What it cannot see is a file that another hand put there (copied in, or written by a release
without an index): a directory that holds histories when its database is made, or whose database
is missing, has an index that is not ready, which the saver rebuilds. A file created or edited
by hand after that is seen once the index is rebuilt (``telar-checkpoint reindex``).

The store's expiries and leases (see `Store.expire_at`) are that database's too, and forgetting a key
forgets its expiry.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable

from telar_checkpoint.stores.sqlite import SQLiteStore

INDEX_DIR = ".index"
INDEX_FILE = "index.sqlite3"
SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")  # what SQLite keeps beside a database


class FileIndex:
    """The index database of the file store at `root`, an `SQLiteStore` it holds; its keys are the
    store's threads. It offers what the file store asks of it, and nothing else."""

    def __init__(self, root: str, *, mode: int, fsync: bool, timeout: float) -> None:
        path = os.path.join(root, INDEX_DIR, INDEX_FILE)
        for name in (path, *(path + suffix for suffix in SQLITE_SIDE_FILES)):
            if os.path.islink(name):  # SQLite would open, create or change its target, outside the store
                os.unlink(name)  # the index is the store's own file, rebuilt from the histories
        self.new = not os.path.exists(path)
        # Synced index changes: the write a change describes is a file's, which syncs nothing here.
        self._db = SQLiteStore(path, mode=mode, fsync=fsync, timeout=timeout, synced_index=True)

    def not_ready(self) -> None:
        """Note that the directory holds histories the index does not cover."""
        self._db.set_index_not_ready()

    def add_keys(self, keys: Iterable[str]) -> None:
        """Record every key of `keys` that is not recorded yet (a rebuild), in one synced transaction."""
        self._db.write_keys(keys)

    def add_key(self, key: str) -> None:
        self._db.write(key, "")

    def forget_key(self, key: str) -> None:
        """Forget `key`, its terms and its expiry."""
        self._db.delete(key)

    def index(self, key: str, terms: Collection[str]) -> None:
        self._db.index(key, terms)

    def unindex(self, key: str, terms: Collection[str]) -> None:
        self._db.unindex(key, terms)

    def indexed(self, term: str, start: str | None = None, limit: int | None = None) -> list[str]:
        return self._db.indexed(term, start, limit)

    def index_ready(self) -> bool:
        return self._db.index_ready()

    def set_index_ready(self) -> None:
        self._db.set_index_ready()

    def expire_at(self, key: str, when: float) -> None:
        self._db.expire_at(key, when)

    def set_expiry(self, key: str, when: float | None) -> None:
        self._db.set_expiry(key, when)

    def expiry(self, key: str) -> float | None:
        return self._db.expiry(key)

    def expired(self, now: float, limit: int) -> list[tuple[str, float]]:
        return self._db.expired(now, limit)

    def lease(self, name: str, holder: str, now: float, seconds: float) -> bool:
        return self._db.lease(name, holder, now, seconds)

    def release(self, name: str, holder: str) -> None:
        self._db.release(name, holder)

    def sorted_keys(self, after: str | None = None, limit: int | None = None) -> list[str]:
        return self._db.sorted_keys(after, limit)

    def close(self) -> None:
        self._db.close()
