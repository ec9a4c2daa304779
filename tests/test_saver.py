"""TelarSaver itself: what LangGraph relies on beyond the conformance suite, on every store."""

from __future__ import annotations

import asyncio
import operator
import threading
from typing import Annotated, Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from typing_extensions import TypedDict

from telar_checkpoint import CheckpointDroppedError, MemoryStore, TelarSaver, UsageError
from tests.graphs import multi_step


def config(thread: str = "t", **extra) -> dict:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": "", **extra}}


def test_returned_checkpoints_are_copies(store) -> None:
    """LangGraph changes the dicts it gets back; the next read must not see that."""
    saver = TelarSaver(store)
    multi_step().compile(checkpointer=saver).invoke({"log": [], "count": 0}, config())
    first = saver.get_tuple(config())
    first.checkpoint["versions_seen"]["mutated"] = {}
    first.checkpoint["channel_versions"]["log"] = "X"
    first.metadata["parents"]["x"] = "y"
    again = saver.get_tuple(config())
    assert "mutated" not in again.checkpoint["versions_seen"]
    assert again.checkpoint["channel_versions"]["log"] != "X" and again.metadata["parents"] == {}


def test_put_writes_from_many_threads_before_and_after_the_put(store) -> None:
    saver = TelarSaver(store)
    checkpoint = empty_checkpoint()
    target = config(checkpoint_id=checkpoint["id"])

    def write(i: int) -> None:
        saver.put_writes(target, [("ch", i), ("other", -i)], task_id=f"task-{i}", task_path=f"p{i:02d}")

    threads = [threading.Thread(target=write, args=(i,)) for i in range(16)]
    for t in threads[:8]:
        t.start()
    saver.put(config(), checkpoint, {"source": "loop", "step": 0, "parents": {}}, {})
    for t in threads[8:]:
        t.start()
    for t in threads:
        t.join()
    writes = saver.get_tuple(config()).pending_writes
    assert sorted(w for w in writes if w[1] == "ch") == sorted((f"task-{i}", "ch", i) for i in range(16))
    assert len(writes) == 32


async def test_async_methods_share_the_sync_logic(store) -> None:
    saver = TelarSaver(store)
    cfg = await saver.aput(config(), empty_checkpoint(), {"source": "input", "step": -1, "parents": {}}, {})
    await saver.aput_writes(cfg, [("a", 1)], "task")
    assert (await saver.aget_tuple(config())) == saver.get_tuple(config())
    assert [t async for t in saver.alist(None)] == list(saver.list(None))


def test_list_every_thread_with_filter_before_and_limit(store) -> None:
    saver = TelarSaver(store)
    for thread in ("a", "b"):
        parent = config(thread)
        for step in range(3):
            parent = saver.put(parent, empty_checkpoint(), {"source": "loop", "step": step, "parents": {}}, {})
    assert len(list(saver.list(None))) == 6
    assert [t.metadata["step"] for t in saver.list(config("a"), limit=2)] == [2, 1]
    assert [t.metadata["step"] for t in saver.list(None, filter={"step": 1})] == [1, 1]
    latest = saver.get_tuple(config("b"))
    assert [t.metadata["step"] for t in saver.list(config("b"), before=latest.config)] == [1, 0]


def test_get_next_version_keeps_the_json_type() -> None:
    saver = TelarSaver(MemoryStore())
    assert saver.get_next_version(None) == 1
    assert saver.get_next_version(41) == 42
    nxt = saver.get_next_version("00000000000000000000000000000007.0.123")
    assert isinstance(nxt, str) and nxt.startswith("00000000000000000000000000000008.") and nxt > "0000000000000000000000000000000"


def test_a_foreign_serializer_is_stored_as_tagged_base64(store) -> None:
    saver = TelarSaver(store, serde=JsonPlusSerializer())
    multi_step().compile(checkpointer=saver).invoke({"log": ["x"], "count": 0}, config())
    assert '"$serde"' in store.read("t")
    assert saver.get_tuple(config()).checkpoint["channel_values"]["log"] == ["x", "a", "b", "c"]


