"""A thread's lifetime: when it was deleted, as the record a deleted thread leaves, and when it
expires, under a time-to-live.

A deleted thread (`TelarSaver.delete_thread`, `prune(strategy="delete")`, an expiry) is
rewritten to its record, the root `dropped` line's `deleted_before` and `deleted_at`
(docs/FORMAT.md): a run that still writes to it is refused (`ThreadDeletedError`,
`rules.DeleteThread`), and every reader sees no thread. `deletion` makes that record from a
clock, the saver's (`time.time` unless it was given another, as tests do).

A time-to-live (`TTL`, read by `ttl_settings` in the keys and units of langgraph.json's
`checkpointer.ttl` and of langgraph-checkpoint-redis' `ttl`) makes a thread expire once it has
been idle that long. Its clock is kept in two places, and a thread expires only when both say
so (`Lifetimes`):

- in its data: the time of its newest checkpoint, which its id tells (`checkpoint_time`), read
  with the history at no cost, and atomic with every change of it;
- in the store's expiries (`Store.expire_at`; every store keeps them): a time recorded after each write (and
  read, with `refresh_on_read`), rounded up to a grain of a hundredth of the time-to-live
  (`grain`), so that a busy thread records it once a grain, not once a write; a copy, a
  migration or an import records it too, so their old checkpoints start a fresh clock.

A thread with no recorded expiry does not expire (one written before the saver had a
time-to-live, or trimmed by a `keep_latest` expiry until it is written again). A thread's own
time-to-live (`TelarSaver.set_thread_ttl`) is kept on its root `dropped` line, so every process
reads it with the history.
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Literal, cast
from uuid import UUID

from telar_checkpoint.errors import ArgumentTypeError, UsageError
from telar_checkpoint.format import UUID_EPOCH, checkpoint_time
from telar_checkpoint.history import History
from telar_checkpoint.rules import DeleteThread, KeepLatest, apply

Clock = Callable[[], float]
"""Seconds since the Unix epoch, as `time.time` gives them."""



def deletion(now: float) -> DeleteThread:
    """The deletion of a thread at `now`: its mark is the greatest checkpoint id LangGraph can
    have made by then (a uuid6 of that instant with every later field at its maximum), so every
    checkpoint of a run that started before compares below it, from any process whose clock is
    not ahead of this one."""
    ticks = int(now * 10_000_000) + UUID_EPOCH
    value = ((ticks >> 12) & 0xFFFFFFFFFFFF) << 80 | 0x6 << 76 | (ticks & 0x0FFF) << 64 | 0xBFFF << 48 | 0xFFFFFFFFFFFF
    return DeleteThread(str(UUID(int=value)), datetime.fromtimestamp(now, timezone.utc).isoformat())


STRATEGIES = ("delete", "keep_latest")


@dataclass(frozen=True, slots=True)
class TTL:
    """A time-to-live, as `ttl_settings` reads it: minutes (fractions allowed) since a thread's
    last write (and read, with `refresh_on_read`) before it expires (None: none by default);
    what an expiry does (`strategy`); minutes between background sweeps (None: none)."""

    default_ttl: float | None = None
    refresh_on_read: bool = False
    strategy: str = "delete"
    sweep_interval_minutes: float | None = None


def _is_minutes(value: object) -> bool:
    """Whether `value` is a time-to-live in minutes: a positive finite int or float (not a bool)."""
    if type(value) not in (int, float):
        return False
    number = cast(float, value)
    return math.isfinite(number) and number > 0


def _minutes(settings: Mapping[str, Any], key: str) -> float | None:
    value = settings.get(key)
    if value is None:
        return None
    if not _is_minutes(value):
        raise UsageError(f"ttl[{key!r}] should be a positive number of minutes (fractions allowed) or None, not {value!r}")
    return float(value)


def own_ttl(minutes: float | None | Literal["default"]) -> float | None:
    """A thread's own time-to-live as `DroppedLine.ttl` holds it, from what `set_thread_ttl`
    takes: minutes, None (it never expires: math.inf) or "default" (None: the saver's)."""
    if minutes == "default":
        return None
    if minutes is None:
        return math.inf
    if not _is_minutes(minutes):
        raise UsageError(f"set_thread_ttl: minutes should be a positive number, None (never expires) or 'default', not {minutes!r}")
    return float(minutes)


def ttl_settings(settings: Mapping[str, Any]) -> TTL:
    """The `TTL` of a mapping with the keys `default_ttl`, `refresh_on_read`, `strategy` and
    `sweep_interval_minutes` (each optional); UsageError naming a key that is unknown or a
    value that is not of its kind."""
    if not isinstance(settings, Mapping):
        raise ArgumentTypeError(f"ttl should be a dict such as {{'default_ttl': 43200}}, not {type(settings).__name__}")
    known = TTL.__dataclass_fields__.keys()
    unknown = [key for key in settings if key not in known]
    if unknown:
        raise UsageError(f"ttl has no key {unknown[0]!r}; its keys are {', '.join(known)}")
    refresh = settings.get("refresh_on_read", False)
    if type(refresh) is not bool:
        raise UsageError(f"ttl['refresh_on_read'] should be True or False, not {refresh!r}")
    strategy = settings.get("strategy", "delete")
    if strategy not in STRATEGIES:
        raise UsageError(f"ttl['strategy'] should be 'delete' or 'keep_latest', not {strategy!r}")
    return TTL(_minutes(settings, "default_ttl"), refresh, strategy, _minutes(settings, "sweep_interval_minutes"))


def written_at(history: History) -> float | None:
    """When the history's newest checkpoint was made (its data clock), None when it holds none
    or its ids tell no time."""
    return checkpoint_time(history.newest_id) if history.newest_id else None


def grain(seconds: float) -> float:
    """How finely an expiry is recorded for a time-to-live of `seconds`: a hundredth of it,
    between a second and an hour (a thread lives at most that much longer than its TTL)."""
    return min(max(seconds / 100, 1.0), 3600.0)


def expiry_after(now: float, seconds: float) -> float:
    """The expiry to record for a thread written or read at `now`: `now + seconds`, rounded up
    to its `grain` (never earlier than the time-to-live says)."""
    step = grain(seconds)
    return math.ceil((now + seconds) / step) * step


MEMO_THREADS = 4096  # threads whose recorded expiry a saver remembers


class Lifetimes:
    """A saver's time-to-live at work: the `TTL`, the clock, and what the saver knows of each
    thread's expiry in the store (the last it recorded or read, for `MEMO_THREADS` threads: a
    thread forgotten costs one more call to the store, nothing else). Only ever later than
    the truth: an expiry in the store only grows, but for `set_thread_ttl`, which rewrites the
    thread, and the memo is kept with the time-to-live it was made for."""

    def __init__(self, ttl: TTL, clock: Clock) -> None:
        self.ttl, self.clock = ttl, clock
        # thread -> (expiry, ttl seconds, the last time a write leaves that expiry enough: `quiet`)
        self._memo: OrderedDict[str, tuple[float | None, float | None, float]] = OrderedDict()
        self._lock = threading.Lock()

    def seconds(self, history: History) -> float | None:
        """The thread's time-to-live in seconds: its own, else the default; None: it never expires."""
        minutes = history.own_ttl
        if minutes is None:
            minutes = self.ttl.default_ttl
        return None if minutes is None or minutes == math.inf else minutes * 60

    def idle(self, history: History, now: float, seconds: float | None) -> bool:
        """Whether the history's data lets the thread be expired at `now`: it has a time-to-live
        and its newest checkpoint is at least that old (or its ids tell no time)."""
        if seconds is None:
            return False
        made = written_at(history)
        return made is None or made + seconds <= now

    def known(self, thread_id: str, seconds: float | None) -> float | None:
        """The expiry remembered for the thread under this time-to-live; None when none is (not
        remembered, or none recorded)."""
        with self._lock:
            memo = self._memo.get(thread_id)
        return memo[0] if memo is not None and memo[1] == seconds else None

    def remember(self, thread_id: str, expiry: float | None, seconds: float | None) -> None:
        with self._lock:
            quiet_until = expiry - seconds if expiry is not None and seconds is not None else -math.inf
            self._memo[thread_id] = (expiry, seconds, quiet_until)
            self._memo.move_to_end(thread_id)
            while len(self._memo) > MEMO_THREADS:
                self._memo.popitem(last=False)

    def forget(self, thread_id: str) -> None:
        with self._lock:
            self._memo.pop(thread_id, None)

    def quiet(self, thread_id: str, now: float) -> bool:
        """Whether a write of the thread at `now` has nothing to do for its lifetime: this saver
        recorded (or read) an expiry for it at least a time-to-live after `now`, so the thread
        is live and the store keeps it that long already."""
        memo = self._memo.get(thread_id)
        return memo is not None and now <= memo[2]

    def due(self, thread_id: str, history: History, now: float) -> float | None:
        """The expiry to record after a write (or a refreshing read) of the thread at `now`, or
        None when the store already holds one as late (as far as this saver knows)."""
        seconds = self.seconds(history)
        if seconds is None:
            return None
        when = expiry_after(now, seconds)
        known = self.known(thread_id, seconds)
        return None if known is not None and known >= when else when

    def view(self, history: History) -> History:
        """What readers see of an expired thread: nothing (`"delete"`), or its latest checkpoint
        of each namespace and what a DeltaChannel needs of it (`"keep_latest"`)."""
        if self.ttl.strategy == "delete" or not history.entries:
            return History(history.thread_id)
        return apply(history, KeepLatest())[0]

    def expired_now(self, history: History, now: float) -> DeleteThread | KeepLatest | None:
        """What the sweep does to the thread read as `history` at `now`, given that the store's
        expiry of it has come: delete it, keep its latest checkpoint, or nothing (the data says
        it was written since, or it has no time-to-live any more)."""
        if not self.idle(history, now, self.seconds(history)) or not history.entries:
            return None
        if self.ttl.strategy == "keep_latest":
            return KeepLatest()
        # The mark is the greatest id the thread named (`rules.delete_thread`), not the sweep's
        # instant: a thread idle a time-to-live has no run writing to it, and a sweep whose clock
        # is ahead must not refuse a new run's first writes.
        return DeleteThread("", datetime.fromtimestamp(now, timezone.utc).isoformat())


RECORD_DAYS = 30  # how long a sweep keeps a deletion record when the saver has no default TTL


@dataclass(slots=True)
class SweepReport:
    """What a sweep did (or, with `dry_run`, would do): the threads it deleted and those it
    trimmed to their latest checkpoint (`"keep_latest"`), the records of deleted threads it
    removed once they were kept a time-to-live, the bytes (UTF-8) the store holds less, and the
    threads it could not read (thread id, error), left as they are. `skipped`: another sweep of
    the store held its lease, so this one did nothing."""

    deleted: list[str] = field(default_factory=list)
    trimmed: list[str] = field(default_factory=list)
    records_removed: int = 0
    bytes_freed: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)
    skipped: bool = False
    dry_run: bool = False
    examined: int = 0  # expired threads looked at (some found written since, and left)

    def add(self, other: SweepReport) -> None:
        """Count `other`'s work in this report too (a sweep run in parts)."""
        self.deleted += other.deleted
        self.trimmed += other.trimmed
        self.records_removed += other.records_removed
        self.bytes_freed += other.bytes_freed
        self.failed += other.failed
        self.examined += other.examined
        self.skipped = self.skipped or other.skipped

    def as_json(self) -> dict[str, Any]:
        return {"examined": self.examined,
            "deleted": len(self.deleted), "trimmed": len(self.trimmed), "records_removed": self.records_removed,
            "bytes_freed": self.bytes_freed, "failed": [{"thread": t, "error": e} for t, e in self.failed],
            "skipped": self.skipped, "dry_run": self.dry_run,
            "deleted_threads": self.deleted, "trimmed_threads": self.trimmed,
        }


