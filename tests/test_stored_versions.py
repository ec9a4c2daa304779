"""The format versions real graphs store: version 1 for every line, version 2 only for the lines of
a run paused inside a subgraph (while it is paused) and of a persistent subgraph (docs/FORMAT.md).

`Version1Reader` is a reader that predates subgraphs, written here from docs/FORMAT.md alone (no
code of the library's): every thread without a paused or persistent subgraph reads whole with it,
to the checkpoints, values and pending writes the saver gives; a thread with one is refused.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import orjson
import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import START, StateGraph
from langgraph.prebuilt import create_react_agent
from typing_extensions import TypedDict

from telar_checkpoint import CheckpointCodec, FileStore, TelarSaver
from tests.graphs import fan_out, multi_step, nested_subgraphs, resume
from tests.test_send_storage import ScriptedChatModel, add

# --- a reader of version 1, from docs/FORMAT.md alone --------------------------------------------

FIELDS = {  # "Every field is known": the fields of each kind of version 1 line
    "checkpoint": {"format", "kind", "step", "source", "id", "parent", "metadata", "checkpoint", "extra", "values", "appended"},
    "writes": {"format", "kind", "checkpoint", "task", "path", "writes"},
    "dropped": {"format", "kind", "floor", "replaced", "deleted"},
}
SAME = {"$same": None}


class Refused(Exception):
    """The reader refuses the thread (a line it does not read)."""


class Version1Reader:
    """The checkpoints of a thread of version 1 lines: id -> {"parent", "metadata", "values" (channel ->
    encoded value), "writes" ((task, idx) -> (channel, encoded value))}."""

    def __init__(self, text: str) -> None:
        self.checkpoints: dict[str, dict[str, Any]] = {}
        self.resolved: dict[str, dict[str, Any]] = {}  # id -> its values as its line held them when read
        self.early: dict[str, dict[tuple[str, int], tuple[str, Any]]] = {}  # writes stored before their checkpoint
        self.floor: str | None = None
        self.gone: set[str] = set()  # replaced or deleted
        lines = text.split("\n")  # "\n" only
        lines.pop()  # a torn last line (no newline) is dropped
        for number, raw in enumerate(lines, 1):
            if raw.strip():
                self.read(number, orjson.loads(raw))

    def read(self, number: int, doc: dict[str, Any]) -> None:
        if doc.get("format") != 1:
            raise Refused(f"line {number}: format version {doc.get('format')!r}")
        if set(doc) - FIELDS[doc["kind"]]:
            raise Refused(f"line {number}: fields {sorted(set(doc) - FIELDS[doc['kind']])}")
        getattr(self, doc["kind"])(doc)

    def checkpoint(self, doc: dict[str, Any]) -> None:
        parent = self.resolved.get(doc["parent"], {}) if doc["parent"] else {}
        values = {ch: parent[ch] if v == SAME else v for ch, v in doc["values"].items()}
        for channel, items in doc.get("appended", {}).items():
            values[channel] = [*parent[channel], *items]
        self.resolved[doc["id"]] = values
        old = self.checkpoints.get(doc["id"])
        writes = old["writes"] if old else self.early.pop(doc["id"], {})
        self.checkpoints[doc["id"]] = {"parent": doc["parent"], "metadata": doc["metadata"], "values": values, "writes": writes}

    def writes(self, doc: dict[str, Any]) -> None:
        held = self.checkpoints.get(doc["checkpoint"])
        target = held["writes"] if held else self.early.setdefault(doc["checkpoint"], {})
        for idx, channel, value in doc["writes"]:
            if idx < 0 or (doc["task"], idx) not in target:  # a regular write stored is kept; a special one overwrites
                target[(doc["task"], idx)] = (channel, value)

    def dropped(self, doc: dict[str, Any]) -> None:
        self.floor = doc["floor"]
        self.gone = set(doc["replaced"]) | set(doc.get("deleted", []))
        for cid in list(self.checkpoints):
            if self.floor is not None and cid < self.floor:
                del self.checkpoints[cid]

    def kept(self) -> dict[str, dict[str, Any]]:
        return {cid: c for cid, c in self.checkpoints.items() if cid not in self.gone}


def assert_read_whole_by_version_1(saver: TelarSaver, store: FileStore, thread: str = "t") -> Version1Reader:
    """The version 1 reader reads the thread to what the saver gives: each checkpoint's parent,
    metadata, state and pending writes."""
    reader = Version1Reader(store.read(thread) or "")
    values = CheckpointCodec().values  # the values as the default JsonSerializer encodes them
    given = list(saver.list({"configurable": {"thread_id": thread}}))
    assert given and sorted(reader.kept()) == sorted(t.checkpoint["id"] for t in given)
    for t in given:
        mine = reader.kept()[t.checkpoint["id"]]
        assert mine["parent"] == (t.parent_config["configurable"]["checkpoint_id"] if t.parent_config else None)
        assert mine["metadata"] == orjson.loads(orjson.dumps(t.metadata))
        state = {ch: values.decode(v) for ch, v in mine["values"].items()}
        assert {ch: v for ch, v in state.items() if ch in t.checkpoint["channel_values"]} == t.checkpoint["channel_values"]
        assert sorted(((task, ch, values.decode(v)) for (task, _), (ch, v) in mine["writes"].items()), key=repr) == sorted(
            (tuple(w) for w in t.pending_writes), key=repr
        )
    return reader


def stored_versions(store: FileStore, thread: str = "t") -> set[int]:
    return {orjson.loads(line)["format"] for line in (store.read(thread) or "").splitlines()}


def subgraph_namespaces(store: FileStore, thread: str = "t") -> set[str]:
    return {d["ns"] for d in map(orjson.loads, (store.read(thread) or "").splitlines()) if "ns" in d}


def config(thread: str = "t", **configurable: Any) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread, **configurable}}


@pytest.fixture
def store(tmp_path: Path) -> FileStore:
    return FileStore(tmp_path / "threads")


# --- version 1 only ------------------------------------------------------------------------------


def chat_replies(turns: int) -> Iterator[AIMessage]:
    """The model's replies: a tool call and its answer on the first turn, then one answer a turn."""
    yield AIMessage("", tool_calls=[{"name": "add", "args": {"a": 2, "b": 3}, "id": "call-1", "type": "tool_call"}])
    for turn in range(turns):
        yield AIMessage(f"answer {turn}")


