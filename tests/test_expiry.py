"""Threads expire after a time-to-live: real graphs on every store, with a clock the tests move.

A saver made with `ttl=` hides a thread idle longer than its time-to-live from every reader at
once (or shows only its latest checkpoint, with "keep_latest"), refuses a run that goes on
writing to it, and `sweep` reclaims its space. The clock is the saver's (`clock=`): the tests
move it forward rather than sleeping for minutes; a short test checks the real one. Each test
runs on our stores and on stores of the four abstract methods alone (tests/stores.py,
`PLAIN_KINDS`), whose expiries and leases are `Store`'s defaults.
"""

from __future__ import annotations

import asyncio
import json
import time
import types
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from telar_checkpoint import MemoryStore, TelarSaver, ThreadDeletedError, UsageError
from telar_checkpoint.history import History
from telar_checkpoint.inspection import list_threads
from telar_checkpoint.lifetime import TTL, SweepReport, grain
from telar_checkpoint.stores import Store
from telar_checkpoint.stores.base import RESERVED
from telar_checkpoint.verify import verify_store
from tests.stores import PLAIN_KINDS, SHARED_KINDS, STORE_KINDS, describe, make_store, processes, reopen
from tests.test_history_depth import delta_graph, needs_delta_channel
from tests.test_lifetime import assert_deleted, fan_out_deleting, in_a_row, once_stored

DAY = 24 * 60  # minutes
MONTH = 30 * DAY


