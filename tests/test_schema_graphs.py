"""State-schema migrations on real graphs (issue 32): a human-in-the-loop graph, a chat agent, a
persistent subgraph, a Send fan-out with a failed branch and the Functional API, with each kind
of step on two graphs or more (`STEP_KINDS`). Each thread is
written by graph version 1, upgraded on read (a saver with `schema=`) or offline (`upgrade`),
then run on graph version 2, and must give what a thread started on version 2 and fed the same
inputs gives: every result and the final state, on every store kind. The programs are in
tests/schema_more_graphs.py."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from langgraph.types import Command

from telar_checkpoint import TelarSaver
from telar_checkpoint.history import History
from telar_checkpoint.schema import (
    Schema,
    SchemaRefusedError,
    SchemaVersionError,
    map_channel,
    rename_node,
)
from telar_checkpoint.schema_upgrade import aupgrade, upgrade
from telar_checkpoint.stores import MemoryStore, Store
from tests.schema_more_graphs import (
    ATTEMPTS,
    CHAT,
    DOUBLED,
    FANOUT,
    FUNCTIONAL_MAP,
    HITL,
    PROGRAMS,
    STEP_KINDS,
    SUBGRAPH,
    Profile,
    Program,
    afeed,
    feed,
    saved_total,
)


def _config(thread_id: str, ns: str = "") -> Any:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns}}


def _thread(program: Program) -> str:
    return f"{program.name}-{uuid.uuid4().hex[:8]}"  # the flaky branch and task counters are per thread


def _written_by_v1(store: Store, program: Program) -> str:
    thread = _thread(program)
    feed(program.v1(TelarSaver(store)), thread, program.inputs[: program.split], program.config)
    return thread


_REFERENCES: dict[str, tuple[str, list[Any]]] = {}


def _reference(program: Program) -> tuple[str, list[Any]]:
    """A thread started on version 2 and fed all the inputs: what it gives for those version 2
    is fed in the upgraded thread (and the final state). Run once per program (in each test
    process), in memory: what a graph gives does not depend on the store (tests/test_compat.py),
    and the upgraded threads compared with it are on every store."""
    if program.name not in _REFERENCES:
        thread = _thread(program)
        results = feed(program.v2(TelarSaver(MemoryStore(), schema=program.schema)), thread, program.inputs, program.config)
        _REFERENCES[program.name] = thread, results[program.split :]
    return _REFERENCES[program.name]


def _assert_upgraded(store: Store, thread: str, program: Program) -> None:
    text = store.read(thread)
    assert text is not None and History.parse(thread, text).schema_version == program.schema.version
    for gone in program.gone:
        assert gone not in text, f"{gone} still stored"


def _upgraded_on_read(store: Store, program: Program) -> tuple[str, list[Any]]:
    thread = _written_by_v1(store, program)
    before = store.read(thread)
    graph = program.v2(TelarSaver(store, schema=program.schema))
    graph.get_state(_config(thread))
    list(graph.get_state_history(_config(thread)))
    assert store.read(thread) == before  # a read writes nothing
    results = feed(graph, thread, program.inputs[program.split :], program.config)  # the first write stores it upgraded
    _assert_upgraded(store, thread, program)
    return thread, results


def _upgraded_offline(store: Store, program: Program) -> tuple[str, list[Any]]:
    thread = _written_by_v1(store, program)
    report = upgrade(store, program.schema, thread_ids=[thread])
    assert report.upgraded == {thread: 1} and report.failures == 0, report.failed
    _assert_upgraded(store, thread, program)
    graph = program.v2(TelarSaver(store, schema=program.schema))
    return thread, feed(graph, thread, program.inputs[program.split :], program.config)


WAYS = {"on-read": _upgraded_on_read, "offline": _upgraded_offline}


# --- every program, both ways, on every store kind (the `store` fixture of tests/conftest.py) ---


@pytest.mark.parametrize("way", list(WAYS))
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_v1_thread_upgraded_runs_as_if_started_on_v2(store: Store, name: str, way: str) -> None:
    program = PROGRAMS[name]
    thread, results = WAYS[way](store, program)
    reference, expected = _reference(program)
    assert results == expected
    if program.runs is not None:  # work with side effects (a Send branch, a task) ran as often
        assert program.runs(thread) == program.runs(reference)


def test_every_kind_of_step_is_run_on_real_graphs() -> None:
    """Each public kind of step is in the schema of the programs `STEP_KINDS` names for it, and
    those programs are of at least two of the graphs (so a step is not shown on one shape only)."""
    kinds = {"rename_channel", "drop_channel", "map_channel", "rename_node", "rename_class", "transform"}
    assert set(STEP_KINDS) == kinds
    family = {"hitl": "hitl", "chat": "chat", "subgraph": "subgraph", "send": "send", "functional": "functional"}
    for kind, names in STEP_KINDS.items():
        for name in names:
            steps = [step for steps in PROGRAMS[name].schema.steps.values() for step in steps]
            assert kind in {step.describe().partition("(")[0] for step in steps}, f"{name} has no {kind} step"
        assert len({family[name.partition("-")[0]] for name in names}) >= 2, kind


# --- the async API: on read through ainvoke, offline through aupgrade, on every store kind -------


@pytest.mark.parametrize("way", ["on-read", "offline"])
@pytest.mark.parametrize("program", [HITL], ids=lambda p: p.name)
async def test_async_v1_thread_upgraded_runs_as_if_started_on_v2(
    astore: Store, program: Program, way: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`aupgrade` lists and reads the threads through the store's async methods, and the thread
    upgraded by it, or on read by `aget_tuple`, runs on version 2 through the async API as a
    thread started there does."""
    thread = _thread(program)
    feed(program.v1(TelarSaver(astore)), thread, program.inputs[: program.split], program.config)
    before = await astore.aread(thread)
    if way == "offline":
        calls: list[str] = []

        def counted(name: str) -> Any:
            method = getattr(astore, name)

            async def counting(*args: Any) -> Any:
                calls.append(name)
                return await method(*args)

            return counting

        with monkeypatch.context() as patched:
            for name in ("akeys", "aread"):
                patched.setattr(astore, name, counted(name))
            seen: list[tuple[int, int]] = []
            report = await aupgrade(astore, program.schema, progress=lambda done, total, _: seen.append((done, total)))
        assert report.upgraded == {thread: 1} and report.failures == 0, report.failed
        assert seen == [(1, 1)] and calls[:2] == ["akeys", "aread"]
        assert (await astore.aread(thread)) != before
        assert (await aupgrade(astore, program.schema)).current == [thread]  # twice changes nothing
    graph = program.v2(TelarSaver(astore, schema=program.schema))
    if way == "on-read":
        await graph.aget_state(_config(thread))
        assert (await astore.aread(thread)) == before  # a read writes nothing
    results = await afeed(graph, thread, program.inputs[program.split :], program.config)
    _assert_upgraded(astore, thread, program)
    reference, expected = _reference(program)
    assert results == expected
    if program.runs is not None:
        assert program.runs(thread) == program.runs(reference)


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_without_the_schema_v2_does_not(name: str) -> None:
    """The control: without its schema, version 2 run on a thread of version 1 fails or gives
    another result, so the equality above is the schema's doing."""
    program = PROGRAMS[name]
    store = MemoryStore()
    thread = _written_by_v1(store, program)
    try:
        results: Any = feed(program.v2(TelarSaver(store)), thread, program.inputs[program.split :], program.config)
    except (AssertionError, KeyError, TypeError, AttributeError) as exc:
        results = f"raised {type(exc).__name__}"
    assert results != _reference(program)[1]