# The subject is create_react_agent, deprecated for langchain.agents.create_agent, which users still call.
@pytest.mark.filterwarnings("ignore:create_react_agent has been moved:DeprecationWarning")
def test_a_ten_turn_chat_agent_stores_version_1_lines_only(store: FileStore) -> None:
    saver = TelarSaver(store)
    agent = create_react_agent(ScriptedChatModel(messages=chat_replies(10)), [add], checkpointer=saver)
    for turn in range(10):
        out = agent.invoke({"messages": [HumanMessage(f"question {turn}")]}, config())
    assert out["messages"][-1].content == "answer 9" and len(out["messages"]) == 22
    text = store.read("t") or ""
    assert '"appended"' in text, "a growing chat is stored as appended lists"
    assert stored_versions(store) == {1}
    assert_read_whole_by_version_1(saver, store)


def test_a_send_fan_out_stores_version_1_lines_only(store: FileStore) -> None:
    saver, marker, calls = TelarSaver(store), {"fail": True}, []
    graph = fan_out(marker, calls).compile(checkpointer=saver)
    with pytest.raises(RuntimeError, match="task 3 fails"):
        graph.invoke({"items": [1, 2, 3, 4], "results": []}, config())
    assert stored_versions(store) == {1}
    assert_read_whole_by_version_1(saver, store)  # the pending writes of the tasks that finished
    marker["fail"] = False
    assert sorted(graph.invoke(None, config())["results"]) == [10, 20, 30, 40]
    assert stored_versions(store) == {1}
    assert_read_whole_by_version_1(saver, store)


def test_a_thread_trimmed_by_max_history_stores_version_1_lines_only(store: FileStore) -> None:
    saver = TelarSaver(store, max_history=2)
    graph = multi_step().compile(checkpointer=saver)
    for _ in range(4):
        graph.invoke({"log": ["x"]}, config())
    assert '"floor"' in (store.read("t") or "")
    assert stored_versions(store) == {1}
    reader = assert_read_whole_by_version_1(saver, store)
    assert len(reader.kept()) == 2


