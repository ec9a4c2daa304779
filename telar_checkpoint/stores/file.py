"""`FileStore`: one file per thread in a directory, written atomically.

Any thread id maps to a safe, reversible file name that stays distinct on file
systems that ignore case (`file_names`). Only regular files are read or written
there, and no link is followed (`file_access`): anything else at a history's
path is foreign, reported and never touched. A write that extends the file is
an append, durable when acknowledged: appends share one ``fsync`` (group commit;
a lone append that syncs itself with ``RWF_DSYNC`` measured within noise,
benchmarks/results/ab.md); any other write goes to a
temporary file in ``.tmp`` that is fsynced and renamed over the old one (`file_temps`; the
temporary files of writers that were killed are removed by the next rewrite).
Writers of one thread, in threads or in processes, are serialized by ``flock``
on its history file, whose descriptor stays open (for the most recently used
threads), for at most `lock_timeout` seconds (`file_handle.flock_within`). A write under the
lock is an ``lstat``, the append and an ``fstat``, which gives the new version
and finds out whether a person or a tool that takes no lock changed the file
meanwhile (the append is then taken back and the change made again on what is
there). Creating or removing a file takes ``flock`` on the store's directory
instead. Files and directories are created owner-only (0600 / 0700) unless
`mode` says otherwise, and every directory created is fsynced with its parent.
The store's index is an SQLite database in ``.index`` (`file_index`), which also holds its
expiries and leases.
"""

from __future__ import annotations

import os
import stat
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Collection, Hashable, Iterator
from contextlib import contextmanager
from itertools import islice
from pathlib import Path

from telar_checkpoint import forks
from telar_checkpoint._arguments import check
from telar_checkpoint.errors import ForeignDataError, StoreError, StoreFullError, UsageError
from telar_checkpoint.stores.base import Change, Store
from telar_checkpoint.stores.common import attempts, encode, extension, gave_up
from telar_checkpoint.stores.file_access import (
    CLOEXEC,
    DIRECTORY,
    FULL,
    open_directory,
    open_regular,
    store_error,
)
from telar_checkpoint.stores.file_handle import Handle, Signature, flock_within, signature_of
from telar_checkpoint.stores.file_index import INDEX_DIR, FileIndex
from telar_checkpoint.stores.file_names import LONG_DIR, SUFFIX, decode_name, encode_name, legacy_name, names_key
from telar_checkpoint.stores.file_temps import TMP, stale_temp_files, write_through_temp
from telar_checkpoint.stores.group_commit import append_durably

__all__ = ["FileStore", "decode_name", "encode_name"]

FILES_KEPT = 128  # threads whose history file stays open (for appends and flock)
_CLEAN_EVERY = 600.0  # seconds between two looks for stale temporary files (`file_temps`) by one store


def _text(key: str, data: bytes) -> str:
    """The file's text. Bad UTF-8 in an unterminated last line is a torn append (a crash
    mid-write cut a character): kept as replacement characters, for readers to drop."""
    try:
        return data.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError as exc:
        end = data.rfind(b"\n") + 1
        if exc.start < end:
            line = data.count(b"\n", 0, exc.start) + 1
            raise ForeignDataError(
                f"not UTF-8 text (byte {exc.start}); not written by telar-checkpoint, or damaged",
                thread_id=key, line=line,
            ) from None
        return data[:end].decode("utf-8", "surrogatepass") + data[end:].decode("utf-8", "replace")


_OPEN_STORES: weakref.WeakSet[FileStore] = weakref.WeakSet()


def _forget_parents_files() -> None:
    """In a forked child: let go of the descriptors the parent's stores kept open."""
    for store in list(_OPEN_STORES):
        store._forget_parents_files()


forks.in_child_after_fork(_forget_parents_files)


