"""The history rules on real graphs, every store, sync and async.

`max_history` bounds what a thread stores and never changes what a graph computes; the
history is the path that led to the current state, however LangGraph branched it; and
a thread holds version 2 lines only while a run is paused inside a subgraph (or for a
persistent subgraph's state).
"""

from __future__ import annotations

import operator
from typing import Annotated, Any

import orjson
import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Send, interrupt
from typing_extensions import TypedDict

from telar_checkpoint import CheckpointDroppedError, TelarSaver
from telar_checkpoint import format as line_format
from telar_checkpoint.history import History
from tests.graphs import (
    Api,
    fan_out,
    nested_subgraphs,
    path_to_head,
    resume,
    skip_async_interrupt_before_python_311,
    summary,
    with_interrupt,
)


def config(thread: str = "t") -> dict:
    return {"configurable": {"thread_id": thread}}


def stored_formats(saver: TelarSaver, thread: str = "t") -> list[int]:
    text = saver.store.read(thread) or ""
    return [orjson.loads(line)["format"] for line in text.split("\n")[:-1]]


def subgraph_lines(saver: TelarSaver, thread: str = "t") -> list[str]:
    """The stored lines saved inside a subgraph (version 2)."""
    text = saver.store.read(thread) or ""
    return [line for line in text.split("\n")[:-1] if "ns" in orjson.loads(line)]


