"""max_history on real graphs: the depth holds per thread across namespaces, and state stays right."""

from __future__ import annotations

import operator
from typing import Annotated

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from typing_extensions import TypedDict

from telar_checkpoint import CheckpointDroppedError, TelarSaver
from tests.graphs import multi_step, nested_subgraphs, resume, skip_async_interrupt_before_python_311


def config(thread: str = "t") -> dict:
    return {"configurable": {"thread_id": thread}}


def stored_counts(saver: TelarSaver, thread: str = "t") -> tuple[int, int]:
    """(root checkpoints, all checkpoints) as stored for the thread."""
    history = saver.codec.decode_history(thread, saver.store.read(thread))
    return sum(1 for r in history if not r.checkpoint_ns), len(history)


def test_depth_holds_on_a_growing_thread(store) -> None:
    saver = TelarSaver(store, max_history=5)
    graph, reference = multi_step().compile(checkpointer=saver), multi_step().compile(checkpointer=InMemorySaver())
    for turn in range(8):
        out = graph.invoke({"log": [str(turn)]}, config())
        assert out == reference.invoke({"log": [str(turn)]}, config())
        assert stored_counts(saver)[0] <= 5
    assert len(list(graph.get_state_history(config()))) == 5
    oldest = list(reference.get_state_history(config()))[-1]
    with pytest.raises(CheckpointDroppedError, match="was trimmed"):
        graph.get_state(oldest.config)


async def test_depth_holds_across_subgraph_namespaces(store) -> None:
    """Every subgraph call makes a namespace; N still bounds the whole thread."""
    skip_async_interrupt_before_python_311("async")
    saver = TelarSaver(store, max_history=4)
    graph = nested_subgraphs(2).compile(checkpointer=saver)
    reference = nested_subgraphs(2).compile(checkpointer=InMemorySaver())
    for turn in range(6):
        for g in (graph, reference):
            await g.ainvoke({"request": str(turn), "log": []}, config())
        assert (await graph.ainvoke(resume("ok"), config())) == (await reference.ainvoke(resume("ok"), config()))
        roots, total = stored_counts(saver)
        assert roots <= 4
        # At most N per namespace, and only namespaces of the N kept root checkpoints.
        assert total <= 4 + 4 * 4 * 2, total
    state, ref_state = await graph.aget_state(config(), subgraphs=True), await reference.aget_state(config(), subgraphs=True)
    assert state.values == ref_state.values and state.next == ref_state.next


try:  # langgraph>=1.2
    from langgraph.channels.delta import DeltaChannel
except ImportError:
    DeltaChannel = None
needs_delta_channel = pytest.mark.skipif(DeltaChannel is None, reason="DeltaChannel needs langgraph>=1.2")

if DeltaChannel is not None:

    class Chat(TypedDict):
        messages: Annotated[list, DeltaChannel(operator.add, snapshot_frequency=3)]
        turns: int


def delta_graph() -> StateGraph:
    builder = StateGraph(Chat)
    builder.add_node("reply", lambda s: {"messages": [f"reply {len(s['messages'])}"], "turns": s.get("turns", 0) + 1})
    builder.add_edge(START, "reply")
    return builder


@needs_delta_channel
@pytest.mark.parametrize("max_history", [1, 2, 5])
def test_trimming_never_breaks_delta_channel_state(store, max_history) -> None:
    saver = TelarSaver(store, max_history=max_history)
    graph = delta_graph().compile(checkpointer=saver)
    reference = delta_graph().compile(checkpointer=InMemorySaver())
    for turn in range(14):
        out = graph.invoke({"messages": [f"user {turn}"]}, config())
        assert out == reference.invoke({"messages": [f"user {turn}"]}, config())
        assert graph.get_state(config()).values == reference.get_state(config()).values
    assert len(graph.get_state(config()).values["messages"]) == 28
    # The stored history is bounded: the last N plus the chain back to the newest snapshot.
    assert stored_counts(saver)[0] <= max_history + 2 * 3


def test_a_put_that_trims_a_thread_without_delta_channels_walks_no_parent_chain(monkeypatch: pytest.MonkeyPatch) -> None:
    """Trimming keeps the ancestors a DeltaChannel needs; a thread with none needs no walk, so a
    trimming put costs what the kept checkpoints cost, not their number squared."""
    from telar_checkpoint import MemoryStore
    from telar_checkpoint.history import History

    saver = TelarSaver(MemoryStore(), max_history=20)
    graph = multi_step().compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "t"}}
    for _ in range(3):
        graph.invoke({"log": ["x"]}, config)
    walked: list[str] = []
    original = History.ancestors

    def counting(self: History, ns: str, cid: str | None):  # type: ignore[no-untyped-def]
        for found in original(self, ns, cid):
            walked.append(found)
            yield found

    monkeypatch.setattr(History, "ancestors", counting)
    for _ in range(5):
        graph.invoke({"log": ["x"]}, config)
    assert len(list(saver.list(config))) == 20
    assert walked == []
