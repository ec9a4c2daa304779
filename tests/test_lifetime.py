"""A deleted thread stays deleted: real graphs on every store, deleted while they run.

A run that still writes to a thread deleted under it (by its own saver, another saver, or
another process) is refused with `ThreadDeletedError` and stores nothing; a new run on the same
thread id starts the thread again (langchain-ai/langgraph#7206 is the bug this closes: on the
official savers the run's next put stores a thread whose first parent no longer exists).
"""

from __future__ import annotations

import asyncio
import operator
import time
from collections.abc import Callable
from typing import Annotated, Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Send
from typing_extensions import TypedDict

from telar_checkpoint import TelarSaver, ThreadDeletedError
from telar_checkpoint.history import History
from telar_checkpoint.lifetime import deletion
from telar_checkpoint.stores import Store
from tests.stores import describe, processes, reopen


class Log(TypedDict):
    log: Annotated[list[str], operator.add]


def in_a_row(**nodes: Any) -> StateGraph:
    """START -> each node in turn -> END."""
    builder = StateGraph(Log)
    previous = START
    for name, node in nodes.items():
        builder.add_node(name, node)
        builder.add_edge(previous, name)
        previous = name
    builder.add_edge(previous, END)
    return builder


def deleting_in_the_middle(delete: Callable[[], None]) -> StateGraph:
    """first -> second -> third; `first` deletes the thread while the run goes on."""

    def first(state: Log) -> dict[str, Any]:
        delete()
        return {"log": ["first"]}

    return in_a_row(first=first, second=lambda s: {"log": ["second"]}, third=lambda s: {"log": ["third"]})


class Fan(TypedDict):
    items: list[int]
    results: Annotated[list[int], operator.add]


def fan_out_deleting(delete: Callable[[], None]) -> StateGraph:
    """One `Send` per item; the task for item 0 deletes the thread among the others."""

    def work(state: Fan) -> dict[str, Any]:
        item = state["items"][0]
        if item == 0:
            delete()
        return {"results": [item * 10]}

    builder = StateGraph(Fan)
    builder.add_node("work", work)
    builder.add_conditional_edges(START, lambda s: [Send("work", {"items": [i], "results": []}) for i in s["items"]], ["work"])
    builder.add_edge("work", END)
    return builder


def subgraph_deleting(delete: Callable[[], None]) -> StateGraph:
    """A parent graph whose subgraph's first node deletes the thread."""
    child = deleting_in_the_middle(delete).compile()
    return in_a_row(before=lambda s: {"log": ["before"]}, child=child, after=lambda s: {"log": ["after"]})


def once_stored(saver: TelarSaver, thread_id: str, delete: Callable[[], None]) -> Callable[[], None]:
    """`delete`, called the first time only, once the thread is stored: with
    durability="async" a node may run before its run's first puts are (a deletion deletes
    what is stored)."""
    done: list[bool] = []

    def when_stored() -> None:
        if done:
            return
        done.append(True)
        deadline = time.monotonic() + 10
        while saver.get_tuple({"configurable": {"thread_id": thread_id}}) is None:
            assert time.monotonic() < deadline, "the run's first checkpoints were never stored"
            time.sleep(0.001)
        delete()

    return when_stored


def assert_deleted(saver: TelarSaver, thread_id: str) -> None:
    """No reader sees the thread, and what is stored is only the record of its deletion."""
    config = {"configurable": {"thread_id": thread_id}}
    assert saver.get_tuple(config) is None
    assert list(saver.list(config)) == []
    assert thread_id not in {t.config["configurable"]["thread_id"] for t in saver.list(None)}
    text = saver.store.read(thread_id)
    assert text is not None and History.parse(thread_id, text).only_deleted, text


def assert_started_again(saver: TelarSaver, graph: Any, config: dict[str, Any], first_input: dict[str, Any]) -> list[Any]:
    """A new run on the thread id stores a thread of its own: every checkpoint's parent is in it."""
    out = graph.invoke(first_input, config)
    stored = list(saver.list(config))
    ids = {t.config["configurable"]["checkpoint_id"] for t in stored}
    parents = [t.parent_config["configurable"]["checkpoint_id"] for t in stored if t.parent_config]
    assert len(parents) == len(stored) - 1 and set(parents) <= ids, "a checkpoint names a parent the thread does not hold"
    return out


GRAPHS = {
    "two nodes after the delete": (deleting_in_the_middle, {"log": []}),
    "a Send fan-out": (fan_out_deleting, {"items": [0, 1, 2, 3], "results": []}),
    "a subgraph": (subgraph_deleting, {"log": []}),
}