def read_without_subgraphs(saver: TelarSaver, thread: str = "t") -> History:
    """The thread as a reader that knows no subgraph reads it: format version 1 only."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(line_format, "READERS", {1: line_format.READERS[1]})
        patch.setattr(line_format, "_STORED_ONLY", {})
        return History.parse(thread, saver.store.read(thread))


async def assert_history_is_the_path(api: Api, graph: Any, thread: str = "t") -> list:
    """get_state_history is exactly the parent chain of the newest checkpoint."""
    history = await api.history(graph, config(thread))
    assert [s.config for s in path_to_head(history)] == [s.config for s in history]
    return history


# --- 1. max_history never resets a persistent subgraph ----------------------------------------


class Hits(TypedDict):
    hits: Annotated[list[int], operator.add]
    total: int


class Turn(TypedDict):
    turn: int
    seen: Annotated[list[int], operator.add]


def counter_parent(mode: str, uses: set[int]) -> StateGraph:
    """A parent whose node calls a `checkpointer=True` counter subgraph on the turns in `uses`."""
    sub = StateGraph(Hits)
    sub.add_node("count", lambda s: {"total": len(s["hits"])})
    sub.add_edge(START, "count")
    counter = sub.compile(checkpointer=True)

    # Each node passes its config on to the subgraph: langgraph 1.0, and asyncio before Python
    # 3.11, do not carry it there by themselves.
    if mode == "sync":

        def maybe_count(s: Turn, config: RunnableConfig) -> dict:
            return {"seen": [counter.invoke({"hits": [1]}, config)["total"]]} if s["turn"] in uses else {}

    else:

        async def maybe_count(s: Turn, config: RunnableConfig) -> dict:  # type: ignore[misc]
            return {"seen": [(await counter.ainvoke({"hits": [1]}, config))["total"]]} if s["turn"] in uses else {}

    builder = StateGraph(Turn)
    builder.add_node("maybe_count", maybe_count)
    builder.add_node("pad", lambda s: {})
    builder.add_edge(START, "maybe_count")
    builder.add_edge("maybe_count", "pad")
    builder.add_edge("pad", END)
    return builder


@pytest.mark.parametrize("max_history", [1, 2, 5, 20])
async def test_a_persistent_subgraph_keeps_counting_under_any_depth(store, api, max_history) -> None:
    seen = {}
    for name, saver in (("memory", InMemorySaver()), ("telar", TelarSaver(store, max_history=max_history))):
        graph = counter_parent(api.mode, {0, 1, 11}).compile(checkpointer=saver)
        for turn in range(12):
            out = await api.invoke(graph, {"turn": turn}, config())
        seen[name] = out["seen"]
    assert seen["telar"] == seen["memory"] == [1, 2, 3]


class Asked(TypedDict):
    answers: Annotated[list[str], operator.add]


class Work(TypedDict):
    turn: int
    steps: int
    log: Annotated[list[str], operator.add]


def paused_persistent_parent(mode: str, work_steps: int) -> StateGraph:
    """The parent runs `work_steps` steps, then a persistent subgraph that asks a human."""
    sub = StateGraph(Asked)
    sub.add_node("ask", lambda s: {"answers": [interrupt(f"question {len(s.get('answers', []))}")]})
    sub.add_edge(START, "ask")
    asker = sub.compile(checkpointer=True)

    if mode == "sync":

        def ask(s: Work, config: RunnableConfig) -> dict:
            return {"log": [",".join(asker.invoke({"answers": []}, config)["answers"])]}

    else:

        async def ask(s: Work, config: RunnableConfig) -> dict:  # type: ignore[misc]
            return {"log": [",".join((await asker.ainvoke({"answers": []}, config))["answers"])]}

    builder = StateGraph(Work)
    builder.add_node("work", lambda s: {"steps": s.get("steps", 0) + 1, "log": [f"w{s.get('steps', 0)}"]})
    builder.add_node("ask", ask)
    builder.add_edge(START, "work")
    builder.add_conditional_edges("work", lambda s: "work" if s["steps"] % work_steps else "ask", ["work", "ask"])
    builder.add_edge("ask", END)
    return builder


@pytest.mark.parametrize("max_history", [1, 3])
async def test_a_paused_persistent_subgraph_resumes_after_more_than_n_steps(store, api, max_history) -> None:
    skip_async_interrupt_before_python_311(api.mode)
    results = []
    for saver in (InMemorySaver(), TelarSaver(store, max_history=max_history)):
        graph = paused_persistent_parent(api.mode, work_steps=2 * max_history + 2).compile(checkpointer=saver)
        run = [await api.invoke(graph, {"turn": 0}, config())]
        run.append(await api.invoke(graph, resume("yes"), config()))
        run.append(await api.invoke(graph, {"turn": 1}, config()))  # asks again: its answers persist
        run.append(await api.invoke(graph, resume("no"), config()))
        run.append(summary(await api.state(graph, config())))
        results.append(run)
    assert results[1] == results[0]
    assert results[1][3]["log"][-1] == "yes,no"


# --- 2. Send fan-out under a small depth --------------------------------------------------------


class Mapped(TypedDict):
    items: list[int]
    results: Annotated[list[int], operator.add]


class Square(TypedDict):
    item: int
    results: Annotated[list[int], operator.add]


class Squared(TypedDict):
    results: Annotated[list[int], operator.add]


def fan_out_to_subgraph() -> StateGraph:
    """Each `Send` runs a subgraph, so each task makes a namespace of its own."""
    sub = StateGraph(Square, output_schema=Squared)
    sub.add_node("square", lambda s: {"results": [s["item"] ** 2]})
    sub.add_edge(START, "square")
    builder = StateGraph(Mapped)
    builder.add_node("work", sub.compile())
    builder.add_conditional_edges(START, lambda s: [Send("work", {"item": i}) for i in s["items"]], ["work"])
    builder.add_edge("work", END)
    return builder


@pytest.mark.parametrize("max_history", [1, 2])
async def test_send_fan_out_under_a_small_depth(store, api, max_history) -> None:
    outputs = []
    for saver in (InMemorySaver(), TelarSaver(store, max_history=max_history)):
        graph = fan_out_to_subgraph().compile(checkpointer=saver)
        plain = fan_out({}, []).compile(checkpointer=saver)
        run = []
        for turn in range(3):
            run.append(sorted((await api.invoke(graph, {"items": [turn, turn + 1, turn + 2], "results": []}, config()))["results"]))
            run.append(sorted((await api.invoke(plain, {"items": [turn, 5], "results": []}, config("plain")))["results"]))
            if isinstance(saver, TelarSaver):
                assert not subgraph_lines(saver), "every fan-out task's subgraph call is over"
                assert len(await assert_history_is_the_path(api, graph)) <= max_history
        outputs.append(run)
    assert outputs[1] == outputs[0]


# --- 3. every way LangGraph branches a thread keeps only the path ------------------------------


async def test_re_deciding_an_old_interrupt_drops_the_old_branch(store, api) -> None:
    skip_async_interrupt_before_python_311(api.mode)
    runs = []
    for saver in (InMemorySaver(), TelarSaver(store)):
        graph = with_interrupt().compile(checkpointer=saver)
        await api.invoke(graph, {"request": "deploy", "log": []}, config())
        paused = (await api.state(graph, config())).config
        first = await api.invoke(graph, resume("yes"), config())
        paused_id = paused["configurable"]["checkpoint_id"]
        old_branch = [s.config for s in await api.history(graph, config()) if s.config["configurable"]["checkpoint_id"] > paused_id]
        second = await api.invoke(graph, resume("no"), paused)
        history = await api.history(graph, config())
        runs.append((first, second, summary(await api.state(graph, config())), history, old_branch))
    (ref_first, ref_second, ref_state, ref_history, _), (first, second, state, history, old_branch) = runs
    assert (first, second, state) == (ref_first, ref_second, ref_state)
    assert second["log"][-1].startswith("finished: ")  # LangGraph answers with the resume it stored first
    assert [summary(s) for s in history] == [summary(s) for s in path_to_head(ref_history)]
    assert len(ref_history) > len(history)  # InMemorySaver keeps both branches
    graph = with_interrupt().compile(checkpointer=TelarSaver(store))
    await assert_history_is_the_path(api, graph)
    with pytest.raises(CheckpointDroppedError, match="was replaced"):
        await api.state(graph, old_branch[0])


async def test_going_back_before_a_subgraph_call_drops_that_calls_checkpoints(store, api) -> None:
    skip_async_interrupt_before_python_311(api.mode)
    runs = []
    for saver in (InMemorySaver(), TelarSaver(store)):
        graph = nested_subgraphs(1).compile(checkpointer=saver)
        steps = [await api.invoke(graph, {"request": "r", "log": []}, config())]
        steps.append(await api.invoke(graph, resume("first"), config()))
        before_call = next(s for s in await api.history(graph, config()) if s.next == ("child",))
        steps.append(await api.invoke(graph, None, before_call.config))  # replays the call: it pauses again
        if isinstance(saver, TelarSaver):
            # langgraph 1.2 pauses in the call again; 1.0 replays it with the answer stored before.
            paused = (await api.state(graph, config())).next == ("child",)
            namespaces = {ns for ns, _ in read_history(saver).entries if ns}
            assert len(namespaces) == (1 if paused else 0), "only a paused call's namespace is left"
            assert bool(subgraph_lines(saver)) == paused
        steps.append(await api.invoke(graph, resume("second"), config()))
        steps.append(summary(await api.state(graph, config(), subgraphs=True)))
        if isinstance(saver, TelarSaver):
            assert not subgraph_lines(saver)
            await assert_history_is_the_path(api, graph)
        runs.append(steps)
    assert runs[1] == runs[0]


def read_history(saver: TelarSaver, thread: str = "t") -> History:
    return History.parse(thread, saver.store.read(thread))


async def test_update_and_replay_forks_keep_only_the_path_once_the_run_moves_on(store, api) -> None:
    skip_async_interrupt_before_python_311(api.mode)
    saver = TelarSaver(store)
    graph = with_interrupt().compile(checkpointer=saver)
    await api.invoke(graph, {"request": "a", "log": []}, config())
    await api.invoke(graph, resume("yes"), config())
    history = await api.history(graph, config())
    prepared = next(s for s in history if s.next == ("ask",))
    forked = await api.update(graph, prepared.config, {"request": "b"})
    await api.invoke(graph, None, forked)  # pauses at ask again, on the new branch
    await api.invoke(graph, resume("again"), config())
    await assert_history_is_the_path(api, graph)
    start = next(s for s in await api.history(graph, config()) if s.next == ("prepare",))
    await api.invoke(graph, None, start.config)  # replay from there: pauses at ask
    await assert_history_is_the_path(api, graph)
    assert (await api.state(graph, config())).next == ("ask",)


# --- 4. version 2 only while paused inside a subgraph ---------------------------------------------


@pytest.mark.parametrize("depth", [1, 2])
async def test_version_2_only_while_paused_in_a_subgraph(store, api, depth) -> None:
    skip_async_interrupt_before_python_311(api.mode)
    saver = TelarSaver(store)
    graph = nested_subgraphs(depth).compile(checkpointer=saver)
    reference = nested_subgraphs(depth).compile(checkpointer=InMemorySaver())
    for turn in range(2):
        for g in (graph, reference):
            await api.invoke(g, {"request": str(turn), "log": []}, config())
        assert subgraph_lines(saver), "a run paused in a subgraph keeps its lines (version 2, or 3)"
        assert summary(await api.state(graph, config(), subgraphs=True)) == summary(await api.state(reference, config(), subgraphs=True))
        done = await api.invoke(graph, resume("ok"), config())
        assert done == await api.invoke(reference, resume("ok"), config())
        assert not subgraph_lines(saver) and set(stored_formats(saver)) == {1}
        # A reader that knows no subgraph reads the whole thread, and finds what a current one finds.
        old_reader = read_without_subgraphs(saver)
        assert list(old_reader.entries) == list(read_history(saver).entries)


# --- 5. keep_finished_subgraphs: a past step's subgraph state can be inspected ------------------


async def subgraph_states_of_past_steps(api: Api, graph: Any) -> list:
    """What LangGraph Studio shows: the state and history of each past step's subgraph task."""
    shown = []
    for snapshot in await api.history(graph, config()):
        for task in snapshot.tasks:
            if isinstance(task.state, dict):
                scoped = {"configurable": {**config()["configurable"], "checkpoint_ns": task.state["configurable"]["checkpoint_ns"]}}
                state = await api.state(graph, scoped)
                shown.append((summary(state), [summary(s) for s in await api.history(graph, scoped)]))
    return shown


