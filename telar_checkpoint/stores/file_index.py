"""The index of a `FileStore`: an SQLite database in the store's directory (``.index/index.sqlite3``).

Files cannot hold an index that one write keeps in step with a history, so a file store keeps
its index (see `Store.index`) in an `SQLiteStore` beside the files: each thread's key as a value
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
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from telar_checkpoint.stores.common import encode
from telar_checkpoint.stores.sqlite import _INSERT, SQLiteStore, _Connection

INDEX_DIR = ".index"
INDEX_FILE = "index.sqlite3"
SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")  # what SQLite keeps beside a database


class FileIndex(SQLiteStore):
    """The index database of the file store at `root`; its keys are the store's threads."""

    def __init__(self, root: str, *, mode: int, fsync: bool, timeout: float) -> None:
        path = os.path.join(root, INDEX_DIR, INDEX_FILE)
        for name in (path, *(path + suffix for suffix in SQLITE_SIDE_FILES)):
            if os.path.islink(name):  # SQLite would open, create or change its target, outside the store
                os.unlink(name)  # the index is the store's own file, rebuilt from the histories
        new = not os.path.exists(path)
        super().__init__(path, mode=mode, fsync=fsync, timeout=timeout)
        self.new = new

    @contextmanager
    def _index_commit(self) -> Iterator[_Connection]:
        """A transaction on the index, synced when it commits: the write it describes is a file's,
        which syncs nothing of this database."""
        with self._commit() as conn, self._transaction(conn):
            yield conn

    def not_ready(self) -> None:
        """Note that the directory holds histories the index does not cover."""
        with self._commit() as conn:
            conn.execute("DELETE FROM telar_meta WHERE name = 'index'")

    def add_keys(self, keys: Iterable[str]) -> None:
        """Record every key of `keys` that is not recorded yet (a rebuild), in one synced transaction."""
        have = set(self.keys())
        missing = [(encode(key), encode("")) for key in dict.fromkeys(keys) if key not in have]
        if missing:
            with self._commit() as conn, self._transaction(conn):
                conn.executemany(_INSERT, missing)

    def add_key(self, key: str) -> None:
        self.write(key, "")

    def forget_key(self, key: str) -> None:
        """Forget `key` and its terms."""
        self.delete(key)
