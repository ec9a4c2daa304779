"""Sends stored mid-run and resumed by a new saver, on every store.

`Send` is the LangGraph type whose fields changed between the releases we support (langgraph 1.2
added `timeout`), so `.ci/run` runs this file on the oldest declared dependencies as well as the
newest.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.prebuilt import create_react_agent

from telar_checkpoint import TelarSaver
from telar_checkpoint.stores import Store
from tests.graphs import fan_out

CONFIG = {"configurable": {"thread_id": "t"}}


def run_fan_out_twice(first: Any, second: Any) -> tuple[list[int], list[int], list[int]]:
    """Task 3 of a four-way fan-out fails under `first`; `second` resumes the thread.
    Returns (tasks run first, tasks run on resume, results)."""
    marker, calls = {"fail": True}, []
    with pytest.raises(RuntimeError, match="task 3 fails"):
        fan_out(marker, calls).compile(checkpointer=first).invoke({"items": [1, 2, 3, 4], "results": []}, CONFIG)
    first_calls = sorted(calls)
    marker["fail"] = False
    done = fan_out(marker, calls).compile(checkpointer=second).invoke(None, CONFIG)
    return first_calls, calls[len(first_calls) :], sorted(done["results"])


def test_a_send_fan_out_is_stored_and_resumed_by_a_new_saver(store: Store) -> None:
    reference = InMemorySaver()
    expected = run_fan_out_twice(reference, reference)
    got = run_fan_out_twice(TelarSaver(store), TelarSaver(store))
    assert got == expected
    assert got[1:] == ([3], [10, 20, 30, 40]), "only the failed task re-runs, from what was stored"
    assert '"$send"' in store.read("t"), "the fan-out's Sends are stored as JSON"


class ScriptedChatModel(GenericFakeChatModel):
    """Replies with the scripted messages in turn; accepts tools as a real chat model does."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedChatModel:
        return self


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def scripted_replies() -> Iterator[BaseMessage]:
    return iter(
        [
            AIMessage("", tool_calls=[{"name": "add", "args": {"a": 2, "b": 3}, "id": "call-1", "type": "tool_call"}]),
            AIMessage("2 + 3 = 5"),
        ]
    )


# The subject is create_react_agent, deprecated for langchain.agents.create_agent, which users still call.
@pytest.mark.filterwarnings("ignore:create_react_agent has been moved:DeprecationWarning")
def test_a_react_agent_tool_call_is_stored_and_resumed_by_a_new_saver(store: Store) -> None:
    """create_react_agent sends each tool call to its tool node as a `Send`; pausing before the
    tools stores that `Send`, and a new saver resumes it."""
    model = ScriptedChatModel(messages=scripted_replies())

    def agent(saver: TelarSaver) -> Any:
        return create_react_agent(model, [add], checkpointer=saver, interrupt_before=["tools"])

    paused = agent(TelarSaver(store)).invoke({"messages": [HumanMessage("what is 2 + 3?")]}, CONFIG)
    assert paused["messages"][-1].tool_calls[0]["name"] == "add"
    assert '"$send"' in store.read("t"), "the pending tool call is stored as a Send"
    done = agent(TelarSaver(store)).invoke(None, CONFIG)
    tool_reply, answer = done["messages"][-2:]
    assert isinstance(tool_reply, ToolMessage) and tool_reply.content == "5"
    assert answer.content == "2 + 3 = 5"
