"""Per-thread writer locks for one saver: its writers of a thread take turns.

LangGraph writes a step's checkpoint and its tasks' pending writes from several
executor threads at once. Without turns, all of them would start from the same
kept history, one would append, and the rest would find the store moved on and
fall back to reading and rewriting the thread. With turns, each writer starts
from the history the one before it kept, and appends. Other processes still race;
the store's compare-and-append settles that.

The locks are striped (a fixed number, chosen by the thread id's hash), so memory
stays bounded however many threads a saver writes; two threads that share a stripe
only wait for each other a little.
"""

from __future__ import annotations

import asyncio
import threading
import time
import weakref

STRIPES = 64


def stripe(thread_id: str, stripes: int) -> int:
    """The stripe of `thread_id` among `stripes`."""
    return hash(thread_id) % stripes


class WriterLocks:
    """A `threading.Lock` per stripe for sync writers, and an `asyncio.Lock` per stripe and
    event loop; each counts the writers waiting for it (`waiting`)."""

    def __init__(self, stripes: int = STRIPES) -> None:
        self._sync = [_Turns() for _ in range(stripes)]
        self._async: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[_AsyncTurns]] = weakref.WeakKeyDictionary()
        self._guard = threading.Lock()

    def sync(self, thread_id: str) -> _Turns:
        """The turns sync writers of `thread_id` take (``with``) while they write."""
        return self._sync[stripe(thread_id, len(self._sync))]

    def async_(self, thread_id: str) -> _AsyncTurns:
        """The turns async writers of `thread_id` in the running event loop take (``async with``)."""
        loop = asyncio.get_running_loop()
        turns = self._async.get(loop)
        if turns is None:
            with self._guard:
                turns = self._async.setdefault(loop, [_AsyncTurns() for _ in self._sync])
        return turns[stripe(thread_id, len(turns))]


class _Turns:
    """A lock that counts the writers waiting for it: a writer that sees others queued
    behind it can leave its fsync to the group commit that will serve them all."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count = threading.Lock()
        self.waiting = 0  # writers that want the lock and do not hold it yet

    def __enter__(self) -> _Turns:
        with self._count:
            self.waiting += 1
        try:
            self._lock.acquire()
        finally:
            with self._count:
                self.waiting -= 1
        return self

    def __exit__(self, *exc: object) -> None:
        self._lock.release()

    def locked(self) -> bool:
        return self._lock.locked()


class _AsyncTurns:
    """`_Turns` for coroutines of one event loop (which need no lock to count)."""

    def __init__(self) -> None:
        self._lock = asyncio.Lock()
        self.waiting = 0

    async def __aenter__(self) -> _AsyncTurns:
        self.waiting += 1
        try:
            await self._lock.acquire()
        finally:
            self.waiting -= 1
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._lock.release()


class Lingers:
    """How long a thread's pending writes may wait for the next write to share its fsync.

    LangGraph follows a task's `put_writes` with the step's `put` within a
    millisecond or so, from another thread. The gap between a `put_writes` and the
    next write of its thread is learned (a moving average per stripe); a
    `put_writes` lingers only when that gap has been short, up to twice the average
    and at most `limit` seconds. A linger that no write ended (a caller that writes
    one thing after another, say) was futile: lingering then backs off, skipping
    twice as many `put_writes` each time (up to `MAX_SKIP`), until one pays off.
    """

    MAX_SKIP = 64

    def __init__(self, limit: float, stripes: int = STRIPES) -> None:
        self.limit = limit
        self._last = [0.0] * stripes  # when the last put_writes of the stripe was written
        self._lingered = [0.0] * stripes  # how long it lingered
        self._gap = [limit * 2] * stripes  # average gap to the next write (starts: too long)
        self._backoff = [0] * stripes  # put_writes to skip after futile lingers, and the next backoff
        self._skip = [0] * stripes

    def wrote(self, thread_id: str, *, writes: bool) -> float:
        """Record a write of `thread_id`; for pending writes, how long to linger."""
        i, now = stripe(thread_id, len(self._last)), time.monotonic()
        if self._last[i]:
            gap = now - self._last[i]
            self._gap[i] = 0.7 * self._gap[i] + 0.3 * gap
            if self._lingered[i]:
                if gap >= self._lingered[i]:  # futile: nothing came while it waited
                    self._backoff[i] = min(self.MAX_SKIP, 2 * self._backoff[i] or 1)
                    self._skip[i] = self._backoff[i]
                else:
                    self._backoff[i] = 0
            self._last[i] = 0.0
        if not writes:
            return 0.0
        self._last[i] = now
        linger = min(self.limit, 2 * self._gap[i]) if self._gap[i] < self.limit else 0.0
        if linger and self._skip[i]:
            self._skip[i] -= 1
            linger = 0.0
        self._lingered[i] = linger
        return linger
