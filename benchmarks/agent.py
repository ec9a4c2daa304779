"""The agent-loop graph the benchmarks invoke: fake nodes, real LangChain messages, no LLM.

One turn is a human message (the input), an AI message with a tool call, a tool
message and an AI answer of about 500 bytes: three nodes after the input, so a
turn makes four checkpoints. The content varies with the turn so no two
messages are equal.
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.graph import END, START, MessagesState, StateGraph

ANSWER_BYTES = 500
_FILLER = (
    "The forecast for the coast is mild with a light westerly breeze, clearing by the afternoon; "
    "inland, expect scattered showers and a cooler evening. "
)


def _answer(turn: int) -> str:
    head = f"Answer {turn}: "
    body = (_FILLER * (ANSWER_BYTES // len(_FILLER) + 1))[: ANSWER_BYTES - len(head)]
    return head + body


def human(turn: int) -> HumanMessage:
    """The input of turn `turn`."""
    return HumanMessage(content=f"Turn {turn}: what is the weather in city number {turn} tomorrow?")


def _call_tool(state: MessagesState) -> dict[str, Any]:
    turn = len(state["messages"]) // 4
    call = {"name": "weather", "args": {"city": f"city-{turn}", "day": "tomorrow"}, "id": f"call_{turn:06d}"}
    return {"messages": [AIMessage(content="", tool_calls=[call])]}


def _run_tool(state: MessagesState) -> dict[str, Any]:
    call = state["messages"][-1].tool_calls[0]  # type: ignore[union-attr]
    content = f'{{"city": "{call["args"]["city"]}", "high": 21, "low": 12, "rain": 0.3}}'
    return {"messages": [ToolMessage(content=content, tool_call_id=call["id"], name="weather")]}


def _answer_node(state: MessagesState) -> dict[str, Any]:
    return {"messages": [AIMessage(content=_answer(len(state["messages"]) // 4))]}


def agent_builder() -> StateGraph:
    """human -> AI tool call -> tool -> AI answer, one turn per invoke."""
    builder = StateGraph(MessagesState)
    builder.add_node("agent", _call_tool)
    builder.add_node("tools", _run_tool)
    builder.add_node("answer", _answer_node)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", "tools")
    builder.add_edge("tools", "answer")
    builder.add_edge("answer", END)
    return builder
