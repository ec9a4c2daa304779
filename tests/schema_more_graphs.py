"""Real graphs of two versions of one program each, and the `Schema` that brings the threads of
version 1 to version 2: a chat agent, a persistent subgraph, a Send fan-out with a flaky branch
and the Functional API (a helper module for tests/test_schema_graphs.py, not tests).

Each `Program` is a list of inputs fed to one thread: the first `split` run on version 1 (the
thread is left paused, or failed with pending writes), the rest on version 2. A thread started
on version 2 and fed all of them is the reference an upgraded thread must equal."""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.config import get_config
from langgraph.func import entrypoint, task
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command, Interrupt, Send, interrupt
from pydantic import BaseModel

from telar_checkpoint.schema import Schema, drop_channel, map_channel, rename_channel, rename_class, rename_node, transform
from tests import schema_graphs

Graph = Callable[[Any], Any]  # a saver -> the compiled graph


@dataclass(frozen=True)
class Program:
    name: str
    v1: Graph
    v2: Graph
    schema: Schema
    inputs: list[Any]  # fed in order; an input `Raises(x)` is `x`, whose run must raise
    split: int  # inputs[:split] run on version 1
    gone: tuple[str, ...] = ()  # text no longer in the stored thread once upgraded
    runs: Callable[[str], dict[Any, int]] | None = None  # a thread's runs of work with side effects
    config: dict[str, Any] = field(default_factory=dict)  # given to each run


@dataclass(frozen=True)
class Raises:
    """An input whose run raises (a flaky node): the thread keeps its pending writes."""

    input: Any


def feed(graph: Any, thread_id: str, inputs: list[Any], config: dict[str, Any] | None = None) -> list[Any]:
    """Each input's result (normalized), the thread's final state last."""
    config = {**(config or {}), "configurable": {"thread_id": thread_id}}
    results = []
    for item in inputs:
        if isinstance(item, Raises):
            try:
                graph.invoke(item.input, config)
            except RuntimeError as exc:
                results.append(f"raised {exc}")
            else:
                raise AssertionError(f"{item.input!r} did not raise")
        else:
            results.append(normalize(graph.invoke(item, config)))
    state = graph.get_state(config)
    results.append({"values": normalize(state.values), "next": state.next})
    return results


async def afeed(graph: Any, thread_id: str, inputs: list[Any], config: dict[str, Any] | None = None) -> list[Any]:
    """`feed` through the async API (`ainvoke`, `aget_state`)."""
    config = {**(config or {}), "configurable": {"thread_id": thread_id}}
    results = []
    for item in inputs:
        if isinstance(item, Raises):
            try:
                await graph.ainvoke(item.input, config)
            except RuntimeError as exc:
                results.append(f"raised {exc}")
            else:
                raise AssertionError(f"{item.input!r} did not raise")
        else:
            results.append(normalize(await graph.ainvoke(item, config)))
    state = await graph.aget_state(config)
    results.append({"values": normalize(state.values), "next": state.next})
    return results


