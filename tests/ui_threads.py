"""Real threads for the viewer's tests (telar_checkpoint/ui), made by real LangGraph graphs on a saver.

`make_ui_threads(saver)` runs one graph per kind of thread a viewer must show (a chat paused at a
question, a run paused inside a nested subgraph, a fan-out with a failed task, a history forked by
time travel, a thread of hostile markup and huge values) and returns their thread ids by name;
`make_big_thread` stores a thread of many checkpoints quickly. Sync `invoke` only, so it runs on
Python 3.10 too. tests/test_ui_threads.py checks each thread has the shape said here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Annotated, Any

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.checkpoint.base import ChannelVersions, Checkpoint, CheckpointMetadata, empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import interrupt
from typing_extensions import TypedDict

from telar_checkpoint import TelarSaver
from tests.graphs import fan_out, multi_step, nested_subgraphs
from tests.programs import ScriptedChatModel, get_weather

SCRIPT = '<script>alert("x")</script>'
IMG = '"><img src=x onerror=alert(1)>'
HOSTILE_ID = f"{SCRIPT}{IMG}"
"""The hostile thread's id: markup that breaks out of an attribute and runs script if not escaped."""
HOSTILE_METADATA = {"<b>k</b>": "<img src=x onerror=alert(1)>"}
HOSTILE_NODE = "<i>reply</i>"  # its node's name: in `next`, tasks, versions_seen and a branch channel
HUGE_CHARS = 1_000_000
HUGE = (SCRIPT * (HUGE_CHARS // len(SCRIPT) + 1))[:HUGE_CHARS]
"""The hostile thread's `huge` value: 1,000,000 characters of repeated markup."""
DEPTH = 100


def deep_dict(depth: int = DEPTH) -> dict[str, Any]:
    """A dict nested `depth` levels (`{"level": 1, "next": {...}}`), markup at the bottom."""
    value: dict[str, Any] = {"<b>k</b>": IMG, "text": SCRIPT}
    for level in range(depth, 0, -1):
        value = {"level": level, "next": value}
    return value


THREAD_IDS = {
    "chat": "ui-chat",
    "subgraph": "ui-subgraph",
    "fanout": "ui-fanout",
    "forked": "ui-forked",
    "hostile": HOSTILE_ID,
}
QUESTION = "Send the report to bob@example.com?"
"""The chat's pending interrupt value: the question its `send_report` tool asks the user."""


def config_of(thread_id: str, **configurable: Any) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, **configurable}}


# --- chat: langchain's agent with a scripted model, two turns, paused in a tool's interrupt ---


@tool
def send_report(to: str) -> str:
    """Send the report by email, once the user says yes."""
    answer = interrupt(f"Send the report to {to}?")
    return f"Report sent to {to}: {answer}."


def chat_agent(saver: TelarSaver) -> Any:
    """langchain's `create_agent` with two tools."""
    from langchain.agents import create_agent

    return create_agent(ScriptedChatModel(), [get_weather, send_report], checkpointer=saver)


def make_chat(saver: TelarSaver, thread_id: str) -> None:
    """Turn 1: Human, AI calling get_weather, its Tool result, AI answer. Turn 2: Human, AI calling
    send_report, whose tool is paused at `interrupt(QUESTION)` (node "tools")."""
    agent = chat_agent(saver)
    config = config_of(thread_id)
    for n, text in enumerate(["what is the weather in Paris?", "please send the report to bob@example.com"]):
        agent.invoke({"messages": [HumanMessage(text, id=f"question-{n}")]}, config)


# --- subgraph: paused at an interrupt two subgraphs down ---


def make_subgraph(saver: TelarSaver, thread_id: str) -> None:
    """tests/graphs.nested_subgraphs(2): root `start` -> `child` (middle_start -> `inner`
    (inner_ask interrupts)), stored in namespaces "", "child:<task>" and "child:<task>|inner:<task>"."""
    graph = nested_subgraphs(2).compile(checkpointer=saver)
    graph.invoke({"request": "the report", "log": []}, config_of(thread_id))


# --- fanout: Send fan-out whose task for item 3 raises ---


def make_fanout(saver: TelarSaver, thread_id: str) -> None:
    """tests/graphs.fan_out: four `work` tasks sent from START; the one for item 3 raises RuntimeError,
    so the latest checkpoint keeps the others' writes and an `__error__` write for it."""
    graph = fan_out({"fail": True}, []).compile(checkpointer=saver)
    try:
        graph.invoke({"items": [1, 2, 3, 4], "results": []}, config_of(thread_id))
    except RuntimeError as exc:
        if str(exc) != "task 3 fails":
            raise
    else:
        raise AssertionError("the fan-out's task 3 did not fail")


# --- forked: time travel by update_state, run on, then forked again at the same point ---