# --- what each program's upgrade changed where it is stored -------------------------------------


def _upgraded_saver(store: Store, program: Program, thread: str, way: str) -> TelarSaver:
    if way == "offline":
        assert upgrade(store, program.schema, thread_ids=[thread]).upgraded == {thread: 1}
    return TelarSaver(store, schema=program.schema)


@pytest.mark.parametrize("way", list(WAYS))
def test_send_pending_writes_of_the_successful_branches_are_renamed(way: str) -> None:
    """The fan-out failed in branch b: the writes of branches a and c are pending, to `results`;
    upgraded, they are writes to `findings`, and only branch b runs again on version 2."""
    store = MemoryStore()
    thread = _written_by_v1(store, FANOUT)
    saver = _upgraded_saver(store, FANOUT, thread, way)
    pending = saver.get_tuple(_config(thread)).pending_writes
    channels = sorted(channel for _, channel, _ in pending if channel in ("results", "findings"))
    assert channels == ["findings", "findings"] and ("__error__" in {c for _, c, _ in pending})
    assert sorted(value for _, channel, value in pending if channel == "findings") == [["A"], ["C"]]
    feed(FANOUT.v2(saver), thread, [None], FANOUT.config)
    assert [ATTEMPTS[(thread, t)] for t in "abc"] == [1, 2, 1]
    assert FANOUT.v2(saver).get_state(_config(thread)).values["report"] == "A+C+B"


