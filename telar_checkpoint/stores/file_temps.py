"""The temporary files of a `FileStore`'s rewrites, in its ``.tmp`` directory.

A rewrite writes the new text to a temporary file there, fsyncs it and renames it
over the history file. The temporary file is locked (``flock``) until renamed, which
tells a live writer's file from one that a killed writer left behind: such a file is
stale once no one locks it and it is over `STALE_AFTER` seconds old.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import stat
import time

from telar_checkpoint.errors import ForeignDataError
from telar_checkpoint.stores.file_access import CLOEXEC, NOFOLLOW, NONBLOCK, open_directory

TMP = ".tmp"
STALE_AFTER = 60.0  # seconds: a temporary file no writer locks and older than this is a killed rewrite's


def write_through_temp(tmp_dir: int, target_dir: int, name: str, data: bytes, *, mode: int, fsync: bool) -> None:
    """Write `data` to a new file in `tmp_dir` (locked until renamed) and rename it to `name`
    in `target_dir`; on any failure the temporary file is removed."""
    tmp = f"{os.getpid()}-{secrets.token_hex(6)}.part"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW | CLOEXEC, mode, dir_fd=tmp_dir)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.fchmod(fd, mode)  # (the umask may have taken bits from the mode)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if fsync:
            os.fsync(fd)
        os.replace(tmp, name, src_dir_fd=tmp_dir, dst_dir_fd=target_dir)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=tmp_dir)
        except OSError:
            pass
        raise
    finally:
        os.close(fd)


def stale_temp_files(root: str, *, remove: bool) -> list[str]:
    """The stale temporary files under the store directory `root`, relative to it; removed
    first when `remove`. None are listed when ``.tmp`` is missing or foreign (the store's
    `foreign` lists the latter)."""
    try:
        tmp_dir = open_directory(root, [TMP])
    except (FileNotFoundError, ForeignDataError):
        return []
    stale = []
    try:
        too_recent = time.time() - STALE_AFTER
        for name in sorted(os.listdir(tmp_dir)):
            if not name.endswith(".part"):
                continue
            try:
                fd = os.open(name, os.O_RDONLY | NOFOLLOW | NONBLOCK | CLOEXEC, dir_fd=tmp_dir)
            except OSError:  # gone meanwhile, or a link
                continue
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode) or st.st_mtime > too_recent:
                    continue
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:  # a live writer's
                    continue
                if remove:
                    try:
                        os.unlink(name, dir_fd=tmp_dir)
                    except FileNotFoundError:  # another thread of this process was first
                        continue
                stale.append(f"{TMP}/{name}")
            finally:
                os.close(fd)
    finally:
        os.close(tmp_dir)
    return stale
