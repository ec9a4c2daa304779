"""A sweep killed with SIGKILL at random moments loses nothing that had not expired, leaves each
expired thread whole or swept (never half-done), and the next sweep finishes the job.

Each round fills a fresh store with threads written by real graph runs: some idle past the
time-to-live ("expired"), some written 40 minutes later ("live"), and some written first with
the expired ones and again later by a saver with no time-to-live ("stale": the store's expiry
index says they expired, their data says they did not; the sweep reads them and must leave
them). Then, up to `KILLS_PER_ROUND` times, a process forked by the crash harness's zygote
(tests/crash_harness.py, `sweep` mode) sweeps the store, its clock standing still at an instant
the test passes it, and is killed after a random number of the threads it rewrote and a random
delay. After each kill every live and stale thread reads as before (the same checkpoints, the
same values, through a saver with and without the time-to-live), each expired one is as before
or swept (a deletion record only, or with "keep_latest" its latest checkpoint alone, as it
was), every rewrite the sweeper acknowledged is there, and `verify_store` finds no error. The
next killed sweep (and the sweep the test runs at the end of the round) runs a lease later
(`LEASE_SECONDS`): the killed one still holds it until then. The sweep at the end must leave
no expired thread unswept, nothing due in the expiry index, and the live threads as they were.

`TELAR_CRASH_SWEEP_KILLS` sets the kills per strategy on each local store (file, sqlite;
default 6), `TELAR_CRASH_SWEEP_SERVER_KILLS` on postgres and redis (default: a fifth of that,
at least 2). `TELAR_CRASH_SEED` replays a run (the choices, not the timing of the kills);
`TELAR_RELIABILITY_LOG` names a file that gets one JSON line of figures per run.
"""

from __future__ import annotations

import os
import random
import signal
import time
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from langchain_core.runnables import RunnableConfig

from telar_checkpoint import TelarSaver
from telar_checkpoint.history import History
from telar_checkpoint.lifetime import LEASE_SECONDS
from telar_checkpoint.stores import Store
from telar_checkpoint.verify import verify_store
from tests.crash_harness import CrashRun, Zygote, log_figures, zygote_fixture
from tests.stores import describe, make_store
from tests.test_expiry import Clock
from tests.test_lifetime import in_a_row

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the crash harness forks sweepers")

