"""`FileStore`: one file per thread in a directory, written atomically.

Any thread id maps to a safe, reversible file name: bytes outside
``[A-Za-z0-9_-]`` are percent-encoded (so no ``/``, ``..``, NUL or newline
reaches the filesystem), and a name longer than a path component allows is cut
into nested ``.d`` directories. A write that extends the file is an append,
durable when acknowledged: a lone one syncs itself as it writes (``RWF_DSYNC``),
a batch shares one ``fsync``; any other write goes to a temporary file that is
fsynced and renamed over the old one. Writers of one thread, in threads or in
processes, are serialized by ``flock`` on its history file, whose descriptor
stays open (for the most recently used threads). A writer keeps the lock
between its writes, as a lease (`leases`), so that a write under it is the
append and an ``fstat``, which gives the new version and finds out whether a
person or a tool that takes no lock changed the file meanwhile (the append is
then taken back and the change made again on what is there). Creating or removing a file takes ``flock`` on the store's
directory instead. Files and directories are created owner-only (0600 / 0700)
unless `mode` says otherwise.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import hashlib
import os
import tempfile
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import unquote_to_bytes

from telar_checkpoint.errors import ForeignDataError, StoreError
from telar_checkpoint.stores.base import Change, Store
from telar_checkpoint.stores.group_commit import DeferredAppends, GroupCommit
from telar_checkpoint.stores.leases import CONTENDED, LEASES

SUFFIX = ".jsonl"
_SEGMENT = 200  # characters of an encoded name per path component
_LONG = 1000  # an encoded name longer than this is stored under its hash, in _LONG_DIR
_LONG_DIR = "~long"  # "~" is never in an encoded name, so these never collide with one
TEXTS_KEPT = 32  # files whose last text is kept, to answer a read with one stat
FILES_KEPT = 128  # threads whose history file stays open (for appends and flock)
_SAFE = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
_TMP = ".tmp"
_DSYNC = {"flag": getattr(os, "RWF_DSYNC", 0) if hasattr(os, "pwritev") else 0}  # Linux 4.7+: a write that syncs itself


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


class _Handle:
    """What a store holds for one thread: a lock for this process, the history file's
    descriptor (opened on first use, kept open for appends and for ``flock``, which
    serializes writers in every process), and the counters of group commit: appends are
    counted under the lock, and one fsync after it covers every append made before it
    started, so writers do not wait in line for each other's fsync.

    A writer keeps the ``flock`` after its write, as a lease (see `leases`), with the
    file's stat as of its last write: the next write needs no ``flock`` and no ``stat``. No
    store can change the file meanwhile, but a person or a tool that takes no lock can:
    the ``fstat`` after each append finds that out (the size is not what it left plus what
    it wrote, or the file is unlinked), and the append is taken back. `LEASES` lets go of
    the lease once idle."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.local = threading.Lock()
        self.fd: int | None = None
        self.ino = 0
        self.commits = GroupCommit()
        self.st: os.stat_result | None = None  # while the flock is held: the file's stat
        self.since = self.used = 0.0  # when the flock was taken, and last used
        self.contended_until = 0.0  # until then, let go of the flock after each write
        self.left: _Signature | None = None  # the file's signature when this last let go of it
        self.leased = False  # the flock is kept between writes (counted in `LEASES`)

    def lock(self) -> os.stat_result | None:
        """Hold ``flock`` on the file now at `path` (the local lock is held): the file's stat,
        or None, holding nothing, when there is no file. A file replaced or removed while this
        waited (a rewrite renames a new file into place) is let go and the new one locked, so
        that every process locks the file that is there."""
        if self.st is not None:  # leased: no store can have written since (see `append`)
            return self.st
        while True:
            if self.fd is None:
                try:
                    self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
                except FileNotFoundError:
                    return None
                self.ino = os.fstat(self.fd).st_ino
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # another process (or store) writes it: take turns a while
                # (the other side finds the file changed when it next takes the lock)
                self.contended_until = time.monotonic() + CONTENDED
                fcntl.flock(self.fd, fcntl.LOCK_EX)
            try:
                st = os.stat(self.path)
            except FileNotFoundError:
                st = None
            if st is not None and st.st_ino == self.ino:
                self.st, self.since = st, time.monotonic()
                if self.left is not None and _signature_of(st) != self.left:  # another wrote meanwhile
                    self.contended_until = self.since + CONTENDED
                self.left = None
                return st
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            self.close()

    def done(self) -> None:
        """A write is over (the local lock is held): keep the ``flock`` as a lease, or let it go
        when other writers have been waiting for it lately."""
        if self.st is None:
            return
        self.used = time.monotonic()
        if self.used < self.contended_until:
            self.release()
        elif not self.leased:
            self.leased = True
            LEASES.hold(self)

    def release(self) -> None:
        """Let go of the ``flock`` (the local lock is held). A handle let go of here may still
        be counted in `LEASES`, whose thread drops it, harmlessly, on its next pass."""
        if self.st is not None:
            self.left, self.st = _signature_of(self.st), None
            fcntl.flock(self.fd, fcntl.LOCK_UN)  # type: ignore[arg-type]
        self.leased = False

    def append(self, data: bytes, *, durable: bool = False) -> _Signature | None:
        """Append `data` to the locked file, `durable` on disk when this returns (data and
        size, as fdatasync, in the same system call where the platform allows); the file's
        signature after it. None, with nothing appended, when the file turns out to have
        been changed by another hand since this handle last saw it (a person or a tool
        that takes no lock: no store can, while the lock is held): the caller looks again."""
        assert self.fd is not None and self.st is not None
        expected = self.st.st_size + len(data)
        view = memoryview(data)
        dsync = _DSYNC["flag"] if durable else 0
        while view:
            if dsync:
                try:
                    view = view[os.pwritev(self.fd, [view], -1, dsync) :]
                    continue
                except OSError as exc:  # an older kernel: nothing written; write, then fsync
                    if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                        raise
                    _DSYNC["flag"] = dsync = 0
            view = view[os.write(self.fd, view) :]
        if durable and not dsync:
            os.fsync(self.fd)
        st = os.fstat(self.fd)
        if st.st_size == expected and st.st_nlink:
            self.st = st
            return _signature_of(st)
        if st.st_nlink:  # appended after text it did not see: take it back
            os.ftruncate(self.fd, st.st_size - len(data))
        self.forget()  # (an unlinked file is replaced or removed: the path is looked up again)
        return None

    def forget(self) -> None:
        """Let go of the ``flock`` and of what this handle knew of the file, which another hand
        changed (the local lock is held)."""
        self.release()
        self.left = None

    def sync(self) -> None:
        """fsync the history file (under the commits' `sync_lock`, which `close` takes too).
        It is closed only when removed or rewritten (a rewrite is fsynced whole, appends
        included) or when the handle is evicted (with nothing left to sync)."""
        if self.fd is not None:
            os.fsync(self.fd)

    def close(self) -> None:
        """Close the file, which lets go of its ``flock`` too."""
        if self.fd is not None:
            with self.commits.sync_lock:  # not while an fsync uses it
                os.close(self.fd)
                self.fd = None
        self.st = self.left = None
        if self.leased:
            self.leased = False
            LEASES.forget(self)


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


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_parents_files)


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
        self._root = os.fspath(self.directory)
        self.mode = mode
        self.dir_mode = mode | ((mode & 0o444) >> 2)  # x wherever r: 0600 -> 0700
        self.fsync = fsync
        self._mkdir(self.directory)
        self._texts: OrderedDict[str, tuple[_Signature, str]] = OrderedDict()  # the last texts, by thread
        self._handles: OrderedDict[str, _Handle] = OrderedDict()  # by thread, most recent last
        self._guard = threading.Lock()
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

    def _path(self, key: str) -> str:
        return f"{self._root}/{encode_name(key)}"

    def _handle(self, key: str) -> _Handle:
        """The thread's `_Handle`; the least recently used ones not in use are closed."""
        with self._guard:
            handle = self._handles.get(key)
            if handle is None:
                handle = self._handles[key] = _Handle(self._path(key))
                for old_key in list(self._handles)[: max(0, len(self._handles) - FILES_KEPT)]:
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
    def _locked(self, key: str) -> Iterator[tuple[_Handle, os.stat_result | None]]:
        """Hold the thread's lock (a threading lock in this process, then ``flock`` on its
        file, which stays held a while as a lease): the handle and the file's stat, None when
        there is no file. After a failed write the ``flock`` is let go, and the next writer
        looks at the file afresh."""
        handle = self._handle(key)
        with handle.local:
            st = handle.lock()
            try:
                yield handle, st
            except BaseException:
                handle.release()
                raise
            handle.done()

    @contextmanager
    def _creating(self) -> Iterator[None]:
        """Hold ``flock`` on the store's directory, which creating or removing a history
        file takes (rare: a file's other writes take its own lock)."""
        fd = os.open(self._root, os.O_RDONLY | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    @staticmethod
    def _signature(path: str) -> _Signature | None:
        try:
            return _signature_of(os.stat(path))
        except FileNotFoundError:
            return None

    def read(self, key: str) -> str | None:
        return self._read(key)[0]

    def _read(self, key: str, st: os.stat_result | None = None) -> tuple[str | None, _Signature | None]:
        """The text and the signature it was read at (None, None when there is no file);
        `st`, the file's stat when the caller has it."""
        path = self._path(key)
        signature = _signature_of(st) if st is not None else self._signature(path)
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
        while True:
            with self._locked(key) as (handle, st):
                if st is None:
                    created = self._create(key, change)
                    if created is None:
                        continue  # another writer created the file first: change what it wrote
                    return created
                old, signature = self._read(key, st)
                self._texts.pop(key, None)  # re-read after a failed write
                new = change(old)
                ticket = 0
                if new is None:
                    self._remove(key, handle)
                    return None, None
                if new.startswith(old):  # type: ignore[arg-type]
                    if len(new) > len(old):  # type: ignore[arg-type]
                        appended = self._append(handle, new[len(old) :])  # type: ignore[arg-type]
                        if appended is None:
                            continue  # the file was changed by another hand: change what is there
                        ticket, signature = appended
                    self._remember(key, signature, new)  # type: ignore[arg-type]
                else:
                    if self._signature(self._path(key)) != signature:  # under a lease, `st` is not a fresh look
                        handle.forget()
                        continue
                    signature = self._replace(key, new)
                    handle.close()  # the file it locked was replaced (which lets the lock go)
            self._sync(handle, ticket)
            return new, signature

    def _create(self, key: str, change: Change) -> tuple[str | None, _Signature | None] | None:
        """Create the thread's file with what `change` makes of no history; None when
        another writer created it first."""
        with self._creating():
            if os.path.exists(self._path(key)):
                return None
            new = change(None)
            if new is None:
                return None, None
            return new, self._replace(key, new)

    def version(self, key: str) -> _Signature | None:
        return self._signature(self._path(key))

    def append_if_deferred(self, key: str, suffix: str, version: Hashable, *, batch: bool = False) -> _Signature | None:
        if version is None:
            return None
        with self._locked(key) as (handle, st):
            if st is None or _signature_of(st) != version:
                return None
            self._texts.pop(key, None)
            appended = self._append(handle, suffix, batch=batch)
            return None if appended is None else appended[1]

    def flush(self, key: str) -> None:
        """Return once every append of `key` so far is on disk."""
        handle = self._handle(key)
        self._sync(handle, handle.commits.written)

    def delete(self, key: str) -> None:
        with self._locked(key) as (handle, st):
            self._texts.pop(key, None)
            if st is not None:
                self._remove(key, handle)

    def _remove(self, key: str, handle: _Handle) -> None:
        """Remove the locked file of `key` (and the `.key` file of a long name) and close it."""
        path = self.path(key)
        with self._creating():  # not while a creator looks for the `.key` file
            for doomed in (path, path.with_suffix(".key")) if path.parent.name == _LONG_DIR else (path,):
                try:
                    doomed.unlink()
                except FileNotFoundError:
                    pass
        handle.close()

    def _append(self, handle: _Handle, text: str, *, batch: bool = False) -> tuple[int, _Signature] | None:
        """Append to the locked file: the ticket to pass to `_sync` once the lock is released,
        and the file's signature; None when another hand had changed the file (nothing is
        appended then). A lone write (not part of a `batch`, and none waiting for an fsync)
        makes itself durable as it writes: one system call instead of two, and the lock it
        holds meanwhile keeps nobody waiting."""
        data = text.encode("utf-8", "surrogatepass")
        durable = self.fsync and not batch and not handle.commits.pending
        signature = handle.append(data, durable=durable)
        if signature is None:
            return None
        return (handle.commits.wrote_durable() if durable else handle.commits.wrote()), signature

    def _sync(self, handle: _Handle, ticket: int) -> None:
        """Return once append `ticket` is on disk: one fsync serves every append made before it."""
        if self.fsync and ticket:
            handle.commits.flush(ticket, handle.sync)

    def _replace(self, key: str, text: str) -> _Signature | None:
        """Write `text` whole as the file of `key` (and remember it): the file's signature."""
        target = self.path(key)
        self._mkdir(target.parent)
        if target.parent.name == _LONG_DIR and not target.with_suffix(".key").exists():
            self._write_atomic(target.with_suffix(".key"), key)
        self._write_atomic(target, text)
        signature = self._signature(self._path(key))
        if signature is not None:
            self._remember(key, signature, text)
        return signature

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
        """Close the history files kept open (they open again on the next write)."""
        with self._guard:
            for handle in self._handles.values():
                with handle.local:
                    handle.close()

    def _walk(self) -> Iterator[tuple[str, str | None]]:
        for root, dirs, files in os.walk(self.directory):
            rel_root = os.path.relpath(root, self.directory)
            if rel_root == ".":
                dirs[:] = [d for d in dirs if d != _TMP]
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