def test_dropped_checkpoints_raise_and_unknown_ids_return_none(store) -> None:
    saver = TelarSaver(store, max_history=2)
    parent, ids = config(), []
    for step in range(4):
        cp = empty_checkpoint()
        ids.append(cp["id"])
        parent = saver.put(parent, cp, {"source": "loop", "step": step, "parents": {}}, {})
    with pytest.raises(CheckpointDroppedError, match="was trimmed"):
        saver.get_tuple(config(checkpoint_id=ids[0]))
    assert saver.get_tuple(config(checkpoint_id=empty_checkpoint()["id"])) is None
    assert saver.get_tuple(config("never")) is None


async def test_prune_takes_the_servers_delete_all(store) -> None:
    saver = TelarSaver(store)
    saver.put(config(), empty_checkpoint(), {"source": "input", "step": -1, "parents": {}}, {})
    await saver.aprune(["t"], strategy="delete_all")
    assert saver.get_tuple(config()) is None


@pytest.mark.parametrize("bad", [0, -3, "5"])
def test_bad_arguments_are_usage_errors(bad) -> None:
    with pytest.raises(UsageError, match="max_history"):
        TelarSaver(MemoryStore(), max_history=bad)
    with pytest.raises(UsageError, match="prune strategy"):
        TelarSaver(MemoryStore()).prune(["t"], strategy="all")


def test_prune_counts_as_trimming_and_delete_for_runs_reads_as_absent(store) -> None:
    from telar_checkpoint.verify import verify_thread

    saver = TelarSaver(store)
    graph = multi_step().compile(checkpointer=saver)
    graph.invoke({"log": [], "count": 0}, config())
    first = list(saver.list(config()))[-1].config
    saver.prune(["t"])
    assert [p.code for p in verify_thread("t", store.read("t")) if p.severity == "error"] == []
    with pytest.raises(CheckpointDroppedError, match="was trimmed"):
        saver.get_tuple(first)
    assert graph.get_state(config()).values["log"] == ["a", "b", "c"]

    run_id = "run-2"
    graph.invoke({"log": ["x"]}, {**config(), "metadata": {"run_id": run_id}})
    doomed = [t.config for t in saver.list(config()) if t.metadata.get("run_id") == run_id]
    assert doomed
    saver.delete_for_runs([run_id])
    assert all(saver.get_tuple(c) is None for c in doomed)
    assert [p.code for p in verify_thread("t", store.read("t")) if p.severity == "error"] == []


def test_editing_projections_changes_nothing_the_saver_returns(store) -> None:
    import orjson

    saver = TelarSaver(store)
    multi_step().compile(checkpointer=saver).invoke({"log": [], "count": 0}, config())
    before = list(saver.list(config()))
    lines = [orjson.loads(line) for line in store.read("t").splitlines()]
    for line in lines:
        if line["kind"] == "checkpoint":
            line["step"], line["source"] = 999, "fork"
    store.write("t", "".join(orjson.dumps(line).decode() + "\n" for line in lines))
    after = list(TelarSaver(store).list(config()))
    assert after == before and after[0].metadata["source"] == "loop"


def _editing_graph(checkpointer):
    """A node that edits the last message in place and returns it (add_messages replaces by id)."""
    from langchain_core.messages import AIMessage
    from langgraph.graph import END, START, MessagesState, StateGraph

    def say(state: MessagesState) -> dict:
        return {"messages": [AIMessage(content="draft", id=f"ai-{len(state['messages'])}")]}

    def edit(state: MessagesState) -> dict:
        message = state["messages"][-1]
        message.content = "final"  # in place, then handed back
        message.additional_kwargs["edited"] = True
        return {"messages": [message]}

    builder = StateGraph(MessagesState)
    builder.add_node("say", say)
    builder.add_node("edit", edit)
    builder.add_edge(START, "say")
    builder.add_edge("say", "edit")
    builder.add_edge("edit", END)
    return builder.compile(checkpointer=checkpointer)