def on_in_memory_saver(make: Callable[[Callable[[], None]], StateGraph], first_input: dict[str, Any]) -> Any:
    """What the graph gives when nothing deletes it, on LangGraph's InMemorySaver."""
    graph = make(lambda: None).compile(checkpointer=InMemorySaver())
    return graph.invoke(first_input, {"configurable": {"thread_id": "t"}})


@pytest.mark.parametrize("durability", ["sync", "async"])
@pytest.mark.parametrize("graph_name", list(GRAPHS))
def test_a_run_of_a_thread_deleted_under_it_stores_nothing(store: Store, graph_name: str, durability: str) -> None:
    saver = TelarSaver(store)
    make, first_input = GRAPHS[graph_name]
    config: dict[str, Any] = {"configurable": {"thread_id": "doomed"}}
    graph = make(once_stored(saver, "doomed", lambda: saver.delete_thread("doomed"))).compile(checkpointer=saver)
    with pytest.raises(ThreadDeletedError, match="thread 'doomed' was deleted at") as caught:
        graph.invoke(first_input, config, durability=durability)
    assert caught.value.thread_id == "doomed"
    assert_deleted(saver, "doomed")
    out = assert_started_again(saver, graph, config, first_input)  # the delete was once: this run finishes
    assert out == on_in_memory_saver(make, first_input) == graph.get_state(config).values


async def test_an_async_run_of_a_thread_deleted_under_it_stores_nothing(astore: Store) -> None:
    saver = TelarSaver(astore)
    config: dict[str, Any] = {"configurable": {"thread_id": "doomed"}}
    deleted: list[bool] = []

    async def first(state: Log) -> dict[str, Any]:
        if not deleted:  # once the run's first checkpoints are stored, delete through the async API
            deleted.append(True)
            deadline = time.monotonic() + 10
            while await saver.aget_tuple(config) is None:
                assert time.monotonic() < deadline, "the run's first checkpoints were never stored"
                await asyncio.sleep(0.001)
            await saver.adelete_thread("doomed")
        return {"log": ["first"]}

    graph = in_a_row(first=first, second=lambda s: {"log": ["second"]}).compile(checkpointer=saver)
    with pytest.raises(ThreadDeletedError):
        await graph.ainvoke({"log": []}, config)
    assert await saver.aget_tuple(config) is None
    assert [t async for t in saver.alist(config)] == []
    assert await graph.ainvoke({"log": []}, config) == {"log": ["first", "second"]}
    assert len([t async for t in saver.alist(config)]) == 4  # input, start, first, second


def test_a_deletion_by_another_saver_is_seen(shared_store: Store) -> None:
    """The record is in the store: a saver that did not delete refuses its run's writes too."""
    writer = TelarSaver(shared_store)
    other_store = reopen(describe(shared_store))
    try:
        other = TelarSaver(other_store)
        config: dict[str, Any] = {"configurable": {"thread_id": "shared"}}
        graph = deleting_in_the_middle(once_stored(writer, "shared", lambda: other.delete_thread("shared"))).compile(checkpointer=writer)
        with pytest.raises(ThreadDeletedError):
            graph.invoke({"log": []}, config)
        assert_deleted(writer, "shared")
        assert_deleted(other, "shared")
        assert_started_again(writer, graph, config, {"log": []})
        assert other.get_tuple(config) is not None
    finally:
        other_store.close()


def delete_in_a_process(description: tuple[str, dict[str, Any]], thread_id: str) -> None:
    """Run in another process: open the store anew and delete the thread."""
    store = reopen(description)
    try:
        TelarSaver(store).delete_thread(thread_id)
    finally:
        store.close()


def test_a_deletion_in_another_process_is_seen(shared_store: Store) -> None:
    saver = TelarSaver(shared_store)
    context = processes()

    def delete() -> None:
        process = context.Process(target=delete_in_a_process, args=(describe(shared_store), "shared"))
        process.start()
        process.join(timeout=120)
        assert process.exitcode == 0

    config: dict[str, Any] = {"configurable": {"thread_id": "shared"}}
    graph = fan_out_deleting(once_stored(saver, "shared", delete)).compile(checkpointer=saver)
    with pytest.raises(ThreadDeletedError):
        graph.invoke({"items": [0, 1, 2], "results": []}, config)
    assert_deleted(saver, "shared")
    assert assert_started_again(saver, graph, config, {"items": [0, 1, 2], "results": []})["results"] == [0, 10, 20]


