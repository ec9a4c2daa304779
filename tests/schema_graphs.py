"""Graphs of two versions of one program, for the schema migration tests (a helper module, not
tests; a child process imports it too)."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

from telar_checkpoint.schema import Schema, drop_channel, map_channel, rename_channel, rename_node


class StateV1(TypedDict, total=False):
    request: str
    notes: str
    scratch: str
    log: Annotated[list[str], operator.add]


class StateV2(TypedDict, total=False):
    request: str
    memo: str
    log: Annotated[list[str], operator.add]


def graph_v1(saver: Any) -> Any:
    def prepare(state: StateV1) -> dict[str, Any]:
        return {"notes": f"  {state['request']}  ", "scratch": "tmp", "log": [f"prepared {state['request']}"]}

    def ask(state: StateV1) -> dict[str, Any]:
        answer = interrupt({"question": state["notes"].strip()})
        return {"log": [f"answer {answer}"]}

    def finish(state: StateV1) -> dict[str, Any]:
        return {"log": [f"done {state['notes'].strip()}"]}

    builder = StateGraph(StateV1)
    builder.add_node("prepare", prepare)
    builder.add_node("ask", ask)
    builder.add_node("finish", finish)
    builder.add_edge(START, "prepare")
    builder.add_edge("prepare", "ask")
    builder.add_edge("ask", "finish")
    builder.add_edge("finish", END)
    return builder.compile(checkpointer=saver)


def graph_v2(saver: Any) -> Any:
    def prepare(state: StateV2) -> dict[str, Any]:
        return {"memo": state["request"].strip(), "log": [f"prepared {state['request']}"]}

    def ask_user(state: StateV2) -> dict[str, Any]:
        answer = interrupt({"question": state["memo"]})
        return {"log": [f"answer {answer}"]}

    def finish(state: StateV2) -> dict[str, Any]:
        return {"log": [f"done {state['memo']}"]}

    builder = StateGraph(StateV2)
    builder.add_node("prepare", prepare)
    builder.add_node("ask_user", ask_user)
    builder.add_node("finish", finish)
    builder.add_edge(START, "prepare")
    builder.add_edge("prepare", "ask_user")
    builder.add_edge("ask_user", "finish")
    builder.add_edge("finish", END)
    return builder.compile(checkpointer=saver)


def _strip(memo: str) -> str:
    return memo.strip()


SCHEMA = Schema(
    version=2,
    steps={2: [rename_channel("notes", "memo"), map_channel("memo", _strip), drop_channel("scratch"), rename_node("ask", "ask_user")]},
)