async def test_keep_finished_subgraphs_lets_past_steps_subgraphs_be_inspected(store, api) -> None:
    skip_async_interrupt_before_python_311(api.mode)
    shown = []
    for saver in (InMemorySaver(), TelarSaver(store, keep_finished_subgraphs=True), TelarSaver(store, max_history=1)):
        graph = nested_subgraphs(2).compile(checkpointer=saver)
        thread = config()
        await api.invoke(graph, {"request": "r", "log": []}, thread)
        await api.invoke(graph, resume("ok"), thread)
        shown.append(await subgraph_states_of_past_steps(api, graph))
        if isinstance(saver, TelarSaver):
            saver.store.delete("t")
    reference, kept, dropped = shown
    assert reference and kept == reference
    # By default a call's checkpoints go once it is over: LangGraph then shows no subgraph
    # state for the step, as for a thread that never ran it.
    assert dropped == []


def test_kept_subgraph_calls_go_with_the_step_they_ran_in() -> None:
    from telar_checkpoint import CheckpointCodec, CheckpointRecord

    codec = CheckpointCodec(keep_finished_subgraphs=True)

    def put(text, n, parent, ns="", root=None):
        checkpoint = {"v": 4, "id": f"{n:08d}", "ts": "t", "channel_values": {}, "channel_versions": {}, "versions_seen": {}}
        metadata = {"source": "loop", "step": n, "parents": {"": f"{root:08d}"} if root else {}}
        return codec.append(text, CheckpointRecord(checkpoint, metadata, ns, f"{parent:08d}" if parent else None), 2)

    text = None
    for i in range(1, 6):
        text = put(text, i * 10, (i - 1) * 10 or None)
        text = put(text, i * 10 + 1, None, ns=f"child:{i}", root=i * 10)
    namespaces = {r.checkpoint_ns for r in codec.decode_history("t", text)}
    assert namespaces == {"", "child:4", "child:5"}  # the calls of the two root checkpoints kept
