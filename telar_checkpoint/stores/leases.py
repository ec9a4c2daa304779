"""Leases: a writer keeps a lock between its writes, and a thread lets go of it when idle.

Taking and dropping an ``flock`` costs system calls on every write, and in a
Python process each one hands the GIL to another thread and waits to get it
back. A writer that writes the same file again soon (LangGraph writes a thread
several times a step) keeps the lock instead: a lease. `Leases` runs one daemon
thread per process that lets go of every lease left idle for `IDLE` seconds or
held for `MAX_HOLD`, so that other processes get their turn; a writer that had
to wait for one (`contended`) stops leasing for `CONTENDED` seconds, and then
both sides take turns a write at a time.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Protocol

IDLE = 0.01  # seconds without a write after which a lease is let go
MAX_HOLD = 0.1  # seconds after which a lease is let go however busy its writer
CONTENDED = 1.0  # seconds a writer that waited for another's lock does not lease


class Leased(Protocol):
    """What a lease holds: a lock its users hold while they use it, when it was taken and
    last used (`time.monotonic`), and a way to let it go."""

    local: threading.Lock
    since: float
    used: float

    def release(self) -> None:
        """Let go of the lease (called with `local` held)."""


class Leases:
    """The leases of a process, and the thread that lets go of the idle ones."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._wake = threading.Condition(threading.Lock())
        self._held: set[Leased] = set()
        self._thread: threading.Thread | None = None

    def hold(self, lease: Leased) -> None:
        """Count `lease` (just taken) among those to let go of when idle."""
        with self._wake:
            self._held.add(lease)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="telar-leases", daemon=True)
                self._thread.start()
            elif len(self._held) == 1:
                self._wake.notify()

    def forget(self, lease: Leased) -> None:
        """`lease` was let go of otherwise (its file closed)."""
        with self._wake:
            self._held.discard(lease)

    def _run(self) -> None:
        with self._wake:
            while True:
                if not self._held:
                    self._wake.wait()
                    continue
                now = time.monotonic()
                due = [lease for lease in self._held if now >= _due(lease)]
                if due:
                    self._wake.release()  # writers take their locks first, then this one
                    try:
                        for lease in due:
                            self._release_if_free(lease)
                    finally:
                        self._wake.acquire()
                    now = time.monotonic()
                if self._held:  # one in use is tried again a little later; never later than
                    # MAX_HOLD, whatever the clock said (a test's frozen or patched clock: a wait
                    # computed from it once held every lease of the process for an hour)
                    self._wake.wait(min(max(min(map(_due, self._held)) - now, IDLE / 4), MAX_HOLD))

    def _release_if_free(self, lease: Leased) -> None:
        """Let go of `lease` unless a writer is using it right now."""
        if not lease.local.acquire(blocking=False):
            return
        try:
            lease.release()
        except OSError:  # its descriptor is gone, and its lock with it: this thread goes on
            pass
        finally:
            with self._wake:
                self._held.discard(lease)
            lease.local.release()

    def after_fork_in_child(self) -> None:
        """The child has no releasing thread and holds no lease of its parent's."""
        self._reset()


def _due(lease: Leased) -> float:
    return min(lease.used + IDLE, lease.since + MAX_HOLD)


LEASES = Leases()

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=LEASES.after_fork_in_child)