def test_a_message_edited_in_place_and_returned_is_stored_edited(store) -> None:
    """The identity memo (encode only new list items) must not keep the old text of an object
    a task changed and handed back: what a fresh saver reads equals InMemorySaver's state."""
    from langchain_core.messages import HumanMessage
    from langgraph.checkpoint.memory import InMemorySaver

    reference = _editing_graph(InMemorySaver())
    ours = _editing_graph(TelarSaver(store))
    for turn in range(3):
        for graph in (reference, ours):
            graph.invoke({"messages": [HumanMessage(content=f"hi {turn}", id=f"h-{turn}")]}, config(), durability="sync")
    fresh = _editing_graph(TelarSaver(store))  # reads the stored lines, no memo
    expected = reference.get_state(config()).values["messages"]
    assert [m.content for m in expected].count("final") == 3
    assert fresh.get_state(config()).values["messages"] == expected
    history = [s.values["messages"] for s in fresh.get_state_history(config())]
    assert history == [s.values["messages"] for s in reference.get_state_history(config())]


class Log(TypedDict):
    log: Annotated[list[dict], operator.add]


def _log_editing_graph(checkpointer):
    """A node that edits an earlier item of an `operator.add` list in place and returns a new item."""
    from langgraph.graph import END, START, StateGraph

    def note(state: Log) -> dict:
        if state["log"]:
            state["log"][0]["text"] = "edited"  # in place, and not handed back
        return {"log": [{"text": f"entry {len(state['log'])}"}]}

    builder = StateGraph(Log)
    builder.add_node("note", note)
    builder.add_edge(START, "note")
    builder.add_edge("note", END)
    return builder.compile(checkpointer=checkpointer)


def test_an_item_edited_in_place_is_stored_as_inmemorysaver_stores_it(store) -> None:
    """Issue 14, item 4: what is stored is the value given, whatever object it is. (With async
    durability a put may run after the next node changed the object, for any saver: sync here.)"""
    from langgraph.checkpoint.memory import InMemorySaver

    reference, ours = _log_editing_graph(InMemorySaver()), _log_editing_graph(TelarSaver(store))
    for turn in range(3):
        for graph in (reference, ours):
            graph.invoke({"log": [{"text": f"user {turn}"}]}, config(), durability="sync")
    expected = reference.get_state(config()).values["log"]
    assert expected[0]["text"] == "edited"
    fresh = _log_editing_graph(TelarSaver(store))
    assert fresh.get_state(config()).values["log"] == expected
    assert [s.values for s in fresh.get_state_history(config())] == [s.values for s in reference.get_state_history(config())]


class GatedStore(MemoryStore):
    """A store whose whole-string updates wait at a gate, so a test can act while a put waits."""

    def __init__(self) -> None:
        super().__init__()
        self.entered, self.release = threading.Event(), threading.Event()

    def update_versioned(self, key, change):  # type: ignore[no-untyped-def]
        self.entered.set()
        assert self.release.wait(10), "the test never opened the gate"
        return super().update_versioned(key, change)


@pytest.mark.parametrize("call", ["put", "put_writes"])
def test_what_is_stored_is_the_value_as_given_not_as_changed_while_it_waits(call) -> None:
    """LangGraph changes state objects while a put waits its turn (async durability: the next
    node runs); InMemorySaver stores them as they were given, so must we."""
    store = GatedStore()
    saver = TelarSaver(store)
    message = {"text": "as given"}
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"], checkpoint["channel_versions"] = {"msgs": [message]}, {"msgs": 1}
    if call == "put":
        args = (config(), checkpoint, {"source": "input", "step": -1, "parents": {}}, {"msgs": 1})
    else:
        store.release.set()
        stored = saver.put(config(), checkpoint, {"source": "input", "step": -1, "parents": {}}, {"msgs": 1})
        saver = TelarSaver(store)  # no kept history: the writes take the whole-string update
        store.entered.clear()
        store.release.clear()
        args = (stored, [("msgs", message)], "task-1")
    writer = threading.Thread(target=getattr(saver, call), args=args)
    writer.start()
    assert store.entered.wait(10)
    message["text"] = "changed while it waited"
    store.release.set()
    writer.join(10)
    assert not writer.is_alive()
    got = TelarSaver(store).get_tuple(config())
    assert got.checkpoint["channel_values"]["msgs"] == [{"text": "as given"}]
    if call == "put_writes":
        assert got.pending_writes == [("task-1", "msgs", {"text": "as given"})]


