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
so (`Lifetime.is_expired_steps`):

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

What to do is decided by pure functions of the settings, a history and the time
(`expiry_operation`, `sweep_step`, `expired_view`, ...); `Lifetime` carries them out on a
saver's store, as the steps of its reads, writes and sweeps.
"""

from __future__ import annotations

import asyncio
import math
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Literal, cast
from uuid import UUID

from telar_checkpoint.errors import ArgumentTypeError, TelarError, UsageError
from telar_checkpoint.format import UUID_EPOCH, checkpoint_time
from telar_checkpoint.history import History
from telar_checkpoint.rules import DeleteThread, KeepLatest, apply
from telar_checkpoint.steps import Steps, call
from telar_checkpoint.stores.base import Store
from telar_checkpoint.stores.common import stored_size
from telar_checkpoint.threads import SaverThreads, ThreadRecords

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
"""What is done to a thread that expires or is pruned: deleted (to the record that keeps it
deleted), or trimmed to its latest checkpoint of each namespace."""


def check_strategy(strategy: object, what: str) -> str:
    """`strategy`, when it is one of `STRATEGIES`; UsageError naming `what` otherwise."""
    if strategy not in STRATEGIES:
        raise UsageError(f"{what} should be 'delete' or 'keep_latest', not {strategy!r}")
    return cast(str, strategy)


@dataclass(frozen=True, slots=True)
class TTL:
    """A time-to-live, as `ttl_settings` reads it: minutes (fractions allowed) since a thread's
    last write (and read, with `refresh_on_read`) before it expires (None: none by default);
    what an expiry does (`strategy`); minutes between background sweeps (None: none); threads
    a sweep handles at most (`sweep_limit`, as LangGraph's server reads it; None: a pass of the
    background sweep `SWEEP_PASS`, `sweep()` all)."""

    default_ttl: float | None = None
    refresh_on_read: bool = False
    strategy: str = "delete"
    sweep_interval_minutes: float | None = None
    sweep_limit: int | None = None


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
    """The `TTL` of a mapping with the keys of langgraph.json's `checkpointer.ttl` (langgraph-cli's
    `ThreadTTLConfig`: `default_ttl`, `strategy`, `sweep_interval_minutes`, `sweep_limit`) and
    `refresh_on_read` (langgraph-checkpoint-redis'), each optional; UsageError naming a key that
    is unknown or a value that is not of its kind."""
    if not isinstance(settings, Mapping):
        raise ArgumentTypeError(f"ttl should be a dict such as {{'default_ttl': 43200}}, not {type(settings).__name__}")
    known = TTL.__dataclass_fields__.keys()
    unknown = [key for key in settings if key not in known]
    if unknown:
        raise UsageError(f"ttl has no key {unknown[0]!r}; its keys are {', '.join(known)}")
    refresh = settings.get("refresh_on_read", False)
    if type(refresh) is not bool:
        raise UsageError(f"ttl['refresh_on_read'] should be True or False, not {refresh!r}")
    strategy = check_strategy(settings.get("strategy", "delete"), "ttl['strategy']")
    limit = settings.get("sweep_limit")
    if limit is not None and (type(limit) is not int or limit <= 0):
        raise UsageError(f"ttl['sweep_limit'] should be a positive whole number of threads or None, not {limit!r}")
    return TTL(_minutes(settings, "default_ttl"), refresh, strategy, _minutes(settings, "sweep_interval_minutes"), limit)


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


RECORD_DAYS = 30  # how long a sweep keeps a deletion record when the saver has no default TTL
SWEEP_BATCH = 500  # expired threads a sweep asks the store for at a time
SWEEP_PASS = 10_000  # threads one pass of the background sweep handles at most, unless `sweep_limit` says
SWEEP_LEASE = "sweep"  # the lease that keeps two sweeps of a store from running at once
LEASE_SECONDS = 300.0  # how long a sweep's lease lasts unless renewed (after each batch)


# --- decisions: pure functions of the settings, a history and the time -------------------


def ttl_seconds(ttl: TTL, history: History) -> float | None:
    """The thread's time-to-live in seconds: its own, else the default; None: it never expires."""
    minutes = history.own_ttl
    if minutes is None:
        minutes = ttl.default_ttl
    return None if minutes is None or minutes == math.inf else minutes * 60


def is_idle(history: History, now: float, seconds: float | None) -> bool:
    """Whether the history's data lets the thread be expired at `now`: it has a time-to-live
    and its newest checkpoint is at least that old (or its ids tell no time)."""
    if seconds is None:
        return False
    made = written_at(history)
    return made is None or made + seconds <= now


def record_seconds(ttl: TTL) -> float:
    """How long the record of a deleted thread is kept: the default time-to-live, else `RECORD_DAYS`."""
    return ttl.default_ttl * 60 if ttl.default_ttl is not None else RECORD_DAYS * 86400.0


def expired_view(ttl: TTL, history: History) -> History:
    """What readers see of an expired thread: nothing (`"delete"`), or its latest checkpoint
    of each namespace and what a DeltaChannel needs of it (`"keep_latest"`)."""
    if ttl.strategy == "delete" or not history.entries:
        return History(history.thread_id)
    return apply(history, KeepLatest())[0]


def expiry_operation(ttl: TTL, history: History, now: float) -> DeleteThread | KeepLatest | None:
    """What expiring the thread read as `history` at `now` does, given that the store's expiry
    of it has come: delete it, keep its latest checkpoint, or nothing (the data says it was
    written since, or it has no time-to-live any more)."""
    if not is_idle(history, now, ttl_seconds(ttl, history)) or not history.entries:
        return None
    if ttl.strategy == "keep_latest":
        return KeepLatest()
    # The mark is the greatest id the thread named (`rules.delete_thread`), not the sweep's
    # instant: a thread idle a time-to-live has no run writing to it, and a sweep whose clock
    # is ahead must not refuse a new run's first writes.
    return DeleteThread("", datetime.fromtimestamp(now, timezone.utc).isoformat())


@dataclass(frozen=True, slots=True)
class SweepStep:
    """What a sweep does to one thread whose expiry in the store has come (`sweep_step`):
    `kind` is "gone" (nothing stored), "record kept" (a deletion record not yet kept its time),
    "record" (a record to remove), "fresh" (written since), "deleted" or "trimmed" (by
    `operation`); `expiry` is the thread's next expiry in the store (None: none)."""

    kind: Literal["gone", "record kept", "record", "fresh", "deleted", "trimmed"]
    operation: DeleteThread | KeepLatest | None = None
    expiry: float | None = None


def sweep_step(ttl: TTL, history: History | None, now: float) -> SweepStep:
    """What a sweep at `now` does to a thread stored as `history` (None: nothing stored)."""
    if history is None:
        return SweepStep("gone")
    keep_record = record_seconds(ttl)
    if history.only_deleted:
        record = history.deletion_record
        assert record is not None and record.deleted_at is not None
        ends = datetime.fromisoformat(record.deleted_at).timestamp() + keep_record
        return SweepStep("record kept", expiry=ends) if ends > now else SweepStep("record")
    operation = expiry_operation(ttl, history, now)
    if operation is None:  # written since (or no longer expiring): expires when its data says
        seconds = ttl_seconds(ttl, history)
        expires = expiry_after(written_at(history) or 0.0, seconds) if seconds is not None and history.entries else None
        return SweepStep("fresh", expiry=expires)
    if isinstance(operation, DeleteThread):
        return SweepStep("deleted", operation, now + keep_record)
    return SweepStep("trimmed", operation)


def quiet_until(expiry: float | None, seconds: float | None) -> float:
    """Until when a write leaves a thread recorded to expire at `expiry` (for a time-to-live of
    `seconds`) nothing to record: the expiry is still a whole time-to-live away."""
    return expiry - seconds if expiry is not None and seconds is not None else -math.inf


# --- the lifetime at work in a saver ------------------------------------------------------


class Lifetime:
    """A saver's time-to-live at work, one of its thread policies (`writing.ThreadPolicy`):
    every step of a thread's lifetime (its expiry read and recorded, what readers see of an
    expired thread, the sweep, the removal of deletion records, a thread's own time-to-live), on
    the store's expiry index, the decisions made by the pure functions above. What the saver
    knows of each thread's expiry in the store is in its `ThreadRecords` (an `ExpiryMemo`): only
    ever later than the truth, as an expiry in the store only grows but for `set_thread_ttl`,
    which rewrites the thread and records it anew."""

    def __init__(self, ttl: TTL, clock: Clock, store: Store, records: ThreadRecords, threads: SaverThreads) -> None:
        self.ttl, self.clock, self.store, self.records = ttl, clock, store, records
        self._threads: SaverThreads = threads
        self.holder = uuid.uuid4().hex  # the saver's name in the sweep's lease
        self.sweeper: Sweeper | None = None

    def sharing(self, threads: SaverThreads) -> Lifetime:
        """The same lifetime for another saver on the same store (`with_allowlist`): its own name
        in the sweep's lease (its sweeps and this one's take turns), no background sweep."""
        return Lifetime(self.ttl, self.clock, self.store, self.records, threads)

    # --- the background sweep ---

    def start(self, sweep: Callable[[], Any], asweep: Callable[[], Any]) -> None:
        """Sweep every `sweep_interval_minutes` in a thread (`sweep`, `asweep`: a pass of the saver,
        which they hold weakly, returning None once it is gone); nothing when there is no interval."""
        if self.ttl.sweep_interval_minutes is not None:
            self.sweeper = Sweeper(self.ttl.sweep_interval_minutes * 60, sweep, asweep)
            self.sweeper.start_thread()

    @property
    def pass_limit(self) -> int:
        """Threads one pass of the background sweep handles at most."""
        return self.ttl.sweep_limit if self.ttl.sweep_limit is not None else SWEEP_PASS

    # --- a thread's expiry ---

    def expiry_steps(self, thread_id: str, seconds: float | None, now: float) -> Steps[float | None]:
        """The thread's expiry in the store (None: none): what the saver knows, when that is
        later than `now` (the store's only grows), else the store's own."""
        memo = self.records.expiry(thread_id)
        if memo is not None and memo[1] == seconds and memo[0] is not None and memo[0] > now:
            return memo[0]
        store = self.store
        expiry: float | None = yield call(store.expiry, store.aexpiry, thread_id)
        self.records.set_expiry(thread_id, (expiry, seconds, quiet_until(expiry, seconds)))
        return expiry

    def is_expired_steps(self, thread_id: str, history: History, now: float) -> Steps[bool]:
        """Whether the thread has expired at `now`: its data and the store both say so."""
        seconds = ttl_seconds(self.ttl, history)
        if not history.entries or not is_idle(history, now, seconds):
            return False
        expiry = yield from self.expiry_steps(thread_id, seconds, now)
        return expiry is not None and expiry <= now

    def record_steps(self, thread_id: str, history: History, now: float) -> Steps[None]:
        """Record the thread's expiry after a write (or a refreshing read) at `now`, unless the
        store holds one as late already (as far as the saver knows)."""
        seconds = ttl_seconds(self.ttl, history)
        if seconds is None:
            return
        when = expiry_after(now, seconds)
        memo = self.records.expiry(thread_id)
        if memo is not None and memo[1] == seconds and memo[0] is not None and memo[0] >= when:
            return
        store = self.store
        yield call(store.expire_at, store.aexpire_at, thread_id, when)
        self.records.set_expiry(thread_id, (when, seconds, quiet_until(when, seconds)))

    def set_expiry_steps(self, thread_id: str, when: float | None) -> Steps[None]:
        """Record exactly `when` (None: no expiry) as the thread's expiry in the store."""
        store = self.store
        yield call(store.set_expiry, store.aset_expiry, thread_id, when)
        self.records.set_expiry(thread_id, None)

    def fresh_clock_steps(self, thread_id: str) -> Steps[None]:
        """A thread written whole from elsewhere (a copy, a migration, an import) or given its own
        time-to-live: its clock starts now, whatever the age of its checkpoints."""
        history = yield from self._threads._stored_steps(thread_id)
        seconds = ttl_seconds(self.ttl, history)
        yield from self.set_expiry_steps(thread_id, expiry_after(self.clock(), seconds) if seconds is not None else None)

    def deleted_steps(self, thread_id: str, now: float) -> Steps[None]:
        """A thread deleted at `now`: its record is kept a time-to-live, then swept."""
        yield from self.set_expiry_steps(thread_id, now + record_seconds(self.ttl))

    def thread_ttl_steps(self, thread_id: str, minutes: float | None | Literal["default"]) -> Steps[None]:
        """Give the thread its own time-to-live (`set_thread_ttl`), its clock starting now."""
        own = own_ttl(minutes)
        threads = self._threads
        yield call(threads.rewrite, threads.arewrite, thread_id, lambda old: threads.codec.with_ttl(thread_id, old, own))
        yield from self.fresh_clock_steps(thread_id)

    # --- the saver's policy: on a read and around a write ---

    def read_steps(self, thread_id: str, history: History) -> Steps[History]:
        """What readers see of the thread: nothing of an expired one (or its latest checkpoint,
        with "keep_latest"); with `refresh_on_read`, reading a live one restarts its clock."""
        now = self.clock()
        if (yield from self.is_expired_steps(thread_id, history, now)):
            return expired_view(self.ttl, history)
        if self.ttl.refresh_on_read and history.entries:
            yield from self.record_steps(thread_id, history, now)
        return history

    def before_write(self, thread_id: str, now: float) -> Steps[None] | None:
        """Before a put or writes at `now`: an expired thread expires first (a run that continues
        it is then refused, as after a deletion); None when the write is quiet: the saver recorded
        an expiry for the thread at least a time-to-live after `now` (it is live, and kept so long)."""
        memo = self.records.expiry(thread_id)
        return None if memo is not None and now <= memo[2] else self._expire_first_steps(thread_id, now)

    def after_write(self, thread_id: str, now: float) -> Steps[None] | None:
        """After a put or writes at `now`: the thread's new expiry recorded; None when the write is quiet."""
        memo = self.records.expiry(thread_id)
        return None if memo is not None and now <= memo[2] else self._record_after_steps(thread_id, now)

    def _expire_first_steps(self, thread_id: str, now: float) -> Steps[None]:
        if (yield from self.is_expired_steps(thread_id, (yield from self._written_steps(thread_id)), now)):
            yield from self.expire_steps(thread_id, now, SweepReport())

    def _record_after_steps(self, thread_id: str, now: float) -> Steps[None]:
        yield from self.record_steps(thread_id, (yield from self._written_steps(thread_id)), now)

    def _written_steps(self, thread_id: str) -> Steps[History]:
        """The thread's history as the saver last wrote it, else as stored."""
        kept = self.records.latest(thread_id)
        if kept is not None and kept.history is not None:
            return kept.history
        return (yield from self._threads._stored_steps(thread_id))

    # --- the sweep ---

    def expire_steps(self, thread_id: str, now: float, report: SweepReport, dry_run: bool = False) -> Steps[None]:
        """Expire one thread whose expiry in the store has come, as `sweep_step` decides, counted
        in `report`; then its expiry set anew (`SweepStep.expiry`)."""
        threads, store = self._threads, self.store
        done: list[tuple[SweepStep, int, int]] = []  # what the change did, on its last call: (step, bytes before, after)

        def change(old: str | None) -> str | None:
            done.clear()
            history = History.parse(thread_id, old) if old is not None else None
            step = sweep_step(self.ttl, history, now)
            new = old
            if step.kind == "record":
                new = None
            elif step.operation is not None:
                new = threads.codec.edit(old, step.operation, history=history)[0]
            done.append((step, stored_size(old or ""), stored_size(new or "")))
            return old if dry_run else new

        try:
            if dry_run:
                change((yield call(store.read, store.aread, thread_id)))
            else:
                yield call(threads.rewrite, threads.arewrite, thread_id, change)
        except TelarError as exc:  # a thread that cannot be read is left as it is, for `repair`
            report.failed.append((thread_id, str(exc)))
            if not dry_run:  # tried again by the next sweep a time-to-live on, not by this one
                yield call(store.expire_at, store.aexpire_at, thread_id, now + record_seconds(self.ttl))
            return
        step, before, after = done[0]
        if step.kind == "deleted":
            report.deleted.append(thread_id)
            self.records.forget(thread_id)
        elif step.kind == "trimmed":
            report.trimmed.append(thread_id)
        elif step.kind == "record":
            report.records_removed += 1
        report.bytes_freed += before - after
        if not dry_run:
            yield from self.set_expiry_steps(thread_id, step.expiry)

    def sweep_steps(self, limit: int | None, dry_run: bool) -> Steps[SweepReport]:
        """`sweep`: under the store's sweep lease, the expired threads in batches, earliest
        first, until none is left or `limit` were handled (None: `sweep_limit`, else all)."""
        if limit is None:
            limit = self.ttl.sweep_limit
        store, holder = self.store, self.holder
        report, now = SweepReport(dry_run=dry_run), self.clock()
        if not (yield call(store.lease, store.alease, SWEEP_LEASE, holder, now, LEASE_SECONDS)):
            report.skipped = True
            return report
        try:
            handled = 0
            while limit is None or handled < limit:
                want = SWEEP_BATCH if limit is None else min(SWEEP_BATCH, limit - handled)
                if dry_run:  # nothing moves out of the expired range: ask for all of them at once
                    want = limit if limit is not None else 1 << 62
                batch = yield call(store.expired, store.aexpired, now, want)
                for thread_id, _when in batch:
                    expiry = yield call(store.expiry, store.aexpiry, thread_id)  # (a write since may have moved it on)
                    if expiry is not None and expiry <= now:
                        yield from self.expire_steps(thread_id, now, report, dry_run)
                handled += len(batch)
                report.examined += len(batch)
                if dry_run or len(batch) < want:
                    break
                if not (yield call(store.lease, store.alease, SWEEP_LEASE, holder, self.clock(), LEASE_SECONDS)):
                    break  # the lease lapsed and another sweep took it: it goes on from here
        finally:
            yield call(store.release, store.arelease, SWEEP_LEASE, holder)
        return report


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