class FileStore(Store):
    """Histories as files under `directory`, one per thread.

    A read reads the file: the store keeps no texts (the saver keeps parsed histories by
    the store's version, `threads.ThreadRecords`). A file's version is its
    signature (inode, size, modification times): appends grow the size, rewrites rename
    a new inode into place.
    """

    kind = "file"
    # Versions: a file's signature (see `file_handle.signature_of`); deferred appends: a batch of
    # appends shares one fsync, in `flush`; the index, expiries and leases: in an SQLite database
    # beside the files (`file_index`).
    keeps_versions = keeps_index = defers_appends = True

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        mode: int = 0o600,
        fsync: bool = True,
        create: bool = True,
        lock_timeout: float = 30.0,
    ) -> None:
        """`create`: make the directory when missing (False, for a command that only reads:
        a missing directory is then a `UsageError`, and nothing is created); `lock_timeout`:
        seconds a write waits for another writer's lock on a thread (`StoreBusyError` then)."""
        check(FileStore.__init__, locals())
        self.directory = Path(directory)
        self._root = os.fspath(self.directory)
        self.mode = mode
        self.dir_mode = mode | ((mode & 0o444) >> 2)  # x wherever r: 0600 -> 0700
        self.fsync = fsync
        self.lock_timeout = lock_timeout
        self._make_root(create)
        self._index: FileIndex | None = None
        self._handles: OrderedDict[str, Handle] = OrderedDict()  # by thread, most recent last
        self._guard = threading.Lock()
        self._cleaned = -_CLEAN_EVERY  # when (monotonic) this store last removed stale temporary files
        _OPEN_STORES.add(self)

    def _forget_parents_files(self) -> None:
        """After a fork, before the child runs on: a kept descriptor is shared with the parent,
        and so is ``flock`` on it (it belongs to the open file), so the child would hold every
        lock the parent holds. Close the child's copies (which lets no lock of the parent's
        go) and start afresh, as the threads that held the handles are not in the child."""
        for handle in self._handles.values():
            if handle.fd is not None:
                try:
                    os.close(handle.fd)
                except OSError:
                    pass
        self._handles = OrderedDict()
        self._guard = threading.Lock()

    def _make_root(self, create: bool) -> None:
        """Create the store's directory and any missing parents (when `create`), each with the
        store's mode (mkdir's `parents=True` would give the parents the umask's), made durable;
        a path that is not a directory is refused."""
        path, missing = os.path.abspath(self._root), []
        refused = UsageError(
            f"{self._root} is not a directory (or is under a file): a FileStore keeps its threads as files "
            "in a directory of its own; give the path of a directory, or of one to create, or a store URL "
            "such as sqlite:///checkpoints.db"
        )
        try:
            while True:
                try:
                    found = os.stat(path)
                    break
                except FileNotFoundError:
                    missing.append(path)
                    path = os.path.dirname(path)
            if not stat.S_ISDIR(found.st_mode):
                raise refused
            if missing and not create:
                raise UsageError(f"{self._root} does not exist: there is no file store there (check the path)")
            for directory in reversed(missing):
                try:
                    os.mkdir(directory, self.dir_mode)
                except FileExistsError:
                    pass
                self._sync_directory(os.path.dirname(directory))
            if missing:
                self._sync_directory(missing[0])
        except NotADirectoryError:
            raise refused from None
        except OSError as exc:
            raise store_error(exc, doing="creating the store directory", key=None, path=path, root=self._root) from exc

    def _sync_directory(self, path: str) -> None:
        """fsync the directory at `path` (its entries), when the store syncs."""
        if self.fsync:
            fd = os.open(path, os.O_RDONLY | DIRECTORY | CLOEXEC)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def _directory(self, parts: list[str], key: str | None) -> int:
        """A descriptor of the directory `parts` under the store's, each missing one created
        with the store's mode and made durable with its parent."""
        return open_directory(self._root, parts, key, create_mode=self.dir_mode, sync=self.fsync)

    def _failed(self, exc: OSError, doing: str, key: str | None) -> StoreError:
        """`exc`, met while `doing` something for thread `key`, as the error to raise."""
        path = f"{self._root}/{encode_name(key)}" if key is not None else self._root
        return store_error(exc, doing=doing, key=key, path=path, root=self._root)

    @contextmanager
    def _errors(self, doing: str, key: str | None) -> Iterator[None]:
        """Raise an OSError met while `doing` something for thread `key` as `_failed` says (not
        on the paths where a context manager's cost shows: `read`, `version`, the appends and
        flushes of a put)."""
        try:
            yield
        except OSError as exc:
            raise self._failed(exc, doing, key) from exc

    def path(self, key: str) -> Path:
        """The file that holds `key` (a file written by release 0.1.0 may still be at
        its legacy name until its next write; see `file_names`)."""
        return self.directory / encode_name(key)

    def _handle(self, key: str) -> Handle:
        """The thread's `Handle`; the least recently used ones not in use are closed."""
        with self._guard:
            handle = self._handles.get(key)
            if handle is None:
                handle = self._handles[key] = Handle(self._root, encode_name(key), key, self.lock_timeout)
                # the oldest beyond FILES_KEPT (islice: not a copy of every key on each new handle)
                for old_key in list(islice(self._handles, max(0, len(self._handles) - FILES_KEPT))):
                    old = self._handles[old_key]
                    if old.local.acquire(blocking=False):  # in use: keep it for now
                        if not old.commits.pending or not self.fsync:  # else a flush still needs it
                            del self._handles[old_key]
                            old.close()
                        old.local.release()
            else:
                self._handles.move_to_end(key)
            return handle

    @contextmanager
    def _locked(self, key: str) -> Iterator[tuple[Handle, os.stat_result | None]]:
        """Hold the thread's lock (a threading lock in this process, then ``flock`` on its
        file): the handle and the file's stat, None when there is no file."""
        handle = self._handle(key)
        with handle.local:
            st = handle.lock()
            try:
                yield handle, st
            finally:
                handle.release()

    @contextmanager
    def _creating(self) -> Iterator[None]:
        """Hold ``flock`` on the store's directory, which creating or removing a history
        file takes (rare: a file's other writes take its own lock)."""
        fd = os.open(self._root, os.O_RDONLY | CLOEXEC)
        try:
            flock_within(fd, self.lock_timeout, key=None, path=self._root)
            yield
        finally:
            os.close(fd)

    def _lstat(self, relative: str, key: str | None = None) -> os.stat_result | None:
        """The ``lstat`` of `relative` (a link's own), None when nothing is there."""
        try:
            return os.lstat(f"{self._root}/{relative}")
        except FileNotFoundError:
            return None
        except NotADirectoryError:  # a directory on the way is not one: say which
            os.close(open_directory(self._root, relative.split("/")[:-1], key))
            raise

    def _locate(self, key: str) -> tuple[str, os.stat_result] | None:
        """Where `key` is stored, and the ``lstat`` there: its name, or else its legacy name
        when a regular file is there; None when there is no history."""
        relative = encode_name(key)
        st = self._lstat(relative, key)
        if st is not None:
            return relative, st
        legacy = legacy_name(key)
        if legacy is not None:
            st = self._lstat(legacy, key)
            if st is not None and stat.S_ISREG(st.st_mode):
                return legacy, st
        return None

    def version(self, key: str) -> Signature | None:
        try:
            found = self._locate(key)
        except OSError as exc:
            raise self._failed(exc, "looking at", key) from exc
        return None if found is None else signature_of(found[1])

    def read(self, key: str) -> str | None:
        try:
            return self._read(key)[0]
        except OSError as exc:
            raise self._failed(exc, "reading", key) from exc

    def _read(self, key: str, relative: str | None = None) -> tuple[str | None, Signature | None]:
        """The text and the signature it was read at (None, None when there is no file);
        `relative`, the file's name when the caller knows it (a writer holding its lock)."""
        if relative is None:
            found = self._locate(key)
            if found is None:
                return None, None
            relative = found[0]
        try:
            fd, st = open_regular(self._root, relative, os.O_RDONLY, key)
        except FileNotFoundError:
            return None, None
        try:
            data = _read_all(fd, st.st_size)
        finally:
            os.close(fd)
        return _text(key, data), signature_of(st)

    def update(self, key: str, change: Change) -> str | None:
        return self.update_versioned(key, change)[0]

    def update_versioned(self, key: str, change: Change) -> tuple[str | None, Signature | None]:
        with self._errors("writing", key):
            return self._update_versioned(key, change)

    def _update_versioned(self, key: str, change: Change) -> tuple[str | None, Signature | None]:
        for pause in attempts():
            if pause:
                time.sleep(pause)
            with self._locked(key) as (handle, st):
                if st is None:
                    created = self._create(key, change)
                    if created is None:
                        continue  # another writer created the file first (or it was moved to its name)
                    return created
                old, signature = self._read(key, handle.relative)
                new = change(old)
                ticket = 0
                if new is None:
                    self._remove(key, handle)
                    return None, None
                suffix = extension(old, new)
                if suffix is not None:
                    if suffix:
                        appended = self._append(handle, suffix)
                        if appended is None:
                            continue  # the file was changed by another hand: change what is there
                        ticket, signature = appended
                else:
                    signature = self._replace(key, new)
                    handle.close()  # the file it locked was replaced (which lets the lock go)
            self._sync(handle, ticket)
            return new, signature
        raise gave_up(key, self._root)

    def _create(self, key: str, change: Change) -> tuple[str | None, Signature | None] | None:
        """Create the thread's file with what `change` makes of no history; None when
        another writer created it first, or when a file under the key's legacy name was
        moved to its name (the caller then changes that one)."""
        with self._creating():
            relative = encode_name(key)
            if self._lstat(relative, key) is not None:  # (anything there: a link or FIFO too, which `lock` reports)
                return None
            legacy = self._locate(key)
            if legacy is not None:
                self._move(key, legacy[0], relative)
                return None
            new = change(None)
            if new is None:
                return None, None
            self._index_db().add_key(key)  # before the file: the index never lists fewer threads
            return new, self._replace(key, new)

    def _move(self, key: str, source: str, target: str) -> None:
        """Rename the history of `key` from `source` (its legacy name) to `target`, durably."""
        self._write_key_file(key, target)
        source_parts, target_parts = source.split("/"), target.split("/")
        source_dir = open_directory(self._root, source_parts[:-1], key)
        try:
            target_dir = self._directory(target_parts[:-1], key)
            try:
                os.rename(source_parts[-1], target_parts[-1], src_dir_fd=source_dir, dst_dir_fd=target_dir)
                if self.fsync:
                    os.fsync(target_dir)
                    os.fsync(source_dir)
            finally:
                os.close(target_dir)
        finally:
            os.close(source_dir)

    def append_if(self, key: str, suffix: str, version: Hashable) -> Hashable | None:
        return append_durably(self, key, suffix, version)

    def append_if_deferred(self, key: str, suffix: str, version: Hashable) -> Signature | None:
        if version is None:
            return None
        try:  # (not `_errors`: every write of a put comes here)
            with self._locked(key) as (handle, st):
                if st is None or signature_of(st) != version:
                    return None
                appended = self._append(handle, suffix)
                return None if appended is None else appended[1]
        except OSError as exc:
            raise self._failed(exc, "appending to", key) from exc

    def flush(self, key: str) -> None:
        """Return once every append of `key` so far is on disk."""
        if not self.fsync:
            return
        handle = self._handle(key)
        try:
            if ticket := handle.commits.written:  # (`_sync`, inline)
                handle.commits.flush(ticket, handle.sync)
        except OSError as exc:
            raise self._failed(exc, "syncing", key) from exc

    def delete(self, key: str) -> None:
        with self._errors("deleting", key), self._locked(key) as (handle, st):
            if st is not None:
                self._remove(key, handle)  # (which forgets the expiry with the key)
            else:  # an expiry recorded before the first write (not `forget_key`: a creator may have just recorded it)
                self._index_db().set_expiry(key, None)
            legacy = legacy_name(key)
            legacy_st = None if legacy is None else self._lstat(legacy, key)
            if legacy is not None and legacy_st is not None and stat.S_ISREG(legacy_st.st_mode):
                with self._creating():
                    self._unlink(legacy, key)

    def _remove(self, key: str, handle: Handle) -> None:
        """Remove the locked file of `key` (and the `.key` file of a long name) and close it."""
        relative = encode_name(key)
        with self._creating():  # not while a creator looks for the `.key` file
            self._unlink(relative, key)
            if relative.startswith(f"{LONG_DIR}/"):
                self._unlink(_key_file(relative), key)
            self._index_db().forget_key(key)
        handle.close()

    def _unlink(self, relative: str, key: str) -> None:
        """Remove the file at `relative` (following no link on the way), if it is there."""
        parts = relative.split("/")
        dir_fd = open_directory(self._root, parts[:-1], key)
        try:
            os.unlink(parts[-1], dir_fd=dir_fd)
        except FileNotFoundError:
            pass
        finally:
            os.close(dir_fd)

    def _append(self, handle: Handle, text: str) -> tuple[int, Signature] | None:
        """Append to the locked file: the ticket to pass to `_sync` once the lock is released,
        and the file's signature; None when another hand had changed the file (nothing is
        appended then)."""
        signature = handle.append(text.encode("utf-8", "surrogatepass"))  # (`common.encode`, inline: every put)
        if signature is None:
            return None
        return handle.commits.wrote(), signature

    def _sync(self, handle: Handle, ticket: int) -> None:
        """Return once append `ticket` is on disk: one fsync serves every append made before it."""
        if self.fsync and ticket:
            handle.commits.flush(ticket, handle.sync)

    def _signature(self, relative: str) -> Signature | None:
        st = self._lstat(relative)
        return None if st is None else signature_of(st)

    def _replace(self, key: str, text: str) -> Signature | None:
        """Write `text` whole as the file of `key`: the file's signature."""
        relative = encode_name(key)
        self._write_key_file(key, relative)
        self._write_atomic(relative, text, key)
        return self._signature(relative)

    def _write_key_file(self, key: str, relative: str) -> None:
        """A file named by its key's hash (`LONG_DIR`) has the key in a `.key` file beside it."""
        if relative.startswith(f"{LONG_DIR}/") and self._lstat(_key_file(relative)) is None:
            self._write_atomic(_key_file(relative), key, key)

    def _write_atomic(self, relative: str, text: str, key: str) -> None:
        """Write `text` as the file at `relative`: into a temporary file, fsynced, then renamed
        into place, and the directory that holds it fsynced. A full disk is said plainly: a
        rewrite needs room for a second copy of the thread."""
        data = encode(text)
        self._remove_stale_temp_files_if_due()
        parts = relative.split("/")
        try:
            tmp_dir = self._directory([TMP], key)
            try:
                target_dir = self._directory(parts[:-1], key)
                try:
                    write_through_temp(tmp_dir, target_dir, parts[-1], data, mode=self.mode, fsync=self.fsync)
                    if self.fsync:
                        os.fsync(target_dir)
                finally:
                    os.close(target_dir)
            finally:
                os.close(tmp_dir)
        except OSError as exc:
            if exc.errno in FULL:
                raise StoreFullError(
                    f"thread {key!r}: the disk that holds {self._root} is full ({exc.strerror}): rewriting "
                    f"this thread needs room for a temporary copy of its history ({len(data):,} bytes). "
                    "The thread keeps its history as it was; free at least that much space (or delete or "
                    "trim other threads) and try again"
                ) from exc
            raise

    def stale_temp_files(self) -> list[str]:
        """Temporary files that rewrites killed midway left in ``.tmp`` (no live writer locks
        them, and they are over a minute old), relative to the directory, for `verify` to
        report. Nothing is changed; the store's next rewrite removes them."""
        with self._errors("looking for temporary files in", None):
            return stale_temp_files(self._root, remove=False)

    def _remove_stale_temp_files_if_due(self) -> None:
        """Before a rewrite: remove the stale temporary files, when this store has not looked for
        them in the last `_CLEAN_EVERY` seconds (a failure here fails no write)."""
        now = time.monotonic()
        if now - self._cleaned >= _CLEAN_EVERY:
            self._cleaned = now
            try:
                stale_temp_files(self._root, remove=True)
            except (OSError, ForeignDataError):
                pass

    def setup(self) -> None:
        """Make the index database now, as the first write would (`__init__` made the directory)."""
        self._index_db().index_ready()  # its first use makes its tables

    def close(self) -> None:
        """Close the history files kept open (they open again on the next write)."""
        with self._guard:
            for handle in self._handles.values():
                with handle.local:
                    handle.close()
        if self._index is not None:
            self._index.close()

    # The index (see `file_index`)

    def _index_db(self) -> FileIndex:
        """The index database, made on first use (not ready when the directory holds histories); the
        commands that only read never use it, so a store opened with `create=False` makes it only
        for `reindex`."""
        if self._index is None:
            with self._guard:
                if self._index is None:
                    os.close(self._directory([INDEX_DIR], None))  # made with the store's mode, durably
                    index = FileIndex(self._root, mode=self.mode, fsync=self.fsync, timeout=self.lock_timeout)
                    if index.new and any(key is not None for _relative, key in self._entries()):
                        index.not_ready()
                    self._index = index
        return self._index

    def index(self, key: str, terms: Collection[str]) -> None:
        self._index_db().index(key, terms)

    def unindex(self, key: str, terms: Collection[str]) -> None:
        self._index_db().unindex(key, terms)

    def indexed(self, term: str, start: str | None = None, limit: int | None = None) -> list[str]:
        return self._index_db().indexed(term, start, limit)

    def index_ready(self) -> bool:
        return self._index_db().index_ready()

    def set_index_ready(self) -> None:
        """Record every thread's key (a rebuild has recorded their terms), then note it ready."""
        index = self._index_db()
        index.add_keys(self.keys())
        index.set_index_ready()

    def expire_at(self, key: str, when: float) -> None:
        self._index_db().expire_at(key, when)

    def set_expiry(self, key: str, when: float | None) -> None:
        self._index_db().set_expiry(key, when)

    def expiry(self, key: str) -> float | None:
        return self._index_db().expiry(key)

    def expired(self, now: float, limit: int) -> list[tuple[str, float]]:
        return self._index_db().expired(now, limit)

    def lease(self, name: str, holder: str, now: float, seconds: float) -> bool:
        return self._index_db().lease(name, holder, now, seconds)

    def release(self, name: str, holder: str) -> None:
        self._index_db().release(name, holder)

    def _holds(self, key: str) -> bool:
        """Whether a history of `key` is there: a regular file (anything else is foreign, as in `keys`)."""
        found = self._locate(key)
        return found is not None and stat.S_ISREG(found[1].st_mode)

    def sorted_keys(self, after: str | None = None, limit: int | None = None) -> list[str]:
        """The index's keys whose file is there (a key is recorded just before its file is made)."""
        found: list[str] = []
        while limit is None or len(found) < limit:
            page = self._index_db().sorted_keys(after, None if limit is None else limit - len(found))
            found += [key for key in page if self._holds(key)]
            if limit is None or not page:
                break
            after = page[-1]
        return found

    def _entries(self) -> Iterator[tuple[str, str | None]]:
        """Every entry under the directory but ``.tmp``: its relative path, and the key it holds,
        None when it is foreign (not named as a history of ours, or not a regular file: a link,
        FIFO, socket, device, or a directory named as a history). Directories are entered one
        by one, links never followed; no file is opened, so none can block this."""
        pending = [""]
        while pending:
            rel_dir = pending.pop()
            try:
                with os.scandir(f"{self._root}/{rel_dir}" if rel_dir else self._root) as scan:
                    entries = list(scan)
            except FileNotFoundError:  # removed meanwhile
                continue
            for entry in entries:
                relative = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
                if entry.is_dir(follow_symlinks=False):
                    if relative in (TMP, INDEX_DIR):
                        continue
                    if entry.name.endswith(SUFFIX):  # a directory where a history would be
                        yield relative, None
                    else:
                        pending.append(relative)
                elif not entry.is_file(follow_symlinks=False):
                    yield relative, None
                elif rel_dir == LONG_DIR:
                    if not entry.name.endswith(".key"):
                        yield relative, self._long_key(relative)
                else:
                    yield relative, decode_name(relative)

    def _long_key(self, relative: str) -> str | None:
        """The key of a file named by its hash, from the `.key` file beside it."""
        try:
            fd, st = open_regular(self._root, _key_file(relative), os.O_RDONLY, None)
        except (OSError, ForeignDataError):
            return None
        try:
            key = _read_all(fd, st.st_size).decode("utf-8", "surrogatepass")
        except (OSError, UnicodeDecodeError):
            return None
        finally:
            os.close(fd)
        return key if names_key(relative, key) else None

    def keys(self) -> Iterator[str]:
        """Every thread with a history (one under its legacy name included, once)."""
        legacy_seen: set[str] = set()
        with self._errors("listing", None):
            for _relative, key in self._entries():
                if key is None:
                    continue
                if legacy_name(key) is not None:  # it may be under both names
                    if key in legacy_seen:
                        continue
                    legacy_seen.add(key)
                yield key

    def foreign(self) -> list[str]:
        """Entries in the directory that are not histories of ours: not named as one, not a
        regular file (a link, FIFO, directory, ...), or a legacy name whose thread is also
        under its new name (which is the one read)."""
        with self._errors("listing", None):
            entries = list(self._entries())
        held = {relative for relative, key in entries if key is not None}
        return sorted(
            relative for relative, key in entries if key is None or (relative != encode_name(key) and encode_name(key) in held)
        )


def _key_file(relative: str) -> str:
    """The `.key` file beside the file at `relative`, named by its key's hash."""
    return relative[: -len(SUFFIX)] + ".key"


def _read_all(fd: int, size: int) -> bytes:
    """The first `size` bytes of the open file (fewer if it is shorter now)."""
    chunks = []
    while size > 0:
        chunk = os.read(fd, size)
        if not chunk:
            break
        chunks.append(chunk)
        size -= len(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)