class Sweeper:
    """The background sweep of one saver: `sweep()` every `interval` seconds, in a daemon thread
    (`start_thread`) or a task of the running event loop (`start_task`), until `stop`. It holds
    the saver weakly (`sweep` is a function of the saver it looks up each pass), so a saver
    nobody holds any more is not kept alive by its sweep. An error of a pass is kept
    (`last_error`) and the next pass runs all the same."""

    def __init__(self, interval: float, sweep: Callable[[], Any], asweep: Callable[[], Any]) -> None:
        self.interval, self._sweep, self._asweep = interval, sweep, asweep
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._task: Any = None
        self.passes = 0
        self.last_error: BaseException | None = None

    def start_thread(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="telar-checkpoint-sweep", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                if self._sweep() is None:  # the saver is gone
                    return
            except Exception as exc:  # a pass that failed (a store down): the next one tries again
                self.last_error = exc
            self.passes += 1

    def start_task(self) -> None:
        """Sweep in a task of the running event loop instead of a thread."""
        self.stop_thread()
        self._stop.clear()
        self._task = asyncio.get_running_loop().create_task(self._aloop(), name="telar-checkpoint-sweep")

    async def _aloop(self) -> None:
        while not self._stop.is_set():
            await asyncio.sleep(self.interval)
            try:
                if await self._asweep() is None:
                    return
            except Exception as exc:
                self.last_error = exc
            self.passes += 1

    def stop_thread(self, timeout: float = 10.0) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)  # bounded: a pass under way finishes its thread first

    def stop(self) -> None:
        """Stop sweeping: the thread is joined (for at most 10 s), the task cancelled."""
        self.stop_thread()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()

    async def astop(self) -> None:
        """`stop`, then wait (at most 10 s) for the cancelled task to end."""
        task = self._task
        self.stop()
        if task is not None and task.get_loop() is asyncio.get_running_loop():
            await asyncio.wait([task], timeout=10.0)

    @property
    def running(self) -> bool:
        return (self._thread is not None and self._thread.is_alive()) or (self._task is not None and not self._task.done())
