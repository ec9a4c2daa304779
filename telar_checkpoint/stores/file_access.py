"""How a `FileStore` opens what is under its directory, and how it reports what went wrong.

Only regular files are read or written as histories, and no symbolic link is followed
below the store's directory: every open of a history file adds ``O_NOFOLLOW`` (a link
is refused, not followed to a file outside the store) and ``O_NONBLOCK`` (a FIFO does
not block the open), then checks with ``fstat``, which the store needs anyway, that it
holds a regular file. Anything else at a history's path is reported as foreign
(`ForeignDataError`, naming the path and what is there) and never touched. Nested
directories (long ids) are entered one at a time by descriptor, each with
``O_NOFOLLOW``. These flags cost no system call of their own.

Every `OSError` leaves a `FileStore` as a `StoreError` that names the thread and the
path, says what failed, and what to do (`store_error`). A file a tool writes beside a store's
threads (a backup, an export) gets the permissions of the thread files (`files_mode`).
"""

from __future__ import annotations

import errno
import os
import stat
from typing import TYPE_CHECKING

from telar_checkpoint.errors import ForeignDataError, StoreError, StoreFullError

if TYPE_CHECKING:
    from telar_checkpoint.stores.base import Store

NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
NONBLOCK = getattr(os, "O_NONBLOCK", 0)
CLOEXEC = getattr(os, "O_CLOEXEC", 0)
DIRECTORY = getattr(os, "O_DIRECTORY", 0)
DIR_FLAGS = os.O_RDONLY | DIRECTORY | NOFOLLOW | NONBLOCK | CLOEXEC
# what open says when it meets a link (ELOOP), a directory (EISDIR), a FIFO or socket with
# no reader (ENXIO), or, entering a directory, anything else (ENOTDIR)
_NOT_REGULAR = {errno.ELOOP, errno.EISDIR, errno.ENXIO, errno.ENOTDIR, errno.EOPNOTSUPP}
FULL = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC), errno.EFBIG}


def describe(path: str) -> str | None:
    """What is at `path` when it is not a regular file ("a FIFO", "a symbolic link to x", ...);
    None for a regular file or nothing."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return None
    if stat.S_ISLNK(mode):
        try:
            return f"a symbolic link to {os.readlink(path)!r}"
        except OSError:
            return "a symbolic link"
    return kind_of(mode)


def kind_of(mode: int) -> str | None:
    """What a file of `mode` is, None for a regular file."""
    for test, kind in (
        (stat.S_ISREG, None),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISLNK, "a symbolic link"),
    ):
        if test(mode):
            return kind
    return "not a regular file"


def foreign_error(key: str | None, path: str, what: str) -> ForeignDataError:
    """The error for `what` found at a history's `path`, which the store never touches."""
    return ForeignDataError(
        f"{path} is {what}, not a history file: the store reads and writes only regular files "
        "there and leaves this as it is; move it away to use this thread",
        thread_id=key,
    )


def open_regular(root: str, relative: str, flags: int, key: str | None, mode: int = 0o600) -> tuple[int, os.stat_result]:
    """Open `relative` under `root` (following no link below `root`, never blocking) and
    its ``fstat``. FileNotFoundError when it is absent; `ForeignDataError` when it or a
    directory on the way is not what a history's path holds."""
    parts = relative.split("/")
    flags |= NOFOLLOW | NONBLOCK | CLOEXEC
    if len(parts) == 1:
        fd = _open_checked(f"{root}/{relative}", flags, mode, key, root, relative)
    else:
        dir_fd = open_directory(root, parts[:-1], key)
        try:
            fd = _open_checked(parts[-1], flags, mode, key, root, relative, dir_fd=dir_fd)
        finally:
            os.close(dir_fd)
    try:
        st = os.fstat(fd)
        what = kind_of(st.st_mode)
        if what is not None:
            raise foreign_error(key, f"{root}/{relative}", what)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def _open_checked(path: str, flags: int, mode: int, key: str | None, root: str, relative: str, dir_fd: int | None = None) -> int:
    try:
        return os.open(path, flags, mode, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in _NOT_REGULAR:
            what = describe(f"{root}/{relative}")
            if what is not None:
                raise foreign_error(key, f"{root}/{relative}", what) from None
        raise


def open_directory(
    root: str, parts: list[str], key: str | None = None, *, create_mode: int | None = None, sync: bool = False
) -> int:
    """A descriptor of the directory `parts` under `root`, entered a step at a time with no
    link followed: `ForeignDataError` when one is not a directory. A missing one is created
    with `create_mode` (when given; else FileNotFoundError), and with `sync` made durable:
    the directory that holds each one created is fsynced, and so is the last one."""
    fd = os.open(root, os.O_RDONLY | DIRECTORY | CLOEXEC)
    created = False
    try:
        for number, part in enumerate(parts):
            path = "/".join([root, *parts[: number + 1]])
            try:
                child = _enter(fd, part, path, key)
            except FileNotFoundError:
                if create_mode is None:
                    raise
                try:
                    os.mkdir(part, create_mode, dir_fd=fd)
                    created = True
                    if sync:
                        os.fsync(fd)  # the new entry, in the directory that holds it
                except FileExistsError:
                    pass
                child = _enter(fd, part, path, key)
            os.close(fd)
            fd = child
        if created and sync:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _enter(dir_fd: int, part: str, path: str, key: str | None) -> int:
    try:
        return os.open(part, DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in _NOT_REGULAR:
            raise foreign_error(key, path, describe(path) or "not a directory") from None
        raise


def store_error(exc: OSError, *, doing: str, key: str | None, path: str, root: str) -> StoreError:
    """`exc`, met while `doing` something to `path`, as a `StoreError` that says what to do."""
    where = f"thread {key!r}: " if key is not None else ""
    path = exc.filename if isinstance(exc.filename, str) and exc.filename.startswith("/") else path
    reason = exc.strerror or str(exc)
    if exc.errno in FULL:
        return StoreFullError(
            f"{where}{doing} {path} failed: {reason}. Nothing was written and what was stored is as it "
            f"was; free space on the disk (or quota) that holds {root} and try again"
        )
    advice = {
        errno.EACCES: f"check that this process may read and write {root} and the files in it (owner, mode)",
        errno.EPERM: f"check that this process may read and write {root} and the files in it (owner, mode, attributes)",
        errno.EROFS: f"{root} is on a read-only file system: give the store a writable directory",
        errno.ENOTDIR: "part of that path is a file, not a directory: give the store a directory of its own",
        errno.EMFILE: "this process has too many files open: raise its limit (ulimit -n) or close some",
        errno.ENFILE: "the system has too many files open: close some and try again",
        errno.EIO: "the disk reported an I/O error: check it; the last writes may not be on disk",
    }.get(exc.errno or 0, "check the store's directory and try again")
    return StoreError(f"{where}{doing} {path} failed: {reason} ({errno.errorcode.get(exc.errno or 0, exc.errno)}); {advice}")


def files_mode(store: Store, thread_id: str | None = None) -> int:
    """The permissions of the files `store` keeps, which every other file written from it gets too
    (a repair's or a schema upgrade's backup, an export): those of the thread's file in a file
    store, else the store's `mode` (0600 by default)."""
    path = getattr(store, "path", None)
    if thread_id is not None and store.kind == "file" and callable(path):
        try:
            return stat.S_IMODE(os.stat(path(thread_id)).st_mode)
        except OSError:
            pass
    mode = getattr(store, "mode", None)
    return mode if isinstance(mode, int) and not isinstance(mode, bool) else 0o600