async def test_async_reads_of_a_large_history_parse_and_decode_off_the_event_loop(monkeypatch) -> None:
    """Issue 19: docs/USAGE.md promises async methods never block the event loop."""
    from telar_checkpoint import saver as saver_module

    saver = TelarSaver(MemoryStore())
    for small in (True, False):
        saver.store.delete("t")
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"], checkpoint["channel_versions"] = {"doc": "x" * (10 if small else 400_000)}, {"doc": 1}
        saver.put(config(), checkpoint, {"source": "input", "step": -1, "parents": {}}, {"doc": 1})
        fresh = TelarSaver(saver.store)
        threads = []
        for name in ("_parsed", "_get"):
            original = getattr(fresh, name)
            monkeypatch.setattr(fresh, name, lambda *a, _o=original, **k: threads.append(threading.current_thread()) or _o(*a, **k))
        assert (await fresh.aget_tuple(config())).checkpoint["channel_values"]["doc"] == checkpoint["channel_values"]["doc"]
        on_loop = [t is threading.main_thread() for t in threads]
        assert on_loop == ([True, True] if small else [False, False]), (small, on_loop)
    assert saver_module.OFF_LOOP_CHARS < 400_000


def test_list_with_a_limit_costs_what_it_returns_not_the_threads_length(monkeypatch: pytest.MonkeyPatch) -> None:
    from telar_checkpoint import saver as saver_module

    saver = TelarSaver(MemoryStore())
    config_ = config()
    for i in range(300):
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"], checkpoint["channel_versions"] = {"n": i}, {"n": i + 1}
        config_ = saver.put(config_, checkpoint, {"source": "loop", "step": i, "parents": {}}, {"n": i + 1})
    examined = []
    matches = saver_module.entry_filter
    monkeypatch.setattr(saver_module, "entry_filter", lambda *a: (lambda entry, _m=matches(*a): examined.append(entry) or _m(entry)))
    newest = list(saver.list(config(), limit=2))
    assert [t.checkpoint["channel_values"]["n"] for t in newest] == [299, 298]
    assert len(examined) == 2
    examined.clear()
    assert len(list(saver.list(config()))) == 300 and len(examined) == 300



def test_put_put_writes_and_their_async_twins_take_one_route_where_a_policy_is_one_object() -> None:
    """A thread policy (`writing.ThreadPolicy`: what the schema and the lifetime are) sees every
    read, and every put and writes, sync or async, before and after it is written, by adding one
    object to the saver's policies."""
    from tests.graphs import multi_step

    seen: list[tuple[str, str, bool]] = []
    saver = TelarSaver(MemoryStore())

    class Watching:
        def read_steps(self, thread_id: str, history: Any) -> Any:
            seen.append(("read", thread_id, False))
            return history
            yield  # (a generator)

        def before_write(self, thread_id: str, now: float) -> Any:
            seen.append(("before", thread_id, saver.store.read(thread_id) is not None))
            return iter(())  # steps, none to run: so its after_write is asked

        def after_write(self, thread_id: str, now: float) -> None:
            seen.append(("after", thread_id, saver.store.read(thread_id) is not None))

    saver._policies = (*saver._policies, Watching())
    graph = multi_step().compile(checkpointer=saver)
    graph.invoke({"log": [], "count": 0}, {"configurable": {"thread_id": "sync"}})
    asyncio.run(graph.ainvoke({"log": [], "count": 0}, {"configurable": {"thread_id": "async"}}))
    for thread_id in ("sync", "async"):
        kinds = [kind for kind, t, _ in seen if t == thread_id]
        writes = kinds.count("before")
        assert writes == kinds.count("after") and writes >= 8, kinds  # 4 puts and 4 tasks' writes at least
        assert kinds[0] == "read" and [k for k in kinds if k != "read"] == ["before", "after"] * writes
        assert [stored for kind, t, stored in seen if t == thread_id and kind == "after"] == [True] * writes