def make_forked(saver: TelarSaver, thread_id: str) -> None:
    """tests/graphs.multi_step (a -> b -> c), run to its end; then `update_state` on the checkpoint
    after `a` (as `a`), run on from that fork (the saver drops the abandoned b, c branch), then
    `update_state` on the same checkpoint again. The checkpoint after `a` ends with two children:
    the first fork (run on to the end) and the second (the head, `next` ("b",))."""
    graph = multi_step().compile(checkpointer=saver)
    config = config_of(thread_id)
    graph.invoke({"log": [], "count": 0}, config)
    after_a = next(s for s in graph.get_state_history(config) if s.next == ("b",))
    fork = graph.update_state(after_a.config, {"log": ["edited"]}, as_node="a")
    graph.invoke(None, fork)
    graph.update_state(after_a.config, {"log": ["edited again"]}, as_node="a")


# --- hostile: markup in the id, metadata and messages; a huge string and a deep dict ---


class Hostile(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    huge: str
    deep: dict[str, Any]


def hostile_graph() -> StateGraph:
    def reply(state: Hostile) -> dict[str, Any]:
        return {"messages": [AIMessage(IMG, id="answer-0")], "huge": HUGE, "deep": deep_dict()}

    builder = StateGraph(Hostile)
    builder.add_node(HOSTILE_NODE, reply)
    builder.add_edge(START, HOSTILE_NODE)
    builder.add_edge(HOSTILE_NODE, END)
    return builder


def make_hostile(saver: TelarSaver, thread_id: str = HOSTILE_ID) -> None:
    """One run, with HOSTILE_METADATA in its config: a Human message of SCRIPT, the node
    HOSTILE_NODE answering IMG and setting `huge` (HUGE) and `deep` (`deep_dict()`)."""
    graph = hostile_graph().compile(checkpointer=saver)
    config: RunnableConfig = {"configurable": {"thread_id": thread_id}, "metadata": dict(HOSTILE_METADATA)}
    graph.invoke({"messages": [HumanMessage(SCRIPT, id="question-0")]}, config)


def make_ui_threads(saver: TelarSaver) -> dict[str, str]:
    """Runs each thread of THREAD_IDS on `saver` (which must not hold them yet); name -> thread id."""
    make_chat(saver, THREAD_IDS["chat"])
    make_subgraph(saver, THREAD_IDS["subgraph"])
    make_fanout(saver, THREAD_IDS["fanout"])
    make_forked(saver, THREAD_IDS["forked"])
    make_hostile(saver, THREAD_IDS["hostile"])
    return dict(THREAD_IDS)


# --- big: many checkpoints, put fast ---

Put = tuple[Checkpoint, CheckpointMetadata, ChannelVersions]


def big_checkpoints(checkpoints: int) -> list[Put]:
    """The puts of a counter looped by one node, `loop`: an input checkpoint at step -1, then one a
    step, each with the `count` channel's value, version and the versions `loop` saw. A real graph
    looping 10,000 steps would take about 10 s here (1,000 steps: 0.9 s on a memory store)."""
    puts: list[Put] = []
    for step in range(-1, checkpoints - 1):
        checkpoint = empty_checkpoint()
        checkpoint["id"] = str(uuid6(clock_seq=step))
        version = step + 2
        checkpoint["channel_values"] = {"count": step + 1}
        checkpoint["channel_versions"] = {"count": version}
        checkpoint["versions_seen"] = {"loop": {"count": version - 1}} if step >= 0 else {}
        checkpoint["updated_channels"] = ["count"]
        metadata: CheckpointMetadata = {"source": "input" if step < 0 else "loop", "step": step, "parents": {}}
        puts.append((checkpoint, metadata, {"count": version}))
    return puts


def put_chain(saver: TelarSaver, thread_id: str, puts: Iterable[Put]) -> None:
    """`saver.put` each checkpoint in turn, each the parent of the next."""
    config: Any = config_of(thread_id, checkpoint_ns="")
    for checkpoint, metadata, versions in puts:
        config = saver.put(config, checkpoint, metadata, versions)


def store_puts(saver: TelarSaver, thread_id: str, puts: Sequence[Put]) -> None:
    """Store on `saver` the history that `put_chain(saver, thread_id, puts)` would, in one write:
    the puts go to a scratch saver on a memory store (same serializer, no fsync per put), and its
    history is written with `saver.rewrite`, which records the thread's index terms as a put does.
    A thread `saver` already holds is refused."""
    scratch = TelarSaver("memory://", serde=saver.serde)
    try:
        put_chain(scratch, thread_id, puts)
        text = scratch.store.read(thread_id)
    finally:
        scratch.store.close()
    assert text is not None

    def change(old: str | None) -> str:
        if old is not None:
            raise ValueError(f"thread {thread_id!r} is already stored")
        return text

    saver.rewrite(thread_id, change, text=text)


def make_big_thread(saver: TelarSaver, thread_id: str, checkpoints: int = 10_000) -> None:
    """A thread of `checkpoints` root checkpoints, parent-chained (see `big_checkpoints`), stored by
    `store_puts`: about 1 s for 10,000 here, where 10,000 fsynced puts on a file store take 6 s.
    `saver` must keep them all: open it without `max_history` (the default, None, keeps every one)."""
    if saver.max_history is not None and saver.max_history < checkpoints:
        raise ValueError(f"the saver keeps only {saver.max_history} checkpoints a thread: open it without max_history")
    store_puts(saver, thread_id, big_checkpoints(checkpoints))