def test_a_fork_through_update_state_stores_version_1_lines_only(store: FileStore) -> None:
    saver = TelarSaver(store)
    graph = multi_step().compile(checkpointer=saver)
    graph.invoke({"log": [], "count": 0}, config())
    old = [s for s in graph.get_state_history(config()) if s.next == ("b",)][0]
    forked = graph.update_state(old.config, {"log": ["edited"]})
    assert stored_versions(store) == {1}
    assert_read_whole_by_version_1(saver, store)
    done = graph.invoke(None, forked)
    assert done["log"] == ["a", "edited", "b", "c"]
    assert '"replaced"' in (store.read("t") or ""), "the abandoned branch is dropped once the run moves on"
    assert stored_versions(store) == {1}
    assert_read_whole_by_version_1(saver, store)


def test_delete_for_runs_stores_version_1_lines_only(store: FileStore) -> None:
    saver = TelarSaver(store)
    graph = multi_step().compile(checkpointer=saver)
    for run in ("run-1", "run-2", "run-3"):
        graph.invoke({"log": [run]}, {**config(), "metadata": {"run_id": run}})
    saver.delete_for_runs(["run-2"])
    dropped = [d for d in map(orjson.loads, (store.read("t") or "").splitlines()) if d["kind"] == "dropped"]
    assert dropped and dropped[0]["deleted"] and dropped[0]["format"] == 1
    assert stored_versions(store) == {1}
    reader = assert_read_whole_by_version_1(saver, store)
    assert all(c["metadata"].get("run_id") != "run-2" for c in reader.kept().values())


# --- version 2: a run paused inside a subgraph, a persistent subgraph ----------------------------


@pytest.mark.parametrize("depth", [1, 2])
def test_version_2_lines_are_kept_only_while_a_run_is_paused_inside_a_subgraph(store: FileStore, depth: int) -> None:
    saver = TelarSaver(store)
    graph = nested_subgraphs(depth).compile(checkpointer=saver)
    graph.invoke({"request": "deploy", "log": []}, config())
    assert stored_versions(store) == {1, 2}
    paused = graph.get_state(config(), subgraphs=True).tasks[0]
    assert subgraph_namespaces(store) and all(ns.startswith(paused.name + ":") for ns in subgraph_namespaces(store))
    with pytest.raises(Refused, match="format version 2"):
        Version1Reader(store.read("t") or "")
    done = graph.invoke(resume("yes"), config())
    assert done["log"][-1] == "parent end"
    assert stored_versions(store) == {1}, "the next write after the subgraph finished leaves no version 2 line"
    assert_read_whole_by_version_1(saver, store)


class Hits(TypedDict):
    hits: Annotated[list[int], operator.add]


def persistent_parent() -> StateGraph:
    inner = StateGraph(Hits)
    inner.add_node("count", lambda s: {"hits": [len(s["hits"])]})
    inner.add_edge(START, "count")
    parent = StateGraph(Hits)
    parent.add_node("child", inner.compile(checkpointer=True))
    parent.add_edge(START, "child")
    return parent


def test_a_persistent_subgraph_keeps_its_state_in_version_2_lines(store: FileStore) -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    def twice(checkpointer: Any) -> tuple[list[int], list[int]]:
        graph = persistent_parent().compile(checkpointer=checkpointer)
        return graph.invoke({"hits": []}, config())["hits"], graph.invoke({"hits": []}, config())["hits"]

    saver = TelarSaver(store)
    first, second = twice(saver)
    assert (first, second) == twice(InMemorySaver())
    assert second != first + first, "the subgraph read its state of the first run"
    assert stored_versions(store) == {1, 2}
    assert subgraph_namespaces(store) == {"child"}, "only the persistent subgraph's lines are version 2"
    root_lines = [d for d in map(orjson.loads, (store.read("t") or "").splitlines()) if "ns" not in d]
    assert {d["format"] for d in root_lines} == {1}
    with pytest.raises(Refused, match="format version 2"):
        Version1Reader(store.read("t") or "")


def test_the_version_1_reader_refuses_what_it_does_not_know() -> None:
    line = {"format": 1, "kind": "writes", "checkpoint": "1", "task": "t", "path": "", "writes": []}
    Version1Reader(orjson.dumps(line).decode() + "\n")
    with pytest.raises(Refused, match="fields"):
        Version1Reader(orjson.dumps({**line, "later": 1}).decode() + "\n")
    with pytest.raises(Refused, match="format version 3"):
        Version1Reader(orjson.dumps({**line, "format": 3}).decode() + "\n")