@pytest.mark.parametrize("way", list(WAYS))
def test_subgraph_namespace_is_upgraded(way: str) -> None:
    """The persistent subgraph's checkpoints (namespace "writer", paused in its interrupt) are
    upgraded as the root's are: the step applies to every namespace."""
    store = MemoryStore()
    thread = _written_by_v1(store, SUBGRAPH)
    assert '"ns":"writer"' in store.read(thread)
    saver = _upgraded_saver(store, SUBGRAPH, thread, way)
    inner = saver.get_tuple(_config(thread, "writer"))
    assert inner is not None
    values = inner.checkpoint["channel_values"]
    assert values["text"] == "about cats" and "draft" not in values and "scratch" not in values
    assert "draft" not in inner.checkpoint["channel_versions"]
    graph = SUBGRAPH.v2(saver)
    (task,) = graph.get_state(_config(thread), subgraphs=True).tasks
    assert task.name == "writer" and task.state.values["text"] == "about cats" and task.state.next == ("review",)


@pytest.mark.parametrize("way", list(WAYS))
def test_chat_history_reads_in_the_new_schema(way: str) -> None:
    """Time travel on the upgraded chat thread: every checkpoint holds `notes` (a list), never
    `summary`, and its profile as the renamed class."""
    store = MemoryStore()
    thread = _written_by_v1(store, CHAT)
    graph = CHAT.v2(_upgraded_saver(store, CHAT, thread, way))
    history = list(graph.get_state_history(_config(thread)))
    assert len(history) > 5
    assert all("summary" not in s.values for s in history)
    assert all(isinstance(s.values["profile"], Profile) for s in history if "profile" in s.values)
    notes = {tuple(s.values["notes"]) for s in history if "notes" in s.values}
    assert notes == {(), ("weather in Paris? -> sunny in Paris, Ada (turn 1)",)}  # before turn 1's answer, after
    # And an old checkpoint, run again (a fork), runs on version 2.
    first_answer = next(s for s in reversed(history) if s.values.get("notes"))
    forked = graph.invoke({"messages": [("user", "weather in Lima?")]}, first_answer.config)
    forked = graph.invoke(None, _config(thread))
    assert forked["notes"][-1] == "weather in Lima? -> sunny in Lima, Ada (turn 2)"


@pytest.mark.parametrize("way", list(WAYS))
def test_functional_task_result_is_kept(way: str) -> None:
    """The Functional API thread paused after its task ran: upgraded, its saved value
    (`__previous__`) is version 2's dict, and the task's pending result is used, not run again."""
    store = MemoryStore()
    thread = _written_by_v1(store, FUNCTIONAL_MAP)
    saver = _upgraded_saver(store, FUNCTIONAL_MAP, thread, way)
    assert saver.get_tuple(_config(thread)).checkpoint["channel_values"]["__previous__"] == {"total": 6, "turns": 1}
    assert DOUBLED[(thread, 4)] == 1
    assert FUNCTIONAL_MAP.v2(saver).invoke(Command(resume="sure"), _config(thread)) == "8 sure, total 14"
    assert DOUBLED[(thread, 4)] == 1


def test_a_schema_of_a_later_version_is_refused_by_the_old_graph(store: Store) -> None:
    """Never downgraded: the chat thread upgraded, then read by a saver of version 1, is refused."""
    thread = _written_by_v1(store, CHAT)
    upgrade(store, CHAT.schema, thread_ids=[thread])
    with pytest.raises(SchemaVersionError):
        CHAT.v1(TelarSaver(store, schema=Schema(version=1))).get_state(_config(thread))


def test_renaming_a_functional_entrypoint_is_refused(store: Store) -> None:
    """A limit, refused clearly: the tasks an entrypoint calls have ids LangGraph derives from the
    entrypoint's name and their own (not stored), so `rename_node` of an entrypoint cannot keep
    their results; the thread is left exactly as stored, offline and on read."""
    thread = _written_by_v1(store, FUNCTIONAL_MAP)
    before = store.read(thread)
    schema = Schema(version=2, steps={2: [map_channel("__previous__", saved_total), rename_node("tally", "count")]})
    report = upgrade(store, schema, thread_ids=[thread])
    error = report.failed[thread]
    assert isinstance(error, SchemaRefusedError) and report.upgraded == {}
    assert f"thread {thread!r}" in str(error) and "'tally'" in str(error) and "Functional API task" in str(error)
    assert store.read(thread) == before
    with pytest.raises(SchemaRefusedError, match="Functional API task"):
        TelarSaver(store, schema=schema).get_tuple(_config(thread))
    assert store.read(thread) == before
