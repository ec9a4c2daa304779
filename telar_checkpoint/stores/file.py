"""`FileStore`: one file per thread in a directory, written atomically.

Any thread id maps to a safe, reversible file name: bytes outside
``[A-Za-z0-9_-]`` are percent-encoded (so no ``/``, ``..``, NUL or newline
reaches the filesystem), and a name longer than a path component allows is cut
into nested ``.d`` directories. A write that extends the file is an append
followed by ``fsync``; any other write goes to a temporary file that is
fsynced and renamed over the old one. Writers of one thread, in threads or in
processes, are serialized by ``flock`` on a lock file of its own, whose
descriptor stays open (for the most recently used threads) so that taking the
lock costs one system call. Files and directories are created owner-only
(0600 / 0700) unless `mode` says otherwise.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import os
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import unquote_to_bytes

from telar_checkpoint.errors import ForeignDataError, StoreError
from telar_checkpoint.stores.base import Change, Store
from telar_checkpoint.stores.group_commit import DeferredAppends, GroupCommit

SUFFIX = ".jsonl"
_SEGMENT = 200  # characters of an encoded name per path component
_LONG = 1000  # an encoded name longer than this is stored under its hash, in _LONG_DIR
_LONG_DIR = "~long"  # "~" is never in an encoded name, so these never collide with one
TEXTS_KEPT = 32  # files whose last text is kept, to answer a read with one stat
LOCKS_KEPT = 128  # threads whose lock file and history file stay open (two descriptors each)
_SAFE = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
_LOCKS = ".locks"
_TMP = ".tmp"


@functools.lru_cache(maxsize=1024)
def encode_name(key: str) -> str:
    """The relative path that holds `key` (reversible with `decode_name`, or for a very long
    key through the `.key` file beside it)."""
    raw = key.encode("utf-8", "surrogatepass")
    encoded = "".join(chr(b) if b in _SAFE else f"%{b:02X}" for b in raw)
    if len(encoded) > _LONG:  # whole paths are limited (PATH_MAX): name it by its hash
        return f"{_LONG_DIR}/{hashlib.sha256(raw).hexdigest()}{SUFFIX}"
    parts = [encoded[i : i + _SEGMENT] for i in range(0, len(encoded), _SEGMENT)] or [""]
    return "/".join([p + ".d" for p in parts[:-1]] + [parts[-1] + SUFFIX])


def decode_name(relative: str) -> str | None:
    """The key stored at `relative`, or None when the path is not one we would write."""
    parts = relative.split("/")
    if not parts[-1].endswith(SUFFIX) or not all(p.endswith(".d") for p in parts[:-1]):
        return None
    encoded = "".join(p[:-2] for p in parts[:-1]) + parts[-1][: -len(SUFFIX)]
    try:
        key_str = unquote_to_bytes(encoded).decode("utf-8", "surrogatepass")
    except UnicodeError:
        return None
    return key_str if encode_name(key_str) == relative else None


_Signature = tuple[int, int, int, int]  # inode, size, mtime_ns, ctime_ns


def _signature_of(st: os.stat_result) -> _Signature:
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class _KeyLock:
    """What a store holds for one thread: a lock for this process, the lock file's descriptor
    (opened on first use), and the counters of group commit: appends are counted under the
    lock, and one fsync after it covers every append made before it started, so writers do
    not wait in line for each other's fsync."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.local = threading.Lock()
        self.fd: int | None = None
        self.fd_ino = 0
        self.data: int | None = None  # the history file, kept open for appends (under the lock)
        self.data_ino = 0
        self.commits = GroupCommit()  # appends are counted under the lock

    def acquire(self, mode: int, mkdir: Callable[[Path], None]) -> None:
        """Hold the lock file (the local lock is held). A lock file removed or replaced
        under us is opened again, so that every process locks the same file."""
        while True:
            if self.fd is None:
                mkdir(self.path.parent)
                self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, mode)
                self.fd_ino = os.fstat(self.fd).st_ino
            fcntl.flock(self.fd, fcntl.LOCK_EX)
            try:
                current = os.stat(self.path).st_ino
            except FileNotFoundError:
                current = None
            if current == self.fd_ino:
                return
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            self.close()

    def release(self) -> None:
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)

    def append(self, path: Path, ino: int, data: bytes) -> _Signature:
        """Append `data` to the history file at `path`, whose inode is `ino` (under the lock);
        the file's signature after it."""
        if self.data is None or self.data_ino != ino:
            self.close_data()
            self.data = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
            self.data_ino = os.fstat(self.data).st_ino
        view = memoryview(data)
        while view:
            view = view[os.write(self.data, view) :]
        return _signature_of(os.fstat(self.data))

    def sync(self) -> None:
        """fsync the history file (under the commits' `sync_lock`, which `close_data` takes too).
        It is closed only when removed or rewritten (a rewrite is fsynced whole, appends
        included) or when the lock is evicted (with nothing left to sync)."""
        if self.data is not None:
            os.fsync(self.data)

    def close_data(self) -> None:
        if self.data is not None:
            with self.commits.sync_lock:  # not while an fsync uses it
                os.close(self.data)
                self.data = None

    def close(self) -> None:
        self.close_data()
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


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