def test_a_paused_thread_deleted_and_resumed_starts_again(store: Store) -> None:
    """A thread paused at an interrupt, then deleted: resuming it finds no thread (get_state is
    empty), and the next run starts it again."""
    from langgraph.types import Command

    from tests.graphs import with_interrupt

    saver = TelarSaver(store)
    graph = with_interrupt().compile(checkpointer=saver)
    config: dict[str, Any] = {"configurable": {"thread_id": "paused"}}
    graph.invoke({"request": "deploy v2", "log": []}, config)
    assert graph.get_state(config).next == ("ask",)
    saver.delete_thread("paused")
    assert_deleted(saver, "paused")
    assert graph.get_state(config).values == {}
    graph.invoke({"request": "deploy v3", "log": []}, config)
    graph.invoke(Command(resume="yes"), config)
    assert graph.get_state(config).values["request"] == "deploy v3"


def test_deleting_what_is_not_stored_writes_nothing(store: Store) -> None:
    saver = TelarSaver(store)
    saver.delete_thread("never")
    assert store.read("never") is None


def test_a_deleted_thread_copied_copies_nothing_and_a_copy_keeps_no_record(store: Store) -> None:
    saver = TelarSaver(store)
    graph = deleting_in_the_middle(lambda: None).compile(checkpointer=saver)
    for thread_id in ("gone", "target", "again"):
        graph.invoke({"log": []}, {"configurable": {"thread_id": thread_id}})
    saver.delete_thread("gone")
    saver.copy_thread("gone", "target")  # a deleted source is no thread: the target is left alone
    assert len(list(saver.list({"configurable": {"thread_id": "target"}}))) == 5
    saver.delete_thread("again")
    graph.invoke({"log": []}, {"configurable": {"thread_id": "again"}})
    saver.copy_thread("again", "copy")
    copied = History.parse("copy", store.read("copy"))
    assert copied.deletion_record is None and len(copied.entries) == 5


def test_the_mark_is_the_greatest_id_of_its_instant() -> None:
    """Checkpoint ids LangGraph made before the deletion compare below its mark, those made
    after above it."""
    import time

    from langgraph.checkpoint.base.id import uuid6

    before = str(uuid6(clock_seq=0x3FFF))
    now = time.time()
    mark = deletion(now).before
    time.sleep(0.002)
    after = str(uuid6(clock_seq=0))
    assert before <= mark < after
    assert deletion(now).at.endswith("+00:00")