def normalize(value: Any) -> Any:
    """`value` without what differs from one thread to the next (message and interrupt ids,
    which LangGraph derives from random ids), with the classes of stored values named."""
    if isinstance(value, BaseMessage):
        return (type(value).__name__, value.content, getattr(value, "tool_calls", None), getattr(value, "tool_call_id", None))
    if isinstance(value, Interrupt):
        return ("Interrupt", normalize(value.value))
    if isinstance(value, BaseModel):
        return (type(value).__qualname__, value.model_dump())
    if isinstance(value, dict):
        return {k: normalize(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [normalize(v) for v in value]
    return value


# --- the HITL program of tests/schema_graphs.py: rename_channel, map_channel, drop_channel, rename_node ---

HITL = Program(
    "hitl", schema_graphs.graph_v1, schema_graphs.graph_v2, schema_graphs.SCHEMA,
    [{"request": " hi "}, Command(resume="yes")], split=1, gone=('"notes"', '"scratch"', '"branch:to:ask"'),
)


# --- a chat agent: rename_channel + map_channel (a str becomes a list) + rename_class ------------


class ProfileV1(BaseModel):
    """Version 1's name of the class stored in the state."""

    name: str
    language: str


class Profile(BaseModel):
    """Version 2's name of it (the class moved: `rename_class`)."""

    name: str
    language: str


@tool
def lookup(query: str) -> str:
    """Look up the weather."""
    return f"sunny in {query.split()[-1].rstrip('?')}"


class ChatV1(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    summary: str  # the last turn's summary
    profile: ProfileV1


class ChatV2(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    notes: Annotated[list[str], operator.add]  # was `summary`: one summary a turn, kept
    profile: Profile


def _tool_call(messages: list[AnyMessage]) -> AIMessage:
    """What the model says to a question: the same in both versions."""
    question = str(messages[-1].content)
    return AIMessage("", tool_calls=[{"name": "lookup", "args": {"query": question}, "id": f"call-{len(messages)}"}])


def chat_v1(saver: Any) -> Any:
    def agent(state: ChatV1) -> dict[str, Any]:
        messages = state["messages"]
        if isinstance(messages[-1], HumanMessage):
            return {"messages": [_tool_call(messages)], "profile": state.get("profile") or ProfileV1(name="Ada", language="en")}
        profile = state["profile"]
        assert isinstance(profile, ProfileV1)
        turn = sum(isinstance(m, HumanMessage) for m in messages)
        reply = f"{messages[-1].content}, {profile.name} (turn {turn})"
        return {"messages": [AIMessage(reply)], "summary": f"{messages[-3].content} -> {reply}"}

    return _chat(ChatV1, agent, saver)


def chat_v2(saver: Any, tools: str = "tools") -> Any:
    def agent(state: ChatV2) -> dict[str, Any]:
        messages = state["messages"]
        if isinstance(messages[-1], HumanMessage):
            return {"messages": [_tool_call(messages)], "profile": state.get("profile") or Profile(name="Ada", language="en")}
        profile = state["profile"]
        assert isinstance(profile, Profile), f"profile is a {type(profile).__name__}"
        notes = state.get("notes", [])
        reply = f"{messages[-1].content}, {profile.name} (turn {len(notes) + 1})"
        return {"messages": [AIMessage(reply)], "notes": [f"{messages[-3].content} -> {reply}"]}

    return _chat(ChatV2, agent, saver, tools)


def _chat(state: type, agent: Callable[..., Any], saver: Any, tools: str = "tools") -> Any:
    builder = StateGraph(state)
    builder.add_node("agent", agent)
    builder.add_node(tools, ToolNode([lookup]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition, {"tools": tools, END: END})
    builder.add_edge(tools, "agent")
    return builder.compile(checkpointer=saver, interrupt_before=[tools])  # a human checks each tool call


def summary_as_notes(summary: str | list[str]) -> list[str]:
    return summary if isinstance(summary, list) else [summary]


CHAT = Program(
    "chat", chat_v1, chat_v2,
    Schema(version=2, steps={2: [
        rename_channel("summary", "notes"),
        map_channel("notes", summary_as_notes, writes=False),
        rename_class("tests.schema_more_graphs:ProfileV1", "tests.schema_more_graphs:Profile"),
    ]}),
    # turn 1 whole on version 1; turn 2 paused before its tool call, continued on version 2; turn 3.
    [{"messages": [HumanMessage("weather in Paris?")]}, None, {"messages": [HumanMessage("weather in Rome?")]},
     None, {"messages": [HumanMessage("weather in Oslo?")]}, None],
    split=3, gone=('"summary"', "ProfileV1"),
)
CHAT_RENAMED = Program(
    # version 2 also renamed the tool node `tools` to `act`: turn 2 is paused before it (interrupt_before).
    "chat-rename-node", chat_v1, partial(chat_v2, tools="act"),
    Schema(version=2, steps={2: [*CHAT.schema.steps[2], rename_node("tools", "act")]}),
    CHAT.inputs, split=3, gone=(*CHAT.gone, '"branch:to:tools"'),
)


# --- a persistent subgraph (checkpointer=True) paused inside: rename_channel + drop_channel in every namespace ---


class DraftV1(TypedDict, total=False):
    topic: str
    draft: str
    scratch: str
    log: Annotated[list[str], operator.add]


class DraftV2(TypedDict, total=False):
    topic: str
    text: str
    log: Annotated[list[str], operator.add]


def subgraph_v1(saver: Any, persistent: bool = True) -> Any:
    def write(state: DraftV1) -> dict[str, Any]:
        return {"draft": f"about {state['topic']}", "scratch": "tmp", "log": [f"wrote {state['topic']}"]}

    def review(state: DraftV1) -> dict[str, Any]:
        verdict = interrupt({"review": state["draft"]})
        return {"draft": f"{state['draft']} ({verdict})", "log": [f"reviewed {verdict}"]}

    def publish(state: DraftV1) -> dict[str, Any]:
        return {"log": [f"published {state['draft']}"]}

    return _drafts(DraftV1, write, review, publish, saver, persistent)


def subgraph_v2(saver: Any, persistent: bool = True, review_node: str = "review") -> Any:
    def write(state: DraftV2) -> dict[str, Any]:
        return {"text": f"about {state['topic']}", "log": [f"wrote {state['topic']}"]}

    def review(state: DraftV2) -> dict[str, Any]:
        verdict = interrupt({"review": state["text"]})
        return {"text": f"{state['text']} ({verdict})", "log": [f"reviewed {verdict}"]}

    def publish(state: DraftV2) -> dict[str, Any]:
        return {"log": [f"published {state['text']}"]}

    return _drafts(DraftV2, write, review, publish, saver, persistent, review_node)


def _drafts(state: type, write: Any, review: Any, publish: Any, saver: Any, persistent: bool, review_node: str = "review") -> Any:
    inner = StateGraph(state)
    inner.add_node("write", write)
    inner.add_node(review_node, review)
    inner.add_edge(START, "write")
    inner.add_edge("write", review_node)
    parent = StateGraph(state)
    # persistent: its state kept between turns, in namespace "writer"; else in "writer:<task id>" while paused
    parent.add_node("writer", inner.compile(checkpointer=True) if persistent else inner.compile())
    parent.add_node("publish", publish)
    parent.add_edge(START, "writer")
    parent.add_edge("writer", "publish")
    parent.add_edge("publish", END)
    return parent.compile(checkpointer=saver)


SUBGRAPH = Program(
    "subgraph", subgraph_v1, subgraph_v2,
    Schema(version=2, steps={2: [rename_channel("draft", "text"), drop_channel("scratch")]}),
    [{"topic": "cats"}, Command(resume="ok"), {"topic": "dogs"}, Command(resume="fine")],
    split=1, gone=('"draft"', '"scratch"'),
)
SUBGRAPH_PAUSED = Program(
    "subgraph-paused", partial(subgraph_v1, persistent=False), partial(subgraph_v2, persistent=False),
    SUBGRAPH.schema, SUBGRAPH.inputs, split=1, gone=SUBGRAPH.gone,
)


# --- a Send fan-out whose branch fails once: rename_channel of the successful branches' pending writes ---

ATTEMPTS: Counter[tuple[str, str]] = Counter()  # (thread, topic) -> the runs of its branch


class FanV1(TypedDict, total=False):
    topics: list[str]
    results: Annotated[list[str], operator.add]
    report: str


class FanV2(TypedDict, total=False):
    topics: list[str]
    findings: Annotated[list[str], operator.add]
    report: str


def _research(item: dict[str, str], config: RunnableConfig) -> str:
    """A branch's finding; the branch of "b" fails on its first run in each thread."""
    topic = item["topic"]
    key = (config["configurable"]["thread_id"], topic)
    ATTEMPTS[key] += 1
    if topic == "b" and ATTEMPTS[key] == 1:
        raise RuntimeError("flaky branch b")
    return topic.upper()


def fanout_v1(saver: Any) -> Any:
    builder = StateGraph(FanV1)
    builder.add_node("work", lambda item, config: {"results": [_research(item, config)]})
    builder.add_node("reduce", lambda state: {"report": "+".join(state["results"])})
    builder.add_conditional_edges(START, lambda state: [Send("work", {"topic": t}) for t in state["topics"]], ["work"])
    builder.add_edge("work", "reduce")
    builder.add_edge("reduce", END)
    return builder.compile(checkpointer=saver)


def fanout_v2(saver: Any, node: str = "work") -> Any:
    """Version 2 of the fan-out: `results` is `findings`; its branches run in node `node`."""
    builder = StateGraph(FanV2)
    builder.add_node(node, lambda item, config: {"findings": [_research(item, config)]})
    builder.add_node("reduce", lambda state: {"report": "+".join(state["findings"])})
    builder.add_conditional_edges(START, lambda state: [Send(node, {"topic": t}) for t in state["topics"]], [node])
    builder.add_edge(node, "reduce")
    builder.add_edge("reduce", END)
    return builder.compile(checkpointer=saver)


FANOUT = Program(
    "send", fanout_v1, fanout_v2,
    Schema(version=2, steps={2: [rename_channel("results", "findings")]}),
    # The branches run one at a time (max_concurrency=1), b last: a and c have stored their writes
    # when b fails (run in parallel, b's failure may stop the run before c's writes are stored).
    [Raises({"topics": ["a", "c", "b"]}), None, {"topics": ["d"]}],
    split=1, gone=('"results"',), runs=lambda thread: {k[1]: n for k, n in ATTEMPTS.items() if k[0] == thread},
    config={"max_concurrency": 1},
)


# --- the Functional API: the entrypoint's saved value (`__previous__`) changes type ---

DOUBLED: Counter[tuple[str, int]] = Counter()  # (thread, argument) -> the runs of the task


@task
def double(n: int) -> int:
    DOUBLED[(get_config()["configurable"]["thread_id"], n)] += 1
    return 2 * n


def functional_v1(saver: Any) -> Any:
    @entrypoint(checkpointer=saver)
    def tally(n: int, *, previous: Any = None) -> Any:
        doubled = double(n).result()
        verdict = interrupt(f"add {doubled}?")
        total = int((previous or "total=0").removeprefix("total="))
        return entrypoint.final(value=f"{doubled} {verdict}", save=f"total={total + doubled}")

    return tally


def functional_v2(saver: Any) -> Any:
    @entrypoint(checkpointer=saver)
    def tally(n: int, *, previous: Any = None) -> Any:
        doubled = double(n).result()
        verdict = interrupt(f"add {doubled}?")
        assert previous is None or isinstance(previous, dict), f"previous is {previous!r}"
        saved = {"total": (previous or {"total": 0})["total"] + doubled, "turns": (previous or {"turns": 0})["turns"] + 1}
        return entrypoint.final(value=f"{doubled} {verdict}, total {saved['total']}", save=saved)

    return tally


def saved_total(previous: Any) -> Any:
    """Version 1's saved "total=N" as version 2 saves it (a dict, and the turns it counts)."""
    if not isinstance(previous, str):
        return previous
    return {"total": int(previous.removeprefix("total=")), "turns": 1}


def saved_total_state(state: dict[str, Any]) -> dict[str, Any]:
    """The same, as a `transform` of the whole state."""
    if "__previous__" in state:
        state["__previous__"] = saved_total(state["__previous__"])
    return state


_FUNCTIONAL_INPUTS = [3, Command(resume="yes"), 4, Command(resume="sure"), 5, Command(resume="ok")]

FUNCTIONAL_MAP = Program(
    "functional-map", functional_v1, functional_v2,
    Schema(version=2, steps={2: [map_channel("__previous__", saved_total)]}),
    _FUNCTIONAL_INPUTS, split=3, gone=('"total=',), runs=lambda thread: {k[1]: n for k, n in DOUBLED.items() if k[0] == thread},
)
FUNCTIONAL_TRANSFORM = Program(
    "functional-transform", functional_v1, functional_v2,
    Schema(version=2, steps={2: [transform(saved_total_state)]}),
    _FUNCTIONAL_INPUTS, split=3, runs=FUNCTIONAL_MAP.runs,  # (a transform leaves pending writes as they are)
)



def fanout_renamed_v2(saver: Any) -> Any:
    """Version 2 of the fan-out with its node `work` renamed `research` too."""
    return fanout_v2(saver, node="research")


FANOUT_RENAMED = Program(
    "send-rename-node", fanout_v1, fanout_renamed_v2,
    Schema(version=2, steps={2: [rename_channel("results", "findings"), rename_node("work", "research")]}),
    FANOUT.inputs, split=1, gone=('"results"', '"node":"work"'), runs=FANOUT.runs, config=FANOUT.config,
)


# --- the steps on the graphs above not yet shown on them: transform on StateGraphs, drop_channel ---
# --- on the chat agent and the fan-out, map_channel and rename_class of pending writes, a node ---
# --- renamed inside a paused subgraph --------------------------------------------------------


def notes_as_memo(state: dict[str, Any]) -> dict[str, Any]:
    """The HITL program's steps as one `transform`: `notes` renamed `memo`, stripped; `scratch` gone."""
    if "notes" in state:
        state["memo"] = state.pop("notes").strip()
    state.pop("scratch", None)
    return state


HITL_TRANSFORM = Program(
    "hitl-transform", schema_graphs.graph_v1, schema_graphs.graph_v2,
    Schema(version=2, steps={2: [transform(notes_as_memo), rename_node("ask", "ask_user")]}),
    HITL.inputs, split=1, gone=('"branch:to:ask"',),  # (a transform leaves the stored writes as they are)
)


class ChatLean(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    profile: Profile  # (version 2 keeps no summary: it counts the turns in the messages)


def chat_lean(saver: Any) -> Any:
    def agent(state: ChatLean) -> dict[str, Any]:
        messages = state["messages"]
        if isinstance(messages[-1], HumanMessage):
            return {"messages": [_tool_call(messages)], "profile": state.get("profile") or Profile(name="Ada", language="en")}
        profile = state["profile"]
        assert isinstance(profile, Profile), f"profile is a {type(profile).__name__}"
        turn = sum(isinstance(m, HumanMessage) for m in messages)
        return {"messages": [AIMessage(f"{messages[-1].content}, {profile.name} (turn {turn})")]}

    return _chat(ChatLean, agent, saver)


def profile_rebuilt(state: dict[str, Any]) -> dict[str, Any]:
    """The stored profile as an object of version 2's class, built from its fields (the way to
    go where a class changed more than its name)."""
    if isinstance(state.get("profile"), ProfileV1):
        state["profile"] = Profile(**state["profile"].model_dump())
    return state


CHAT_DROP = Program(
    # version 2 keeps no summary; its profile class is made anew by a transform (not renamed)
    "chat-drop", chat_v1, chat_lean,
    Schema(version=2, steps={2: [drop_channel("summary"), transform(profile_rebuilt)]}),
    CHAT.inputs, split=3, gone=('"summary"',),
)


def draft_as_text(state: dict[str, Any]) -> dict[str, Any]:
    """The subgraph program's steps as one `transform` (applied in every namespace)."""
    if "draft" in state:
        state["text"] = state.pop("draft")
    state.pop("scratch", None)
    return state


SUBGRAPH_INNER_RENAMED = Program(
    # version 2 renamed the subgraph's node `review`, in which it is paused (namespace "writer")
    "subgraph-inner-rename", subgraph_v1, partial(subgraph_v2, review_node="check"),
    Schema(version=2, steps={2: [transform(draft_as_text), rename_node("review", "check")]}),
    SUBGRAPH.inputs, split=1, gone=('"branch:to:review"',),
)


class FindingV1(BaseModel):
    topic: str


class Finding(BaseModel):
    """Version 2's `FindingV1`, moved, with a field more (a default: a stored one decodes)."""

    topic: str
    source: str = "unknown"


class FanClassesV1(TypedDict, total=False):
    topics: list[str]
    results: Annotated[list[FindingV1], operator.add]
    trace: Annotated[list[str], operator.add]
    report: str


class FanClassesV2(TypedDict, total=False):
    topics: list[str]
    results: Annotated[list[Finding], operator.add]
    report: str


def fanout_classes_v1(saver: Any) -> Any:
    builder = StateGraph(FanClassesV1)
    builder.add_node("work", lambda item, config: {
        "results": [FindingV1(topic=_research(item, config))], "trace": [f"searched {item['topic']}"]})
    builder.add_node("reduce", lambda state: {"report": "+".join(f.topic for f in state["results"])})
    builder.add_conditional_edges(START, lambda state: [Send("work", {"topic": t}) for t in state["topics"]], ["work"])
    builder.add_edge("work", "reduce")
    builder.add_edge("reduce", END)
    return builder.compile(checkpointer=saver)


def fanout_classes_v2(saver: Any) -> Any:
    def reduce(state: FanClassesV2) -> dict[str, Any]:
        assert all(type(f) is Finding for f in state["results"]), state["results"]
        return {"report": "+".join(f"{f.topic}@{f.source}" for f in state["results"])}

    builder = StateGraph(FanClassesV2)
    builder.add_node("work", lambda item, config: {"results": [Finding(topic=_research(item, config), source="search")]})
    builder.add_node("reduce", reduce)
    builder.add_conditional_edges(START, lambda state: [Send("work", {"topic": t}) for t in state["topics"]], ["work"])
    builder.add_edge("work", "reduce")
    builder.add_edge("reduce", END)
    return builder.compile(checkpointer=saver)


def searched(findings: list[Any]) -> list[Any]:
    """A list of findings (the channel's value, or a branch's pending write) with their source."""
    return [f.model_copy(update={"source": "search"}) if isinstance(f, Finding) and f.source == "unknown" else f for f in findings]


FANOUT_CLASSES = Program(
    # the successful branches' pending writes hold the renamed class and the dropped channel
    "send-classes", fanout_classes_v1, fanout_classes_v2,
    Schema(version=2, steps={2: [
        rename_class("tests.schema_more_graphs:FindingV1", "tests.schema_more_graphs:Finding"),
        map_channel("results", searched), drop_channel("trace"),
    ]}),
    FANOUT.inputs, split=1, gone=("FindingV1", '"trace"'), runs=FANOUT.runs, config=FANOUT.config,
)

PROGRAMS = {
    p.name: p
    for p in (
        HITL, HITL_TRANSFORM, CHAT, CHAT_RENAMED, CHAT_DROP, SUBGRAPH, SUBGRAPH_PAUSED,
        SUBGRAPH_INNER_RENAMED, FANOUT, FANOUT_RENAMED, FANOUT_CLASSES, FUNCTIONAL_MAP, FUNCTIONAL_TRANSFORM,
    )
}

# Each kind of step, on the programs that show it on a real graph (tests/test_schema_graphs.py
# checks that this table is what the schemas above hold, and that every kind has a row).
STEP_KINDS = {
    "rename_channel": ("hitl", "chat", "subgraph", "send"),
    "drop_channel": ("hitl", "chat-drop", "subgraph", "send-classes"),
    "map_channel": ("hitl", "chat", "send-classes", "functional-map"),
    "rename_node": ("hitl", "chat-rename-node", "subgraph-inner-rename", "send-rename-node"),
    "rename_class": ("chat", "send-classes"),
    "transform": ("hitl-transform", "chat-drop", "subgraph-inner-rename", "functional-transform"),
}