class FileStore(DeferredAppends, Store):
    """Histories as files under `directory`, one per thread.

    The last text read or written for each file is kept with the file's
    signature (inode, size, modification times); a read whose signature still
    matches costs one `stat`, so long histories are not re-read on every step.
    Any change by another process changes the signature: appends grow the size,
    rewrites rename a new inode into place.
    """

    kind = "file"

    def __init__(self, directory: str | os.PathLike[str], *, mode: int = 0o600, fsync: bool = True) -> None:
        self.directory = Path(directory)
        self.mode = mode
        self.dir_mode = mode | ((mode & 0o444) >> 2)  # x wherever r: 0600 -> 0700
        self.fsync = fsync
        self._mkdir(self.directory)
        self._texts: OrderedDict[str, tuple[_Signature, str]] = OrderedDict()  # the last texts, by thread
        self._locks: OrderedDict[str, _KeyLock] = OrderedDict()  # by thread, most recent last
        self._guard = threading.Lock()

    def _mkdir(self, path: Path) -> None:
        """Create `path` and any missing parents, each with the store's mode (mkdir's
        `parents=True` would give the parents the umask's)."""
        try:
            missing = []
            while not path.exists():
                missing.append(path)
                path = path.parent
            for directory in reversed(missing):
                try:
                    directory.mkdir(mode=self.dir_mode)
                except FileExistsError:
                    pass
        except OSError as exc:
            raise StoreError(f"cannot create the store directory {exc.filename or path}: {exc}") from exc

    def path(self, key: str) -> Path:
        """The file that holds `key`."""
        return self.directory / encode_name(key)

    def _key_lock(self, key: str) -> _KeyLock:
        """The thread's `_KeyLock`; the least recently used ones not in use are closed."""
        with self._guard:
            lock = self._locks.get(key)
            if lock is None:
                name = encode_name(key).replace("/", "~")[-_SEGMENT:]
                lock = self._locks[key] = _KeyLock(self.directory / _LOCKS / (name + ".lock"))
                for old_key in list(self._locks)[: max(0, len(self._locks) - LOCKS_KEPT)]:
                    old = self._locks[old_key]
                    if old.local.acquire(blocking=False):  # in use: keep it for now
                        if not old.commits.pending or not self.fsync:  # else a flush still needs it
                            del self._locks[old_key]
                            old.close()
                        old.local.release()
            else:
                self._locks.move_to_end(key)
            return lock

    @contextmanager
    def _lock(self, key: str) -> Iterator[_KeyLock]:
        """Hold the thread's lock: a threading lock in this process, then the lock file."""
        lock = self._key_lock(key)
        with lock.local:
            lock.acquire(self.mode, self._mkdir)
            try:
                yield lock
            finally:
                lock.release()

    @staticmethod
    def _signature(path: Path) -> _Signature | None:
        try:
            return _signature_of(os.stat(path))
        except FileNotFoundError:
            return None

    def read(self, key: str) -> str | None:
        return self._read(key)[0]

    def _read(self, key: str) -> tuple[str | None, _Signature | None]:
        """The text and the signature it was read at (None, None when there is no file)."""
        path = self.path(key)
        signature = self._signature(path)
        if signature is None:
            self._texts.pop(key, None)
            return None, None
        cached = self._texts.get(key)
        if cached is not None and cached[0] == signature:
            return cached[1], signature
        try:
            with open(path, "rb") as f:
                signature = _signature_of(os.fstat(f.fileno()))
                data = f.read()
        except FileNotFoundError:
            return None, None
        text = _text(key, data)
        self._remember(key, signature, text)
        return text, signature

    def _remember(self, key: str, signature: _Signature, text: str) -> None:
        self._texts[key] = (signature, text)
        self._texts.move_to_end(key)
        while len(self._texts) > TEXTS_KEPT:
            self._texts.popitem(last=False)

    def update(self, key: str, change: Change) -> str | None:
        return self.update_versioned(key, change)[0]

    def update_versioned(self, key: str, change: Change) -> tuple[str | None, _Signature | None]:
        ticket = 0
        with self._lock(key) as lock:
            old, signature = self._read(key)
            self._texts.pop(key, None)  # re-read after a failed write
            new = change(old)
            if new is None:
                if old is not None:
                    lock.close_data()
                    self._remove(key)
                return None, None
            if signature is not None and new.startswith(old):  # type: ignore[arg-type]
                if len(new) > len(old):  # type: ignore[arg-type]
                    ticket, signature = self._append(lock, key, signature[0], new[len(old) :])  # type: ignore[arg-type]
            else:
                lock.close_data()
                self._replace(key, new)
                signature = self._signature(self.path(key))
            if signature is not None:
                self._remember(key, signature, new)
        self._sync(lock, ticket)
        return new, signature

    def version(self, key: str) -> _Signature | None:
        return self._signature(self.path(key))

    def append_if_deferred(self, key: str, suffix: str, version: Hashable) -> _Signature | None:
        with self._lock(key) as lock:
            signature = self._signature(self.path(key))
            if version is None or signature is None or signature != version:
                return None
            self._texts.pop(key, None)
            return self._append(lock, key, signature[0], suffix)[1]

    def flush(self, key: str, *, linger: float = 0.0) -> None:
        """Return once every append of `key` so far is on disk. With `linger`, first wait up to
        that many seconds for another append of `key`, so that one fsync serves both (group
        commit, as PostgreSQL's ``commit_delay``)."""
        lock = self._key_lock(key)
        self._sync(lock, lock.commits.written, linger)

    def delete(self, key: str) -> None:
        with self._lock(key) as lock:
            self._texts.pop(key, None)
            lock.close_data()
            self._remove(key)

    def _remove(self, key: str) -> None:
        path = self.path(key)
        for doomed in (path, path.with_suffix(".key")) if path.parent.name == _LONG_DIR else (path,):
            try:
                doomed.unlink()
            except FileNotFoundError:
                pass

    def _append(self, lock: _KeyLock, key: str, ino: int, text: str) -> tuple[int, _Signature]:
        """Append under the thread's lock to its file (inode `ino`): the ticket to pass to
        `_sync` once the lock is released, and the file's signature."""
        signature = lock.append(self.path(key), ino, text.encode("utf-8", "surrogatepass"))
        return lock.commits.wrote(), signature

    def _sync(self, lock: _KeyLock, ticket: int, linger: float = 0.0) -> None:
        """Return once append `ticket` is on disk: one fsync serves every append made before it."""
        if self.fsync and ticket:
            lock.commits.flush(ticket, lock.sync, linger)

    def _replace(self, key: str, text: str) -> None:
        target = self.path(key)
        self._mkdir(target.parent)
        if target.parent.name == _LONG_DIR and not target.with_suffix(".key").exists():
            self._write_atomic(target.with_suffix(".key"), key)
        self._write_atomic(target, text)

    def _write_atomic(self, target: Path, text: str) -> None:
        tmp_dir = self.directory / _TMP
        self._mkdir(tmp_dir)
        fd, tmp = tempfile.mkstemp(dir=tmp_dir, suffix=".part")
        try:
            os.fchmod(fd, self.mode)
            with open(fd, "w", encoding="utf-8", errors="surrogatepass", newline="") as f:
                f.write(text)
                f.flush()
                if self.fsync:
                    os.fsync(f.fileno())
            os.replace(tmp, target)
        except BaseException:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            raise
        if self.fsync:
            dir_fd = os.open(target.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)

    def close(self) -> None:
        """Close the lock files' descriptors (they open again on the next write)."""
        with self._guard:
            for lock in self._locks.values():
                with lock.local:
                    lock.close()

    def _walk(self) -> Iterator[tuple[str, str | None]]:
        for root, dirs, files in os.walk(self.directory):
            rel_root = os.path.relpath(root, self.directory)
            if rel_root == ".":
                dirs[:] = [d for d in dirs if d not in (_LOCKS, _TMP)]
                rel_root = ""
            for name in files:
                relative = f"{rel_root}/{name}" if rel_root else name
                if rel_root == _LONG_DIR:
                    if name.endswith(".key"):
                        continue
                    yield relative, self._long_key(relative)
                else:
                    yield relative, decode_name(relative)

    def _long_key(self, relative: str) -> str | None:
        """The key of a file named by its hash, from the `.key` file beside it."""
        try:
            key = (self.directory / relative).with_suffix(".key").read_bytes().decode("utf-8", "surrogatepass")
        except (OSError, UnicodeDecodeError):
            return None
        return key if encode_name(key) == relative else None

    def keys(self) -> Iterator[str]:
        for _relative, key in self._walk():
            if key is not None:
                yield key

    def foreign(self) -> list[str]:
        """Files in the directory that are not named as histories of ours."""
        return sorted(relative for relative, key in self._walk() if key is None)