def test_the_tools_know_the_record(tmp_path: Any, capsys: Any) -> None:
    """`verify` finds nothing wrong in a record, `threads` counts it apart and lists no such
    thread, and a record edited by hand into nonsense is refused, naming the line."""
    import json

    from telar_checkpoint import FileStore, StoredDataError
    from telar_checkpoint.cli import main
    from telar_checkpoint.verify import verify_store

    store = FileStore(tmp_path / "store")
    saver = TelarSaver(store)
    graph = deleting_in_the_middle(lambda: None).compile(checkpointer=saver)
    for thread_id in ("kept", "gone"):
        graph.invoke({"log": []}, {"configurable": {"thread_id": thread_id}})
    saver.delete_thread("gone")
    assert verify_store(store).problems == []
    assert main(["threads", str(tmp_path / "store"), "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert [t["thread_id"] for t in listing["threads"]] == ["kept"] and listing["deleted"] == ["gone"]
    assert main(["threads", str(tmp_path / "store")]) == 0
    out = capsys.readouterr().out
    assert "1 deleted thread recorded" in out and "gone" not in out
    record = store.read("gone")
    assert record is not None
    store.write("gone", record.replace('"deleted_at":"', '"deleted_at":"yesterday '))
    with pytest.raises(StoredDataError, match=r"line 1.*deleted_at.*ISO 8601"):
        saver.get_tuple({"configurable": {"thread_id": "gone"}})
    store.write("gone", record.replace(',"deleted_at":"' + record.split('"deleted_at":"')[1].split('"')[0] + '"', ""))
    with pytest.raises(StoredDataError, match="go together"):
        saver.get_tuple({"configurable": {"thread_id": "gone"}})
    saver.delete_thread("gone")  # a thread that cannot be read is deleted all the same
    assert History.parse("gone", store.read("gone")).only_deleted


def test_a_ttl_in_the_ecosystems_keys_reads_as_given() -> None:
    from telar_checkpoint.lifetime import TTL, ttl_settings

    server = {"strategy": "delete", "sweep_interval_minutes": 60, "default_ttl": 43200}  # langgraph.json's example
    assert ttl_settings(server) == TTL(43200.0, False, "delete", 60.0)
    assert ttl_settings({**server, "sweep_limit": 1000}) == TTL(43200.0, False, "delete", 60.0, 1000)
    assert ttl_settings({"default_ttl": 0.5, "refresh_on_read": True}) == TTL(0.5, True, "delete", None)  # the Redis saver's
    assert ttl_settings({"strategy": "keep_latest"}) == TTL(None, False, "keep_latest", None)
    assert ttl_settings({}) == TTL()


def test_every_key_of_langgraph_jsons_ttl_is_taken() -> None:
    """Each key of the installed langgraph-cli's `ThreadTTLConfig` (langgraph.json's
    `checkpointer.ttl`), with a value of its type, makes a saver, as the server hook makes it."""
    schemas = pytest.importorskip("langgraph_cli.schemas", reason="langgraph-cli is installed on Python 3.11+ only")
    from telar_checkpoint import MemoryStore, TelarSaver

    examples = {"strategy": "keep_latest", "default_ttl": 60.5, "sweep_interval_minutes": 5, "sweep_limit": 1000}
    keys = list(schemas.ThreadTTLConfig.__annotations__)
    assert set(keys) <= set(examples), f"langgraph-cli has keys this test does not know: {set(keys) - set(examples)}"
    with TelarSaver(MemoryStore(), ttl={k: examples[k] for k in keys}) as saver:
        assert saver.ttl is not None and [getattr(saver.ttl, k) for k in keys] == [examples[k] for k in keys]


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"default_ttl": 60, "ttl": 5}, "'ttl'"),
        ({"defaultTtl": 60}, "'defaultTtl'"),
        ({"default_ttl": 0}, "'default_ttl'"),
        ({"default_ttl": -1}, "'default_ttl'"),
        ({"default_ttl": "60"}, "'default_ttl'"),
        ({"default_ttl": True}, "'default_ttl'"),
        ({"default_ttl": float("inf")}, "'default_ttl'"),
        ({"default_ttl": float("nan")}, "'default_ttl'"),
        ({"sweep_interval_minutes": 0}, "'sweep_interval_minutes'"),
        ({"refresh_on_read": "yes"}, "'refresh_on_read'"),
        ({"strategy": "expire"}, "'strategy'"),
        ({"strategy": None}, "'strategy'"),
        ({"sweep_limit": 0}, "'sweep_limit'"),
        ({"sweep_limit": 2.5}, "'sweep_limit'"),
        ({"sweep_limit": True}, "'sweep_limit'"),
        ([("default_ttl", 60)], "dict"),
    ],
)
def test_a_ttl_with_an_unknown_key_or_a_bad_value_is_refused_naming_it(settings: Any, named: str) -> None:
    from telar_checkpoint import UsageError
    from telar_checkpoint.lifetime import ttl_settings

    with pytest.raises(UsageError, match=named):
        ttl_settings(settings)


def agent_deleting(checkpointer: Any, delete: Callable[[], None]) -> Any:
    """langchain's agent (`create_agent`) on the scripted chat model, with a tool that deletes the thread."""
    from langchain.agents import create_agent
    from langchain_core.tools import tool

    from tests.programs import ScriptedChatModel

    @tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        delete()
        return f"It is sunny in {city}."

    return create_agent(ScriptedChatModel(), [get_weather], checkpointer=checkpointer)


def functional_deleting(checkpointer: Any, delete: Callable[[], None]) -> Any:
    """A Functional API workflow: two tasks in turn, the first deleting the thread."""
    from langgraph.func import entrypoint, task

    @task
    def fetch(topic: str) -> str:
        delete()
        return f"notes on {topic}"

    @task
    def summarize(notes: str) -> str:
        return notes.upper()

    @entrypoint(checkpointer=checkpointer)
    def workflow(topic: str) -> str:
        return summarize(fetch(topic).result()).result()

    return workflow


