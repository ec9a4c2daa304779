"""An agent graph for the state tests: messages with tool calls, a pydantic model and a dataclass
in its state, and a human approval (interrupt) before the answer. Importable from a new process."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import interrupt
from pydantic import BaseModel


class Plan(BaseModel):
    goal: str
    steps: list[str] = []
    confidence: float = 0.0


@dataclass
class Budget:
    tokens: int = 0
    calls: list[str] = field(default_factory=list)


class AgentState(BaseModel):
    messages: Annotated[list[AnyMessage], add_messages] = []
    plan: Plan | None = None
    budget: Budget = Budget()


def agent(state: AgentState) -> dict:
    question = state.messages[-1].content
    call = {"name": "weather", "args": {"city": "Paris", "question": question}, "id": f"call-{len(state.messages)}"}
    return {
        "messages": [AIMessage("", tool_calls=[call], usage_metadata={"input_tokens": 12, "output_tokens": 7, "total_tokens": 19})],
        "plan": Plan(goal=str(question), steps=["look up the weather", "answer"], confidence=0.8),
        "budget": Budget(tokens=state.budget.tokens + 19, calls=[*state.budget.calls, "agent"]),
    }


def tool(state: AgentState) -> dict:
    call = state.messages[-1].tool_calls[0]
    return {"messages": [ToolMessage("The weather in Paris is sunny, 24 degrees", tool_call_id=call["id"], name="weather")]}


def approve(state: AgentState) -> dict:
    verdict = interrupt({"question": "send this answer?", "draft": state.messages[-1].content})
    return {"budget": Budget(tokens=state.budget.tokens, calls=[*state.budget.calls, f"approved:{verdict}"])}


def answer(state: AgentState) -> dict:
    return {"messages": [AIMessage(f"It is sunny in Paris ({state.budget.calls[-1]}).")]}


def build() -> StateGraph:
    builder = StateGraph(AgentState)
    for node in (agent, tool, approve, answer):
        builder.add_node(node)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", "tool")
    builder.add_edge("tool", "approve")
    builder.add_edge("approve", "answer")
    builder.add_edge("answer", END)
    return builder


def question(text: str) -> dict:
    return {"messages": [HumanMessage(text)]}
