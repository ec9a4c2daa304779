"""How a `FileStore` waits for an ``flock``: for a bounded time, then an error that names the holder.

A blocking ``flock`` waits for ever when its holder never lets go (a process stopped
with SIGSTOP, a lock taken by hand, or a bug), and a hang is worse than an error. So a
writer polls a non-blocking ``flock``, backing off from 0.5 ms to 5 ms, until `timeout`
seconds have passed, then raises `StoreBusyError` naming the thread, the file and, where
``/proc/locks`` tells it, the process that holds the lock.
"""

from __future__ import annotations

import fcntl
import os
import time

from telar_checkpoint.errors import StoreBusyError

FIRST_PAUSE = 0.0005  # seconds between the first tries; doubled up to LONGEST_PAUSE
LONGEST_PAUSE = 0.005


def flock_within(fd: int, timeout: float, *, key: str | None, path: str) -> None:
    """Hold an exclusive ``flock`` on `fd`, waiting at most `timeout` seconds for it."""
    deadline = time.monotonic() + timeout
    pause = FIRST_PAUSE
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            left = deadline - time.monotonic()
            if left <= 0:
                raise busy_error(fd, timeout, key=key, path=path) from None
            time.sleep(min(pause, left))
            pause = min(pause * 2, LONGEST_PAUSE)


def busy_error(fd: int, timeout: float, *, key: str | None, path: str) -> StoreBusyError:
    """The error for a lock on `fd`'s file still held by another after `timeout` seconds."""
    holders = lock_holders(os.fstat(fd).st_ino)
    if not holders:
        who = "another writer"
    elif holders == [os.getpid()]:
        who = f"another store or file descriptor of this process (pid {os.getpid()})"
    else:
        who = "process " + ", ".join(str(pid) for pid in holders)
    where = f"thread {key!r}: " if key is not None else ""
    return StoreBusyError(
        f"{where}{path} stayed locked by {who} for {timeout:g} s; nothing was written and what was "
        "stored is as it was. If that process is stopped or stuck, end it; otherwise raise the "
        "store's lock_timeout"
    )


def lock_holders(inode: int) -> list[int]:
    """The pids that hold an ``flock`` on the file with `inode`, as ``/proc/locks`` lists
    them (Linux); empty where it cannot be told."""
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as locks:
            lines = locks.read().splitlines()
    except OSError:
        return []
    pids = []
    for line in lines:
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 4242 08:01:131 0 EOF"; a waiter's line has "->" after the number
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5].rsplit(":", 1)[-1] == str(inode):
            try:
                pids.append(int(fields[4]))
            except ValueError:
                continue
    return sorted(set(pids))