@pytest.mark.parametrize(
    ("program", "first_input"),
    [
        (agent_deleting, {"messages": [("user", "what is the weather in Paris")]}),
        (functional_deleting, "otters"),
    ],
    ids=["langchain agent", "Functional API"],
)
def test_a_users_program_deleted_mid_run_stores_nothing_and_starts_again(store: Store, program: Any, first_input: Any) -> None:
    """As users write them: the run is refused once deleted, and a new run gives what it gives on
    InMemorySaver (messages compared without their random ids)."""
    from tests.graphs import normalize

    saver = TelarSaver(store)
    config: dict[str, Any] = {"configurable": {"thread_id": "users"}}
    app = program(saver, once_stored(saver, "users", lambda: saver.delete_thread("users")))
    with pytest.raises(ThreadDeletedError):
        app.invoke(first_input, config, durability="sync")
    assert_deleted(saver, "users")
    reference = program(InMemorySaver(), lambda: None).invoke(first_input, {"configurable": {"thread_id": "t"}})
    assert normalize(app.invoke(first_input, config)) == normalize(reference)
    stored = list(saver.list(config))
    held = {t.config["configurable"]["checkpoint_id"] for t in stored}
    assert stored and all(t.parent_config is None or t.parent_config["configurable"]["checkpoint_id"] in held for t in stored)


def _thread_made_at(made: float, *, own_ttl: float | None = None, deleted: bool = False) -> History:
    """A thread of two checkpoints whose newest was made at `made` (its uuid6 id tells it), with its
    own time-to-live, or deleted at `made`: written by the codec, read as a history. No store."""
    from langgraph.checkpoint.base import empty_checkpoint

    from telar_checkpoint.codec import CheckpointCodec, CheckpointRecord
    from telar_checkpoint.lifetime import own_ttl as own

    codec, text, parent = CheckpointCodec(), None, None
    for step, offset in ((0, -10.0), (1, 0.0)):
        checkpoint = empty_checkpoint()
        checkpoint["id"] = deletion(made + offset).before  # the greatest uuid6 id of that instant
        checkpoint["channel_values"], checkpoint["channel_versions"] = {"n": step}, {"n": step + 1}
        text = codec.append(text, CheckpointRecord(checkpoint, {"source": "loop", "step": step, "parents": {}}, "", parent))
        parent = checkpoint["id"]
    if own_ttl is not None:
        text = codec.with_ttl("t", text, own(own_ttl))
    if deleted:
        text = codec.delete_thread(text, deletion(made))
    return History.parse("t", text)


def test_the_lifetimes_decisions_are_pure_functions_of_the_settings_a_history_and_the_time() -> None:
    """What expiring a thread does, what readers see of it and what a sweep does, decided without a
    store: by the default time-to-live, the thread's own, the strategy and the age of its data."""
    from telar_checkpoint.lifetime import TTL, expired_view, expiry_operation, quiet_until, sweep_step, ttl_seconds
    from telar_checkpoint.rules import DeleteThread, KeepLatest

    day, now = 86_400.0, 1_800_000_000.0
    ttl = TTL(default_ttl=60.0)  # minutes
    fresh, idle = _thread_made_at(now - 30), _thread_made_at(now - 2 * 3600)
    assert ttl_seconds(ttl, idle) == 3600 and ttl_seconds(TTL(), idle) is None
    assert expiry_operation(ttl, fresh, now) is None
    assert isinstance(expiry_operation(ttl, idle, now), DeleteThread)
    assert isinstance(expiry_operation(TTL(60.0, strategy="keep_latest"), idle, now), KeepLatest)
    assert expiry_operation(ttl, _thread_made_at(now - 2 * 3600, own_ttl=24 * 60), now) is None, "its own ttl is longer"
    assert ttl_seconds(ttl, _thread_made_at(now, own_ttl=None)) == 3600
    assert not expired_view(ttl, idle).entries
    assert len(expired_view(TTL(60.0, strategy="keep_latest"), idle).entries) == 1

    assert sweep_step(ttl, None, now).kind == "gone"
    assert sweep_step(ttl, fresh, now).kind == "fresh" and sweep_step(ttl, fresh, now).expiry is not None
    deleted = sweep_step(ttl, idle, now)
    assert deleted.kind == "deleted" and deleted.expiry == now + 3600, "the record is kept a time-to-live"
    assert sweep_step(TTL(60.0, strategy="keep_latest"), idle, now).kind == "trimmed"
    record = _thread_made_at(now - 3 * day, deleted=True)
    assert sweep_step(ttl, record, now).kind == "record", "kept its time: removed"
    assert sweep_step(TTL(), record, now).kind == "record kept", "without a default: kept 30 days"
    assert quiet_until(now + 3600, 3600) == now and quiet_until(None, 3600) < 0