KILLS = int(os.environ.get("TELAR_CRASH_SWEEP_KILLS", "6"))
SERVER_KILLS = int(os.environ.get("TELAR_CRASH_SWEEP_SERVER_KILLS", str(max(2, KILLS // 5))))
SEED = int(os.environ.get("TELAR_CRASH_SEED", str(random.randrange(1 << 30))))

TTL_MINUTES = 60
EXPIRED, LIVE, STALE = 150, 20, 10  # threads of each kind per round
KILLS_PER_ROUND = 3  # sweeps killed on one store before the sweep that finishes
LIVE_AFTER = 40  # minutes between the expired threads' writes and the live ones'
SWEEP_AFTER = 22  # minutes between the live threads' writes and the first sweep
# The first sweep comes 2 minutes after the expired threads' time-to-live (less what writing them
# took, and the grain of an expiry: 36 s); the last, KILLS_PER_ROUND leases later, before the
# live threads' time-to-live.
assert LIVE_AFTER + SWEEP_AFTER >= TTL_MINUTES + 2
assert SWEEP_AFTER * 60 + KILLS_PER_ROUND * (LEASE_SECONDS + 1) < TTL_MINUTES * 60 - 60


@dataclass
class SweepFigures:
    """What a run of killed sweeps did and what it checked (`half_done` and `lost` must be 0)."""

    kills: int = 0
    rounds: int = 0
    threads: int = 0  # threads written by graph runs, over all rounds
    expired: int = 0  # of which idle past the time-to-live
    swept_at_kill: int = 0  # expired threads found swept after a kill (summed over the kills)
    unswept_at_kill: int = 0  # expired threads found as they were after a kill (summed)
    acknowledged: int = 0  # rewrites a sweeper reported returned before it was killed
    mid_sweep: int = 0  # kills after which the killed sweeper had swept some threads, not all
    before_first: int = 0  # kills that landed before the sweeper swept a thread
    finished_before_kill: int = 0  # kills that found the sweeper done
    still_due_at_kill: int = 0  # threads found swept and still due in the expiry index: killed in between
    warnings_at_kill: int = 0  # verify's warnings after a kill (a killed rewrite's temporary file)
    half_done: int = 0  # expired threads neither as they were nor swept
    lost: int = 0  # live threads not as they were
    finished_by_last_sweep: int = 0  # expired threads the sweep after the kills swept
    seconds: float = 0.0


zygote = zygote_fixture()  # forks every sweeper of this module


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """The writers' clock, which LangGraph's checkpoint ids follow (as in tests/test_expiry.py)."""
    import langgraph.checkpoint.base.id as ids

    moved = Clock()
    monkeypatch.setattr(ids, "time", types.SimpleNamespace(time_ns=lambda: int(moved() * 1e9)))
    monkeypatch.setattr(ids, "_last_v6_timestamp", None)
    return moved


def config(thread_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id}}


def graph(saver: TelarSaver) -> Any:
    return in_a_row(a=lambda s: {"log": ["a"]}, b=lambda s: {"log": ["b"]}).compile(checkpointer=saver)


def stored(reader: TelarSaver, thread_id: str) -> list[Any]:
    """Everything a reader gives of the thread: each checkpoint tuple, newest first."""
    return list(reader.list(config(thread_id)))


def same_latest(kept: Any, latest: Any) -> bool:
    """The checkpoint a "keep_latest" expiry kept is the latest as it was (its parent is gone)."""
    return (kept.config, kept.checkpoint, kept.metadata, kept.pending_writes) == (
        latest.config, latest.checkpoint, latest.metadata, latest.pending_writes,
    )  # fmt: skip


class SweepKills(CrashRun):
    """Kills sweeps of fresh stores `kills` times (`CrashRun` gives it `settle`, for the servers)."""

    def __init__(self, kind: str, strategy: str, tmp_path: Path, request: pytest.FixtureRequest, clock: Clock, seed: str):
        super().__init__(("", {}), "sweep", seed=0)
        self.rng = random.Random(seed)
        self.kind, self.strategy, self.tmp_path, self.request, self.clock = kind, strategy, tmp_path, request, clock
        self.ttl = {"default_ttl": TTL_MINUTES, "strategy": strategy}
        self.figures = SweepFigures()
        self.problems: list[str] = []

    def run_kills(self, kills: int, zygote: Zygote) -> SweepFigures:
        started = time.monotonic()
        try:
            while self.figures.kills < kills and not self.problems:
                self._round(zygote, min(KILLS_PER_ROUND, kills - self.figures.kills))
        finally:
            self.figures.seconds = round(time.monotonic() - started, 2)
        return self.figures

    # --- one round: a fresh store, some kills, the sweep that finishes ---

    def _round(self, zygote: Zygote, kills: int) -> None:
        number = self.figures.rounds
        self.figures.rounds += 1
        (self.tmp_path / f"round-{number}").mkdir()
        store = make_store(self.kind, self.tmp_path / f"round-{number}", self.request)
        self.store, self.base = store, describe(store)
        expired, live = self._fill(store)
        now = self.clock()
        before = {t: (store.read(t), stored(TelarSaver(store), t)) for t in [*expired, *live]}
        self.figures.threads += len(before)
        self.figures.expired += len(expired)
        swept: set[str] = set()
        for kill in range(kills):
            swept = self._kill(zygote, now, expired, live, before, swept, kills - kill)
            if self.problems:
                return
            now += LEASE_SECONDS + 1  # the killed sweeper's lease has lapsed
        self._finish(now, expired, live, before, swept)

    def _fill(self, store: Store) -> tuple[list[str], list[str]]:
        """Write the round's threads: the expired and the first run of each stale one, then 40
        minutes later the live ones and the stale ones' second run (by a saver with no
        time-to-live, so the expiry index keeps the first run's expiry)."""
        writing = graph(TelarSaver(store, ttl=self.ttl, clock=self.clock))
        expired = [f"expired-{i}" for i in range(EXPIRED)]
        stale = [f"stale-{i}" for i in range(STALE)]
        live = [f"live-{i}" for i in range(LIVE)]
        for thread in self.rng.sample(expired + stale, len(expired) + len(stale)):
            for run in range(self.rng.choice([1, 1, 2])):
                writing.invoke({"log": [f"{thread}/{run}"]}, config(thread))
        self.clock.advance(LIVE_AFTER)
        plain = graph(TelarSaver(store))
        for thread in live:
            writing.invoke({"log": [f"{thread}/0"]}, config(thread))
        for thread in stale:
            plain.invoke({"log": [f"{thread}/late"]}, config(thread))
        self.clock.advance(SWEEP_AFTER)
        return expired, live + stale

    def _kill(
        self, zygote: Zygote, now: float, expired: list[str], live: list[str],
        before: dict[str, tuple[str | None, list[Any]]], swept: set[str], kills_left: int,
    ) -> set[str]:  # fmt: skip
        """One sweeper at `now`, killed; the store checked. The expired threads found swept.
        It is killed after a share of the threads left to sweep (each kill of the round, a
        share), or at once, or after the first rewrite."""
        self.tag = f"telar-sweep-{os.getpid()}-{self.rng.randrange(1 << 30)}"
        kind, options = self.base
        if kind == "postgres":  # name the sweeper's sessions, to wait for the server to end them
            options = {**options, "application_name": self.tag}
        elif kind == "redis":
            options = {**options, "client_name": self.tag}
        self.description = (kind, options)
        share = (len(expired) - len(swept)) // kills_left + 1
        wanted = self.rng.choice([0, 1, *(self.rng.randrange(share) for _ in range(4))])
        pid = zygote.spawn({"store": self.description, "mode": "sweep", "ttl": self.ttl, "now": now})
        acked: set[str] = set()
        done = False

        def record(event: dict[str, Any]) -> None:
            nonlocal done
            if event["e"] == "rewritten":
                acked.add(event["thread"])
            elif event["e"] == "swept":
                done = True
                assert not event["skipped"], "the sweeper found the lease taken"
                assert not event["failed"], f"the sweeper could not read threads: {event['failed']}"

        assert zygote.next_event()["e"] == "sweeping"
        while len(acked) < wanted and not done:
            record(zygote.next_event())
        time.sleep(self.rng.choice([0, 0, 0.0002, 0.001, 0.003, 0.01]))
        os.kill(pid, signal.SIGKILL)
        while (event := zygote.next_event())["e"] != "exit":
            record(event)  # acknowledged before the kill landed
        assert event["signal"] == signal.SIGKILL, f"sweeper {pid} ended on its own: {event}"
        self.figures.kills += 1
        self.figures.acknowledged += len(acked)
        self.figures.finished_before_kill += done
        self.settle()
        now_swept = self.check_store(now, expired, live, before, acked, at_kill=True)
        if not done:
            self.figures.before_first += now_swept == swept
            self.figures.mid_sweep += now_swept != swept and len(now_swept) < len(expired)
        return now_swept

    def _finish(
        self, now: float, expired: list[str], live: list[str], before: dict[str, tuple[str | None, list[Any]]],
        swept: set[str],
    ) -> None:  # fmt: skip
        """The sweep after the kills, a lease later: it sweeps every expired thread left."""
        store = self.store
        report = TelarSaver(store, ttl=self.ttl, clock=lambda: now).sweep()
        assert not report.skipped and not report.failed, report
        done = set(report.deleted) | set(report.trimmed)
        assert done <= set(expired), f"the sweep swept live threads: {sorted(done - set(expired))}"
        left = set(expired) - swept
        assert left <= done, f"the sweep left expired threads: {sorted(left - done)[:5]}"
        self.figures.finished_by_last_sweep += len(left)
        everything = set(expired)
        finished = self.check_store(now, expired, live, before, everything, at_kill=False)
        if self.problems:
            return  # (reported by the test)
        assert finished == everything
        assert store.expired(now, 1 << 30) == [], "threads still due in the expiry index"  # type: ignore[attr-defined]
        assert TelarSaver(store, ttl=self.ttl, clock=lambda: now).sweep().examined == 0

    # --- the checks ---

    def check_store(
        self, now: float, expired: list[str], live: list[str], before: dict[str, tuple[str | None, list[Any]]],
        acked: set[str], *, at_kill: bool,
    ) -> set[str]:  # fmt: skip
        """Every live thread as it was; every expired one as it was or swept, and swept if `acked`;
        the store sound. The expired threads found swept (problems are counted and kept)."""
        store = self.store
        plain, timed = TelarSaver(store), TelarSaver(store, ttl=self.ttl, clock=lambda: now)
        problems: list[str] = []
        for thread in live:
            text, tuples = before[thread]
            if stored(plain, thread) != tuples or stored(timed, thread) != tuples:
                self.figures.lost += 1
                problems.append(f"{thread}: live, not as it was")
        swept: set[str] = set()
        for thread in expired:
            text, tuples = before[thread]
            now_text = store.read(thread)
            found = stored(plain, thread)
            if now_text == text and found == tuples:
                state = "unswept"
            elif self.strategy == "delete" and now_text is not None and History.parse(thread, now_text).only_deleted and not found:
                state = "swept"
            elif self.strategy == "keep_latest" and len(found) == 1 and same_latest(found[0], tuples[0]):
                state = "swept"
            else:
                state = "half-done"
                self.figures.half_done += 1
                problems.append(f"{thread}: expired, neither as it was nor swept: {now_text!r:.300}")
            if state == "swept":
                swept.add(thread)
            elif thread in acked:
                problems.append(f"{thread}: its rewrite was acknowledged, and it is {state}")
            seen = stored(timed, thread)  # what readers see of it: nothing, or its latest checkpoint
            if (self.strategy == "delete" and seen) or (
                self.strategy == "keep_latest" and not (len(seen) == 1 and same_latest(seen[0], tuples[0]))
            ):
                problems.append(f"{thread}: expired, and readers see {len(seen)} checkpoints of it")
        if acked - set(expired) - set(live):
            problems.append(f"rewrites of threads never written: {sorted(acked - set(expired) - set(live))[:5]}")
        report = verify_store(store)
        problems += [f"verify: {p}" for p in report.errors]
        self.problems += problems
        if at_kill:
            self.figures.swept_at_kill += len(swept)
            self.figures.unswept_at_kill += len(expired) - len(swept)
            expiring: Any = store
            self.figures.still_due_at_kill += sum(1 for t in swept if (e := expiring.expiry(t)) is not None and e <= now)
            self.figures.warnings_at_kill += len(report.problems) - len(report.errors)
        return swept


STORES = [("file", KILLS), ("sqlite", KILLS), ("postgres", SERVER_KILLS), ("redis", SERVER_KILLS)]


@pytest.mark.parametrize("strategy", ["delete", "keep_latest"])
@pytest.mark.parametrize(("kind", "kills"), STORES, ids=[kind for kind, _ in STORES])
def test_a_killed_sweep_loses_nothing_and_the_next_finishes(
    kind: str, kills: int, strategy: str, zygote: Zygote, tmp_path: Path, request: pytest.FixtureRequest, clock: Clock,
) -> None:  # fmt: skip
    run = SweepKills(kind, strategy, tmp_path, request, clock, seed=f"{SEED}-{kind}-{strategy}")
    try:
        figures = run.run_kills(kills, zygote)
    finally:
        log_figures("crash-sweep", SEED, store=kind, strategy=strategy, **vars(run.figures))
    print(f"{kind}/{strategy} seed={SEED}: {figures}")
    assert not run.problems, f"seed={SEED} (TELAR_CRASH_SEED replays it): " + "\n".join(run.problems[:20])
    assert figures.kills == kills
    assert figures.half_done == 0 and figures.lost == 0
