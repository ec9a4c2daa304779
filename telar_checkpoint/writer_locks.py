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

A writer may also leave its lines with the turns, as a `Batch`, for the next
writer of the thread to append together with its own: one store write (one
commit, one fsync) then serves both, and both return once it is durable.
"""

from __future__ import annotations

import asyncio
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from telar_checkpoint import forks
from telar_checkpoint.errors import StoreError
from telar_checkpoint.history import History

STRIPES = 64

def stripe(thread_id: str, stripes: int) -> int:
    """The stripe of `thread_id` among `stripes`."""
    return hash(thread_id) % stripes


class WriterLocks:
    """A `threading.Lock` per stripe for sync writers, and an `asyncio.Lock` per stripe and
    event loop (`Turns`, `AsyncTurns`). A forked child starts
    afresh, seen by its pid (`forks.pid`) as the stores see it: the parent's writers, their turns and their
    batches are not the child's. (Two of the child's threads that both start afresh at once
    take turns apart for a moment, which costs a retry, never a write: the store's
    compare-and-append settles races, the turns only spare them.)"""

    def __init__(self, stripes: int = STRIPES) -> None:
        self._stripes = stripes
        self._reset()

    def _reset(self) -> None:
        self._pid = forks.pid
        self._sync = [Turns() for _ in range(self._stripes)]
        self._async: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[AsyncTurns]] = weakref.WeakKeyDictionary()
        self._guard = threading.Lock()

    def sync(self, thread_id: str) -> Turns:
        """The turns sync writers of `thread_id` take (``with turns.lock``) while they write."""
        if self._pid != forks.pid:  # forked: the parent's turns (and what held them) are not ours
            self._reset()
        return self._sync[hash(thread_id) % len(self._sync)]  # (`stripe`, inline: on every write)

    def async_(self, thread_id: str) -> AsyncTurns:
        """The turns async writers of `thread_id` in the running event loop take (``async with turns.lock``)."""
        if self._pid != forks.pid:
            self._reset()
        loop = asyncio.get_running_loop()
        turns = self._async.get(loop)
        if turns is None:
            with self._guard:
                turns = self._async.setdefault(loop, [AsyncTurns() for _ in self._sync])
        return turns[stripe(thread_id, len(turns))]


class Batch:
    """Lines of one thread that wait, with the turns, for the next writer to append them.

    `version` is the store's version they append to and `history` the kept history
    with them added (None once a change needs a rewrite: the batch then goes the slow
    way). `changes` are the changes themselves, applied to the stored string when the
    store moved on. `done` is set once the batch is durable or failed.
    """

    def __init__(self, version: Any, history: History, done: threading.Event | asyncio.Event) -> None:
        self.version = version
        self.history: History | None = history
        self.text = ""
        self.changes: list[Any] = []  # the typed changes (`writing.Change`) of its writers
        self.done = done
        self.error: BaseException | None = None

    def finish(self, error: BaseException | None = None) -> None:
        """Wake the writers whose lines this batch holds: their write is durable, or failed."""
        if error is not None and not isinstance(error, Exception):  # the carrier was interrupted
            error = StoreError(f"the write carrying these pending writes was interrupted ({type(error).__name__})")
        self.error = error
        self.done.set()

    def result(self) -> None:
        """Raise the error that stopped the batch, if any (once `done` is set)."""
        if self.error is not None:
            raise self.error


class carrying:  # (lower case, as `contextlib.suppress`: it reads as `with carrying(batch):`)
    """A step of writing `batch` (if any): a failure fails it too; with `finish`, success
    finishes it (its writers return). (A class, not a `contextmanager`: it is on every write.)"""

    __slots__ = ("batch", "finish")

    def __init__(self, batch: Batch | None, *, finish: bool = False) -> None:
        self.batch, self.finish = batch, finish

    def __enter__(self) -> None:
        pass

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        if self.batch is None:
            return
        if exc is not None:
            self.batch.finish(exc)
        elif self.finish:
            self.batch.finish()


class _Stripe:
    """What a stripe of writers shares: its `lock` (held with ``with`` or ``async with`` while a
    writer writes), each thread's `Batch` waiting for a writer (used under the lock), and the
    kind of event a batch's writers wait on."""

    def __init__(self, lock: Any, event: Callable[[], Any]) -> None:
        self.lock = lock
        self.event = event
        self.batches: dict[str, Batch] = {}


class Turns(_Stripe):
    """The turns of sync writers of a stripe: a `threading.Lock`."""

    def __init__(self) -> None:
        super().__init__(threading.Lock(), threading.Event)


class AsyncTurns(_Stripe):
    """The turns of the coroutines of one event loop: an `asyncio.Lock`."""

    def __init__(self) -> None:
        super().__init__(asyncio.Lock(), asyncio.Event)


class Lingers:
    """How long a thread's pending writes may wait for the next write to carry them (`Batch`).

    LangGraph follows a task's `put_writes` with the step's `put` within a
    millisecond or so, from another thread. The gap between a `put_writes` and the
    next write of its thread is learned (a moving average per stripe); a
    `put_writes` lingers only when that gap has been short, up to twice the average
    and at most `limit` seconds. A linger that no write ended (a caller that writes
    one thing after another, say) was futile: lingering then backs off, skipping
    twice as many `put_writes` each time (up to `MAX_SKIP`), until one pays off.
    """

    MAX_SKIP = 64

    def __init__(self, limit: float, stripes: int = STRIPES, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit, self._clock = limit, clock
        self._last = [0.0] * stripes  # when the last put_writes of the stripe was written
        self._lingered = [0.0] * stripes  # how long it lingered
        self._gap = [limit * 2] * stripes  # average gap to the next write (starts: too long)
        self._backoff = [0] * stripes  # put_writes to skip after futile lingers, and the next backoff
        self._skip = [0] * stripes

    def wrote(self, thread_id: str, *, writes: bool) -> float:
        """Record a write of `thread_id`; for pending writes, how long to linger."""
        if not self.limit:  # a store where lingering does not pay (`Store.carry_writes`): nothing to learn
            return 0.0
        i, now = stripe(thread_id, len(self._last)), self._clock()
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
