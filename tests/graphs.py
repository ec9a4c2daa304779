"""Real LangGraph graphs the tests run on TelarSaver and on InMemorySaver, and a summary to compare."""

from __future__ import annotations

import operator
import sys
import time
from typing import Annotated, Any

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, Send, StateSnapshot
from typing_extensions import TypedDict

from telar_checkpoint.demo import approval_graph


def skip_async_interrupt_before_python_311(mode: str) -> None:
    """Skip an async run of a graph that calls `interrupt()` on Python 3.10: asyncio tasks carry no
    context there, so LangGraph's `interrupt()` inside `ainvoke` fails with every checkpointer,
    InMemorySaver too ("Called get_config outside of a runnable context")."""
    if mode == "async" and sys.version_info < (3, 11):
        pytest.skip("LangGraph's interrupt() in async graphs needs Python 3.11")


async_interrupts = pytest.mark.skipif(
    sys.version_info < (3, 11), reason="LangGraph's interrupt() in async graphs needs Python 3.11 (skip_async_interrupt_before_python_311)"
)
"""The mark of a test whose async run calls `interrupt()`."""


class Steps(TypedDict):
    log: Annotated[list[str], operator.add]
    count: int


def multi_step() -> StateGraph:
    """Three nodes in a row, each appending to a log and counting."""
    builder = StateGraph(Steps)
    for name in ("a", "b", "c"):
        builder.add_node(name, lambda s, n=name: {"log": [n], "count": s.get("count", 0) + 1})
    builder.add_edge(START, "a")
    builder.add_edge("a", "b")
    builder.add_edge("b", "c")
    builder.add_edge("c", END)
    return builder


class Approval(TypedDict):
    request: str
    answer: str
    log: Annotated[list[str], operator.add]


def with_interrupt() -> StateGraph:
    """Asks a human (interrupt) between two steps: the demo's approval graph."""
    return approval_graph()


def nested_subgraphs(depth: int) -> StateGraph:
    """A parent graph calling a subgraph (depth 1) or a subgraph calling a subgraph (depth 2), which interrupts."""

    def inner_builder() -> StateGraph:
        inner = StateGraph(Approval)
        inner.add_node("inner_ask", with_interrupt().nodes["ask"].runnable)
        inner.add_node("inner_done", lambda s: {"log": ["inner done"]})
        inner.add_edge(START, "inner_ask")
        inner.add_edge("inner_ask", "inner_done")
        return inner

    sub = inner_builder().compile()
    if depth == 2:
        middle = StateGraph(Approval)
        middle.add_node("middle_start", lambda s: {"log": ["middle start"]})
        middle.add_node("inner", sub)
        middle.add_edge(START, "middle_start")
        middle.add_edge("middle_start", "inner")
        sub = middle.compile()
    parent = StateGraph(Approval)
    parent.add_node("start", lambda s: {"log": ["parent start"]})
    parent.add_node("child", sub)
    parent.add_node("end", lambda s: {"log": ["parent end"]})
    parent.add_edge(START, "start")
    parent.add_edge("start", "child")
    parent.add_edge("child", "end")
    return parent


class FanOut(TypedDict):
    items: list[int]
    results: Annotated[list[int], operator.add]


def fan_out(fail_marker: dict[str, Any], calls: list[int]) -> StateGraph:
    """`Send`s one task per item; the task for 3 fails while `fail_marker["fail"]` is set."""

    def plan(s: FanOut) -> list[Send]:
        return [Send("work", {"items": [i], "results": []}) for i in s["items"]]

    def work(s: FanOut) -> dict:
        item = s["items"][0]
        calls.append(item)
        if item == 3 and fail_marker.get("fail"):
            time.sleep(0.3)  # fail after the other tasks are done, so which tasks re-run is certain
            raise RuntimeError("task 3 fails")
        return {"results": [item * 10]}

    builder = StateGraph(FanOut)
    builder.add_node("work", work)
    builder.add_conditional_edges(START, plan, ["work"])
    builder.add_edge("work", END)
    return builder


def normalize(value: Any) -> Any:
    """Outputs with run-specific ids taken out (interrupt ids derive from checkpoint ids, message ids are random)."""
    if isinstance(value, dict):
        return {k: normalize(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(normalize(v) for v in value)
    if type(value).__name__ == "Interrupt":
        return ("Interrupt", normalize(value.value))
    if type(value).__name__.endswith(("Message", "MessageChunk")):  # message ids are random per run
        return value.model_copy(update={"id": None})
    return value


def summary(snapshot: StateSnapshot) -> tuple:
    """What must match between savers: values, next nodes, tasks and interrupts, source and step."""
    tasks = tuple(
        (t.name, tuple(i.value for i in t.interrupts), summary(t.state) if isinstance(t.state, StateSnapshot) else None)
        for t in snapshot.tasks
    )
    meta = snapshot.metadata or {}
    return (normalize(snapshot.values), snapshot.next, tasks, meta.get("source"), meta.get("step"))


def history_summary(graph: Any, config: dict) -> list[tuple]:
    return [summary(s) for s in graph.get_state_history(config)]


async def ahistory_summary(graph: Any, config: dict) -> list[tuple]:
    return [summary(s) async for s in graph.aget_state_history(config)]


def resume(value: Any) -> Command:
    return Command(resume=value)


def path_to_head(history: list) -> list:
    """The snapshots on the parent chain of the newest one (what a thread keeps of its branches)."""
    by_id = {s.config["configurable"]["checkpoint_id"]: s for s in history}
    path, cursor = [], history[0]
    while cursor is not None:
        path.append(cursor)
        parent = cursor.parent_config
        cursor = by_id.get(parent["configurable"]["checkpoint_id"]) if parent else None
    return path


class Api:
    """One graph API call set, sync or async, so each scenario is written once."""

    def __init__(self, mode: str) -> None:
        self.mode = mode

    async def invoke(self, graph: Any, value: Any, config: dict, **kw: Any) -> Any:
        if self.mode == "sync":
            return normalize(graph.invoke(value, config, **kw))
        return normalize(await graph.ainvoke(value, config, **kw))

    async def state(self, graph: Any, config: dict, **kw: Any) -> Any:
        return graph.get_state(config, **kw) if self.mode == "sync" else await graph.aget_state(config, **kw)

    async def history(self, graph: Any, config: dict) -> list:
        if self.mode == "sync":
            return list(graph.get_state_history(config))
        return [s async for s in graph.aget_state_history(config)]

    async def update(self, graph: Any, config: dict, values: Any, **kw: Any) -> dict:
        if self.mode == "sync":
            return graph.update_state(config, values, **kw)
        return await graph.aupdate_state(config, values, **kw)