@pytest.fixture(params=STORE_KINDS + PLAIN_KINDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    return make_store(request.param, tmp_path, request)


@pytest.fixture(params=SHARED_KINDS + ["plain-file"])
def shared_store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    return make_store(request.param, tmp_path, request)


@pytest.fixture(params=STORE_KINDS + PLAIN_KINDS)
async def astore(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    store = make_store(request.param, tmp_path, request)
    yield store
    await store.aclose()


class Clock:
    """A clock the test moves: the real time, `advance`d by hand."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset

    def advance(self, minutes: float) -> None:
        self.offset += minutes * 60


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """The saver's clock, which LangGraph's checkpoint ids follow too (they are uuid6 of the
    time they are made), as they follow the one clock of a real deployment."""
    import langgraph.checkpoint.base.id as ids

    moved = Clock()
    monkeypatch.setattr(ids, "time", types.SimpleNamespace(time_ns=lambda: int(moved() * 1e9)))
    monkeypatch.setattr(ids, "_last_v6_timestamp", None)  # (restored after: later ids are of the real time again)
    return moved


def config(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


def chat_agent(checkpointer: Any) -> Any:
    """langchain's agent (`create_agent`) on the scripted chat model, with one tool."""
    from langchain.agents import create_agent
    from langchain_core.tools import tool

    from tests.programs import ScriptedChatModel

    @tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return f"It is sunny in {city}."

    return create_agent(ScriptedChatModel(), [get_weather], checkpointer=checkpointer)


QUESTION = {"messages": [("user", "what is the weather in Paris")]}


def visible(saver: TelarSaver) -> set[str]:
    return {t.config["configurable"]["thread_id"] for t in saver.list(None)}


def test_an_idle_chat_vanishes_for_every_reader_then_the_sweep_frees_it(store: Store, clock: Clock) -> None:
    from tests.graphs import normalize

    saver = TelarSaver(store, ttl={"default_ttl": MONTH}, clock=clock)
    agent = chat_agent(saver)
    agent.invoke(QUESTION, config("idle"))
    agent.invoke(QUESTION, config("idle"))
    clock.advance(MONTH - 2 * grain(MONTH * 60) / 60)
    agent.invoke(QUESTION, config("busy"))  # written later: it lives on
    assert visible(saver) == {"idle", "busy"}
    assert saver.sweep().examined == 0, "nothing has expired yet"

    clock.advance(3 * grain(MONTH * 60) / 60)
    assert saver.get_tuple(config("idle")) is None
    assert list(saver.list(config("idle"))) == []
    assert visible(saver) == {"busy"}
    assert list(saver.list(None, filter={"source": "loop"}))  # busy's checkpoints, none of idle's
    assert all(t.config["configurable"]["thread_id"] == "busy" for t in saver.list(None, filter={"source": "loop"}))
    assert agent.get_state(config("idle")).values == {}
    size = len(store.read("idle") or "")

    report = saver.sweep()
    assert report.deleted == ["idle"] and report.trimmed == [] and not report.failed
    assert 0 < report.bytes_freed <= size
    assert_deleted(saver, "idle")
    assert saver.get_tuple(config("busy")) is not None

    again = agent.invoke(QUESTION, config("idle"))  # a new conversation on the same id
    reference = chat_agent(InMemorySaver()).invoke(QUESTION, config("t"))
    assert normalize(again) == normalize(reference)


def test_a_sweep_limit_bounds_each_sweep_as_the_server_reads_it(store: Store, clock: Clock) -> None:
    """langgraph.json's `sweep_limit`: a sweep handles at most that many threads (`sweep()`
    without a limit, and each pass of the background sweep); the next sweep goes on from there."""
    saver = TelarSaver(store, ttl={"default_ttl": 1, "sweep_limit": 2}, clock=clock)
    graph = chat_agent(saver)
    for i in range(5):
        graph.invoke(QUESTION, config(f"t{i}"))
    clock.advance(2)
    assert saver._lifetime_for("sweep").pass_limit == 2
    assert [saver.sweep().examined for _ in range(4)] == [2, 2, 1, 0]
    assert visible(saver) == set()


@pytest.mark.parametrize("strategy", ["delete", "keep_latest"])
def test_a_thread_paused_at_an_interrupt_past_its_ttl(store: Store, strategy: str, clock: Clock) -> None:
    """Deleted, the pause is gone; kept latest, the thread still resumes, before and after the sweep."""
    from tests.graphs import with_interrupt

    saver = TelarSaver(store, ttl={"default_ttl": 60, "strategy": strategy}, clock=clock)
    graph = with_interrupt().compile(checkpointer=saver)
    graph.invoke({"request": "deploy v2", "log": []}, config("paused"))
    assert graph.get_state(config("paused")).next == ("ask",)
    assert len(list(saver.list(config("paused")))) > 1
    clock.advance(120)
    if strategy == "delete":
        assert graph.get_state(config("paused")).values == {}
        assert saver.sweep().deleted == ["paused"]
        assert_deleted(saver, "paused")
        return
    state = graph.get_state(config("paused"))
    assert state.next == ("ask",) and state.values["request"] == "deploy v2"
    assert len(list(saver.list(config("paused")))) == 1, "only the latest checkpoint is seen"
    report = saver.sweep()
    assert report.trimmed == ["paused"] and report.bytes_freed > 0
    assert len(History.parse("paused", store.read("paused")).entries) == 1
    clock.advance(120)  # trimmed, it does not expire again until it is written
    assert saver.sweep().examined == 0
    graph.invoke(Command(resume="yes"), config("paused"))
    final = graph.get_state(config("paused"))
    assert final.next == () and final.values["request"] == "deploy v2" and final.values["log"]


@pytest.mark.parametrize("sweep", [True, False], ids=["swept", "not swept"])
def test_a_fan_out_that_expires_in_the_middle_of_its_run_stores_nothing(store: Store, sweep: bool, clock: Clock) -> None:
    """The clock passes the time-to-live while a `Send` fan-out runs: its next put is refused,
    whether a sweep deleted the thread or the put itself finds it expired."""
    saver = TelarSaver(store, ttl={"default_ttl": 60}, clock=clock)

    def expire() -> None:
        expiring: Any = store
        wait_for(lambda: expiring.expiry("fan") is not None)  # recorded just after the put that once_stored saw
        clock.advance(61)
        if sweep:  # (or another task's writes, made at the new time, found it expired first)
            assert saver.sweep().deleted == ["fan"] or History.parse("fan", store.read("fan")).only_deleted

    graph = fan_out_deleting(once_stored(saver, "fan", expire)).compile(checkpointer=saver)
    with pytest.raises(ThreadDeletedError):
        graph.invoke({"items": [0, 1, 2], "results": []}, config("fan"), durability="sync")
    assert_deleted(saver, "fan")
    out = graph.invoke({"items": [0, 1, 2], "results": []}, config("fan"))
    assert sorted(out["results"]) == [0, 10, 20]


def test_refresh_on_read_keeps_a_thread_that_is_read_alive(store: Store, clock: Clock) -> None:
    reading = TelarSaver(store, ttl={"default_ttl": 60, "refresh_on_read": True}, clock=clock)
    graph = in_a_row(a=lambda s: {"log": ["a"]}).compile(checkpointer=reading)
    graph.invoke({"log": []}, config("read"))
    graph.invoke({"log": []}, config("unread"))
    for _ in range(3):
        clock.advance(45)
        assert reading.get_tuple(config("read")) is not None
    assert reading.get_tuple(config("unread")) is None
    assert reading.sweep().deleted == ["unread"]
    plain = TelarSaver(store, ttl={"default_ttl": 60}, clock=clock)  # reads restart no clock
    clock.advance(45)
    assert plain.get_tuple(config("read")) is not None
    clock.advance(45)
    assert plain.get_tuple(config("read")) is None


def test_a_threads_own_ttl_is_kept_in_the_store_for_every_saver(store: Store, clock: Clock) -> None:
    saver = TelarSaver(store, ttl={"default_ttl": 60}, clock=clock)
    graph = in_a_row(a=lambda s: {"log": ["a"]}).compile(checkpointer=saver)
    for thread_id in ("forever", "longer", "shorter", "default"):
        graph.invoke({"log": []}, config(thread_id))
    saver.set_thread_ttl("forever", None)
    saver.set_thread_ttl("longer", 600)
    saver.set_thread_ttl("shorter", 10)
    saver.set_thread_ttl("default", 600)
    saver.set_thread_ttl("default", "default")
    other = TelarSaver(store, ttl={"default_ttl": 60}, clock=clock)  # sees them from the store
    clock.advance(11)
    assert visible(other) == {"forever", "longer", "default"}
    clock.advance(60)
    assert visible(other) == {"forever", "longer"}
    assert sorted(other.sweep().deleted) == ["default", "shorter"]
    clock.advance(600)
    assert visible(other) == {"forever"}
    assert other.sweep().deleted == ["longer"]
    clock.advance(100 * MONTH)
    assert visible(other) == {"forever"} and other.sweep().deleted == []
    with pytest.raises(UsageError, match="not stored"):
        saver.set_thread_ttl("nobody", 5)
    with pytest.raises(UsageError, match="time-to-live"):
        TelarSaver(store).set_thread_ttl("forever", 5)
    with pytest.raises(UsageError, match="minutes"):
        saver.set_thread_ttl("forever", -1)


def test_an_empty_ttl_lets_only_threads_with_their_own_expire(store: Store, clock: Clock) -> None:
    saver = TelarSaver(store, ttl={}, clock=clock)
    graph = in_a_row(a=lambda s: {"log": ["a"]}).compile(checkpointer=saver)
    graph.invoke({"log": []}, config("kept"))
    graph.invoke({"log": []}, config("brief"))
    saver.set_thread_ttl("brief", 1)
    clock.advance(100 * MONTH)
    assert visible(saver) == {"kept"}
    assert saver.sweep().deleted == ["brief"]


def test_a_copy_starts_a_fresh_clock(store: Store, clock: Clock) -> None:
    saver = TelarSaver(store, ttl={"default_ttl": 60}, clock=clock)
    graph = in_a_row(a=lambda s: {"log": ["a"]}).compile(checkpointer=saver)
    graph.invoke({"log": []}, config("old"))
    clock.advance(50)
    saver.copy_thread("old", "copy")  # its checkpoints are 50 minutes old; its clock starts now
    clock.advance(20)
    assert visible(saver) == {"copy"}
    assert saver.sweep().deleted == ["old"]
    clock.advance(50)
    assert visible(saver) == set()


def test_deletion_records_go_after_a_ttl(store: Store, clock: Clock) -> None:
    saver = TelarSaver(store, ttl={"default_ttl": 60}, clock=clock)
    graph = in_a_row(a=lambda s: {"log": ["a"]}).compile(checkpointer=saver)
    graph.invoke({"log": []}, config("gone"))
    saver.delete_thread("gone")
    assert_deleted(saver, "gone")
    clock.advance(30)
    assert saver.sweep().records_removed == 0
    clock.advance(31)
    report = saver.sweep()
    assert report.records_removed == 1 and report.bytes_freed > 0
    assert store.read("gone") is None


def test_one_sweep_of_a_store_at_a_time(store: Store, clock: Clock) -> None:
    saver = TelarSaver(store, ttl={"default_ttl": 1}, clock=clock)
    in_a_row(a=lambda s: {"log": ["a"]}).compile(checkpointer=saver).invoke({"log": []}, config("t"))
    clock.advance(2)
    lease: Any = store
    assert lease.lease("sweep", "another process", clock(), 60)
    report = saver.sweep()
    assert report.skipped and report.deleted == []
    lease.release("sweep", "another process")
    assert saver.sweep().deleted == ["t"]


def test_a_dry_run_changes_nothing(store: Store, clock: Clock) -> None:
    saver = TelarSaver(store, ttl={"default_ttl": 1}, clock=clock)
    graph = in_a_row(a=lambda s: {"log": ["a"]}).compile(checkpointer=saver)
    for thread_id in ("a", "b"):
        graph.invoke({"log": []}, config(thread_id))
    before = {t: store.read(t) for t in ("a", "b")}
    clock.advance(2)
    dry = saver.sweep(dry_run=True)
    assert sorted(dry.deleted) == ["a", "b"] and dry.bytes_freed > 0 and dry.dry_run
    assert {t: store.read(t) for t in ("a", "b")} == before
    assert saver.sweep(limit=1).examined == 1
    assert saver.sweep().examined == 1


def test_async_runs_expire_and_asweep_reclaims(astore: Store, clock: Clock) -> None:
    async def main() -> None:
        saver = TelarSaver(astore, ttl={"default_ttl": 60}, clock=clock)
        graph = in_a_row(a=lambda s: {"log": ["a"]}, b=lambda s: {"log": ["b"]}).compile(checkpointer=saver)
        await asyncio.gather(*(graph.ainvoke({"log": []}, config(f"t{i}")) for i in range(4)))
        assert not await saver.ais_expired("t0")
        clock.advance(61)
        assert await saver.ais_expired("t0") and saver.is_expired("t1")
        assert await saver.aget_tuple(config("t0")) is None
        assert [t async for t in saver.alist(None)] == []
        report = await saver.asweep()
        assert sorted(report.deleted) == ["t0", "t1", "t2", "t3"]
        out = await graph.ainvoke({"log": []}, config("t0"))
        assert out["log"] == ["a", "b"]

    asyncio.run(main())


def wait_for(condition: Callable[[], bool], seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "not within the bound"
        time.sleep(0.02)


def test_the_background_sweep_runs_and_stops_with_its_saver(store: Store, clock: Clock) -> None:
    with TelarSaver(store, ttl={"default_ttl": 1, "sweep_interval_minutes": 0.001}, clock=clock) as saver:
        in_a_row(a=lambda s: {"log": ["a"]}).compile(checkpointer=saver).invoke({"log": []}, config("t"))
        sweeper = saver._lifetime.sweeper
        assert sweeper is not None and sweeper.running
        clock.advance(2)
        wait_for(lambda: History.parse("t", store.read("t") or "").only_deleted)
        assert sweeper.last_error is None
    assert not sweeper.running


def test_the_background_sweep_of_an_async_saver_is_a_task(tmp_path: Any, clock: Clock) -> None:
    async def main() -> None:
        url = f"sqlite:///{tmp_path / 'c.db'}"
        async with TelarSaver.from_conn_string(url, ttl={"default_ttl": 1, "sweep_interval_minutes": 0.001}, clock=clock) as saver:
            sweeper = saver._lifetime.sweeper
            assert sweeper is not None and sweeper._task is not None and sweeper._thread is None
            await in_a_row(a=lambda s: {"log": ["a"]}).compile(checkpointer=saver).ainvoke({"log": []}, config("t"))
            clock.advance(2)
            deadline = time.monotonic() + 20
            while (text := await saver.store.aread("t")) is None or not History.parse("t", text).only_deleted:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.02)
        assert not sweeper.running

    asyncio.run(main())


def test_the_real_clock(tmp_path: Any) -> None:
    """No clock given: the thread expires in real time (a time-to-live of 1.2 s, recorded to
    the second)."""
    saver = TelarSaver(tmp_path / "threads", ttl={"default_ttl": 0.02})
    in_a_row(a=lambda s: {"log": ["a"]}).compile(checkpointer=saver).invoke({"log": []}, config("t"))
    assert saver.get_tuple(config("t")) is not None
    wait_for(lambda: saver.get_tuple(config("t")) is None, seconds=5)
    assert saver.sweep().deleted == ["t"]


def sweep_in_a_process(description: tuple[str, dict[str, Any]], now: float) -> None:
    store = reopen(description)
    try:
        report = TelarSaver(store, ttl={"default_ttl": 60}, clock=lambda: now).sweep()
        assert report.deleted == ["idle"], report
    finally:
        store.close()


def test_a_sweep_in_another_process_deletes_what_expired_and_nothing_else(shared_store: Store, clock: Clock) -> None:
    saver = TelarSaver(shared_store, ttl={"default_ttl": 60}, clock=clock)
    graph = in_a_row(a=lambda s: {"log": ["a"]}, b=lambda s: {"log": ["b"]}).compile(checkpointer=saver)
    graph.invoke({"log": []}, config("idle"))
    clock.advance(59)
    graph.invoke({"log": []}, config("live"))
    clock.advance(2)
    process = processes().Process(target=sweep_in_a_process, args=(describe(shared_store), clock()))
    process.start()
    process.join(timeout=120)
    assert process.exitcode == 0
    assert_deleted(saver, "idle")
    assert graph.get_state(config("live")).values["log"] == ["a", "b"]
    with pytest.raises(ThreadDeletedError):  # a run that goes on from the swept thread
        saver.put(
            {"configurable": {"thread_id": "idle", "checkpoint_ns": "", "checkpoint_id": "1f1f0000-0000-6000-8000-000000000000"}},
            {"v": 4, "id": "1f1f0000-0000-6000-8000-000000000001", "ts": "", "channel_values": {}, "channel_versions": {},
             "versions_seen": {}, "updated_channels": None},
            {"source": "loop", "step": 1}, {},
        )


def test_the_cli_expires_with_a_dry_run_first(tmp_path: Any, capsys: Any) -> None:
    from telar_checkpoint.cli import main

    directory = tmp_path / "threads"
    saver = TelarSaver(directory)
    in_a_row(a=lambda s: {"log": ["a"]}).compile(checkpointer=saver).invoke({"log": []}, config("t"))
    TelarSaver(directory, ttl={"default_ttl": 1}).set_thread_ttl("t", 0.0001)  # records its expiry
    time.sleep(1.1)
    assert main(["expire", str(directory), "--ttl", "1", "--dry-run", "--json"]) == 0
    dry = json.loads(capsys.readouterr().out)
    assert dry["deleted"] == 1 and dry["dry_run"] and dry["deleted_threads"] == ["t"]
    assert TelarSaver(directory).get_tuple(config("t")) is not None
    assert main(["expire", str(directory), "--ttl", "1"]) == 0
    assert "1 expired thread deleted" in capsys.readouterr().out
    assert History.parse("t", TelarSaver(directory).store.read("t") or "").only_deleted
    assert main(["expire", str(directory)]) == 2  # no time-to-live given
    assert "--ttl" in capsys.readouterr().err


def test_a_ttl_works_on_a_store_of_the_four_abstract_methods(clock: Clock) -> None:
    """A store of one's own (`read`, `update`, `delete`, `keys` on a dict) takes a time-to-live:
    a real graph's idle thread expires and the sweep deletes it, the live one stays, and the
    store's own keys of its expiries and lease are listed as no thread."""
    from tests.stores import PlainStore

    store = PlainStore()
    saver = TelarSaver(store, ttl={"default_ttl": 60}, clock=clock)
    graph = in_a_row(a=lambda s: {"log": ["a"]}, b=lambda s: {"log": ["b"]}).compile(checkpointer=saver)
    graph.invoke({"log": []}, config("idle"))
    clock.advance(59)
    graph.invoke({"log": []}, config("live"))
    assert visible(saver) == {"idle", "live"} and store.thread_keys() == ["idle", "live"]
    assert any(key.startswith(RESERVED) for key in store.keys())  # the expiries, kept in the store
    assert [summary.thread_id for summary in list_threads(store).threads] == ["idle", "live"]
    assert sorted(verify_store(store).threads) == ["idle", "live"]
    clock.advance(2)
    assert saver.get_tuple(config("idle")) is None and visible(saver) == {"live"}
    report = saver.sweep()
    assert report.deleted == ["idle"] and not report.failed
    assert_deleted(saver, "idle")
    assert graph.get_state(config("live")).values["log"] == ["a", "b"]
    assert saver.sweep().examined == 0
    assert TelarSaver(PlainStore(), ttl=None).ttl is None
    assert TelarSaver(MemoryStore(), ttl=TTL(default_ttl=5.0)).ttl == TTL(default_ttl=5.0)


def test_a_sweep_report_adds_up() -> None:
    a, b = SweepReport(deleted=["x"], bytes_freed=3, examined=2), SweepReport(trimmed=["y"], bytes_freed=4, examined=1)
    a.add(b)
    assert (a.deleted, a.trimmed, a.bytes_freed, a.examined) == (["x"], ["y"], 7, 3)


def test_a_migration_and_an_import_start_a_fresh_clock(store: Store, clock: Clock) -> None:
    """Threads brought from elsewhere keep their checkpoints' ids, made long ago: their clock
    starts when they arrive, not when those checkpoints were made."""
    from telar_checkpoint import migrate
    from telar_checkpoint.migration import export_thread, import_thread

    old = InMemorySaver()
    graph = in_a_row(a=lambda s: {"log": ["a"]}).compile(checkpointer=old)
    graph.invoke({"log": []}, config("migrated"))
    source = TelarSaver(MemoryStore())
    in_a_row(a=lambda s: {"log": ["a"]}).compile(checkpointer=source).invoke({"log": []}, config("imported"))
    clock.advance(10 * MONTH)  # both threads' checkpoints are ten months old
    saver = TelarSaver(store, ttl={"default_ttl": 60}, clock=clock)
    assert migrate(old, saver).threads == 1
    import_thread(saver, "imported", export_thread(source, "imported"))
    clock.advance(30)
    assert visible(saver) == {"migrated", "imported"}
    assert saver.sweep().examined == 0
    clock.advance(31)
    assert visible(saver) == set()
    assert sorted(saver.sweep().deleted) == ["imported", "migrated"]


def test_the_threads_command_hides_what_expired(tmp_path: Any, capsys: Any, clock: Clock) -> None:
    from telar_checkpoint.cli import main

    directory = tmp_path / "threads"
    saver = TelarSaver(directory, ttl={"default_ttl": 1}, clock=clock)
    graph = in_a_row(a=lambda s: {"log": ["a"]}).compile(checkpointer=saver)
    graph.invoke({"log": []}, config("old"))
    saver.set_thread_ttl("old", 0.0001)  # (the command's clock is the real one)
    graph.invoke({"log": []}, config("new"))
    time.sleep(1.1)
    assert main(["threads", str(directory), "--ttl", "1", "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert [t["thread_id"] for t in listing["threads"]] == ["new"] and listing["expired"] == ["old"]
    assert main(["threads", str(directory), "--ttl", "1"]) == 0
    assert "1 expired thread not shown" in capsys.readouterr().out
    assert main(["threads", str(directory), "--ttl", "1", "--expired", "--json"]) == 0
    assert [t["thread_id"] for t in json.loads(capsys.readouterr().out)["threads"]] == ["old"]
    assert main(["threads", str(directory), "--json"]) == 0  # no time-to-live: every thread
    assert {t["thread_id"] for t in json.loads(capsys.readouterr().out)["threads"]} == {"old", "new"}


@pytest.mark.parametrize(("ttl", "reads"), [(30, 30.0), (0.5, 0.5), (None, float("inf"))])
def test_a_threads_own_ttl_is_a_field_of_its_root_dropped_line(ttl: Any, reads: float) -> None:
    from telar_checkpoint.format import DroppedLine, write_dropped

    line = json.loads(write_dropped(DroppedLine("", None, ttl=reads)))
    assert line == {"format": 1, "kind": "dropped", "floor": None, "replaced": [], "ttl": ttl}
    history = History.parse("t", json.dumps(line) + "\n")
    assert history.own_ttl == reads


@pytest.mark.parametrize("bad", [0, -5, "60", True, [1]])
def test_a_bad_own_ttl_is_refused_naming_the_line(bad: Any) -> None:
    from telar_checkpoint.errors import CorruptLineError

    text = json.dumps({"format": 1, "kind": "dropped", "floor": None, "replaced": [], "ttl": bad}) + "\n"
    with pytest.raises(CorruptLineError, match="'ttl'") as raised:
        History.parse("t", text)
    assert raised.value.line == 1 and "'t'" in str(raised.value)


def test_a_subgraph_line_with_a_ttl_is_refused() -> None:
    from telar_checkpoint.errors import UnknownFormatError

    text = json.dumps({"format": 2, "kind": "dropped", "ns": "child:1", "floor": None, "replaced": [], "ttl": 5}) + "\n"
    with pytest.raises(UnknownFormatError, match="ttl"):
        History.parse("t", text)


def test_verify_accepts_a_thread_with_its_own_ttl_and_the_records_of_expiry(tmp_path: Any, clock: Clock) -> None:
    from telar_checkpoint.verify import verify_store

    saver = TelarSaver(tmp_path / "threads", ttl={"default_ttl": 60}, clock=clock)
    graph = in_a_row(a=lambda s: {"log": ["a"]}).compile(checkpointer=saver)
    graph.invoke({"log": []}, config("own"))
    graph.invoke({"log": []}, config("expires"))
    saver.set_thread_ttl("own", None)
    clock.advance(61)
    assert saver.sweep().deleted == ["expires"]
    report = verify_store(saver.store)
    assert report.ok and report.problems == [], report.problems


@needs_delta_channel
def test_keep_latest_keeps_what_a_delta_channel_needs(store: Store, clock: Clock) -> None:
    """A thread whose state is a DeltaChannel (rebuilt from the writes of the checkpoints since
    its last snapshot) expires to its latest checkpoint and reads whole, before and after the
    sweep, as on InMemorySaver; and the conversation goes on."""
    saver = TelarSaver(store, ttl={"default_ttl": 60, "strategy": "keep_latest"}, clock=clock)
    graph = delta_graph().compile(checkpointer=saver)
    reference = delta_graph().compile(checkpointer=InMemorySaver())
    for turn in range(8):
        graph.invoke({"messages": [f"user {turn}"]}, config("delta"))
        reference.invoke({"messages": [f"user {turn}"]}, config("delta"))
    before = len(History.parse("delta", store.read("delta")).entries)
    clock.advance(61)
    expected = reference.get_state(config("delta")).values
    assert graph.get_state(config("delta")).values == expected
    assert saver.sweep().trimmed == ["delta"]
    assert 1 <= len(History.parse("delta", store.read("delta")).entries) < before  # the latest, and its delta chain
    assert graph.get_state(config("delta")).values == expected
    out = graph.invoke({"messages": ["user 8"]}, config("delta"))
    assert out == reference.invoke({"messages": ["user 8"]}, config("delta"))


def test_a_clone_of_the_saver_sweeps_in_turn_with_it(store: Store, clock: Clock) -> None:
    """`with_allowlist` (LangGraph calls it at compile) gives a saver of its own name in the
    sweep's lease: while the original sweeps, the clone's sweep is skipped."""
    saver = TelarSaver(store, ttl={"default_ttl": 1}, clock=clock)
    clone = saver.with_allowlist([("my_app", "Model")])
    assert clone is not saver
    lease: Any = store
    assert lease.lease("sweep", saver._lifetime.holder, clock(), 60)  # the original's sweep under way
    assert clone.sweep().skipped
    lease.release("sweep", saver._lifetime.holder)
    assert not clone.sweep().skipped
