"""The first hour of a new user: a mistake of the public API is answered in our words, with what to do
(issue "The first hour of a new user", the first items)."""

from __future__ import annotations

import asyncio

import pytest

from telar_checkpoint import ArgumentTypeError, MemoryStore, TelarError, TelarSaver, UsageError
from telar_checkpoint.errors import SaverContextError


@pytest.mark.parametrize(
    "args, kwargs, message",
    [
        ((5,), {}, "store must be a Store, a directory path or a store URL .* not int"),
        ((b"dir",), {}, "store must be a Store, a directory path or a store URL .* not bytes"),
        ((MemoryStore(),), {"serde": "json"}, "serde must be a LangGraph serializer .* not str"),
        ((MemoryStore(),), {"keep_finished_subgraphs": "yes"}, "keep_finished_subgraphs must be True or False, not str"),
    ],
)
def test_a_wrong_type_is_our_error_and_a_type_error(tmp_path, monkeypatch, args, kwargs, message) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ArgumentTypeError, match=message) as raised:
        TelarSaver(*args, **kwargs)
    assert isinstance(raised.value, TypeError) and isinstance(raised.value, TelarError)
    assert list(tmp_path.iterdir()) == [], "nothing is created for a refused saver"


def test_a_wrong_max_history_is_our_error() -> None:
    with pytest.raises(UsageError, match="max_history must be a positive integer or None"):
        TelarSaver(MemoryStore(), max_history=0)


def test_from_conn_string_without_with_says_how_to_use_it() -> None:
    context = TelarSaver.from_conn_string("memory://")
    with pytest.raises(SaverContextError, match=r"use `with TelarSaver.from_conn_string\(url\) as saver:`"):
        context.get_tuple({"configurable": {"thread_id": "t"}})
    assert not hasattr(context, "put") and isinstance(SaverContextError("x"), TelarError)
    with context as saver:
        assert saver.get_tuple({"configurable": {"thread_id": "t"}}) is None

    async def used_async() -> None:
        async with TelarSaver.from_conn_string("memory://") as saver:
            assert await saver.aget_tuple({"configurable": {"thread_id": "t"}}) is None

    asyncio.run(used_async())


def _counter_graph():
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph

    class Count(TypedDict):
        n: int

    builder = StateGraph(Count)
    builder.add_node("add", lambda state: {"n": state["n"] + 1})
    builder.add_edge(START, "add")
    builder.add_edge("add", END)
    return builder


_USE_WITH = r"use `with TelarSaver.from_conn_string\(url\) as saver:`"


def test_from_conn_string_compiled_without_with_says_how_to_use_it_at_the_first_run() -> None:
    """LangGraph's `compile` checks `isinstance(checkpointer, BaseCheckpointSaver)` (else its own
    TypeError): the context passes it, and the graph's first use of it raises our error."""
    graph = _counter_graph().compile(checkpointer=TelarSaver.from_conn_string("memory://"))
    config = {"configurable": {"thread_id": "t"}}
    for use in (
        lambda: graph.invoke({"n": 1}, config),
        lambda: list(graph.stream({"n": 1}, config)),
        lambda: graph.get_state(config),
        lambda: list(graph.get_state_history(config)),
        lambda: graph.update_state(config, {"n": 5}),
    ):
        with pytest.raises(SaverContextError, match=_USE_WITH):
            use()


async def test_from_conn_string_compiled_without_with_says_how_to_use_it_at_the_first_async_run() -> None:
    graph = _counter_graph().compile(checkpointer=TelarSaver.from_conn_string("memory://"))
    config = {"configurable": {"thread_id": "t"}}
    with pytest.raises(SaverContextError, match=_USE_WITH):
        await graph.ainvoke({"n": 1}, config)
    with pytest.raises(SaverContextError, match=_USE_WITH):
        await graph.aget_state(config)
    async with TelarSaver.from_conn_string("memory://") as saver:  # with `async with`, the same graph code runs
        assert await _counter_graph().compile(checkpointer=saver).ainvoke({"n": 1}, config) == {"n": 2}


def test_every_attribute_langgraph_reads_of_a_saver_is_refused_by_the_context() -> None:
    from langgraph.checkpoint.base import BaseCheckpointSaver

    context = TelarSaver.from_conn_string("memory://")
    assert isinstance(context, BaseCheckpointSaver), "LangGraph's compile() accepts only a BaseCheckpointSaver"
    names = [name for name in dir(BaseCheckpointSaver) if not name.startswith("_")]
    assert {"get_tuple", "aput", "put_writes", "list", "serde", "config_specs", "get_next_version"} <= set(names)
    for name in [*names, "setup", "asetup", "store"]:
        with pytest.raises(SaverContextError, match=_USE_WITH):
            getattr(context, name)
    with context as saver:  # `with` works as before
        assert saver.get_tuple({"configurable": {"thread_id": "t"}}) is None


def test_a_dry_run_migration_names_the_store_it_would_write(tmp_path, capsys) -> None:
    from telar_checkpoint import FileStore
    from telar_checkpoint.cli import main

    with TelarSaver(FileStore(tmp_path / "from")) as saver:
        saver.put({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, _checkpoint(), {"source": "input", "step": -1}, {})
    for target, kind in ((tmp_path / "new-dir", "file"), (f"sqlite:///{tmp_path / 'new.db'}", "sqlite")):
        assert main(["migrate", "--from", str(tmp_path / "from"), "--to", str(target), "--dry-run"]) == 0
        out = capsys.readouterr().out
        assert f"to TelarSaver ({kind} store)" in out and "memory store" not in out
    assert not (tmp_path / "new-dir").exists() and not (tmp_path / "new.db").exists()


def test_a_repair_backup_is_readable_by_its_owner_only(tmp_path) -> None:
    import stat

    from telar_checkpoint import FileStore, repair

    store = FileStore(tmp_path)
    with TelarSaver(store) as saver:
        saver.put({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, _checkpoint(), {"source": "input", "step": -1}, {})
    store.write("t", (store.read("t") or "") + "not json\n")
    done = repair(store, "t")
    assert done.backup is not None
    assert stat.S_IMODE((tmp_path / "t.jsonl").stat().st_mode) == 0o600
    assert stat.S_IMODE(__import__("os").stat(done.backup).st_mode) == 0o600


def _checkpoint() -> dict:
    from langgraph.checkpoint.base import empty_checkpoint

    return empty_checkpoint()  # type: ignore[return-value]


# --- a closed saver, a store without an async driver -------------------------------------


@pytest.mark.parametrize("kind", ["memory", "file", "sqlite", "postgres", "redis"])
def test_a_closed_saver_says_it_was_closed(kind, tmp_path, request) -> None:
    from telar_checkpoint.errors import SaverClosedError
    from tests.stores import make_store

    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    with TelarSaver(make_store(kind, tmp_path, request)) as saver:
        written = saver.put(config, _checkpoint(), {"source": "input", "step": -1}, {})
    calls = {
        "get_tuple": lambda: saver.get_tuple(config),
        "put": lambda: saver.put(config, _checkpoint(), {"source": "input", "step": -1}, {}),
        "put_writes": lambda: saver.put_writes(written, [("c", 1)], "task"),
        "list": lambda: list(saver.list(None)),
        "delete_thread": lambda: saver.delete_thread("t"),
        "copy_thread": lambda: saver.copy_thread("t", "u"),
        "aget_tuple": lambda: asyncio.run(saver.aget_tuple(config)),
        "aput": lambda: asyncio.run(saver.aput(config, _checkpoint(), {"source": "input", "step": -1}, {})),
        "alist": lambda: asyncio.run(_drain(saver.alist(config))),
        "adelete_thread": lambda: asyncio.run(saver.adelete_thread("t")),
    }
    for name, use in calls.items():
        with pytest.raises(SaverClosedError, match=r"was closed .* make a new saver") as raised:
            use()
        assert isinstance(raised.value, UsageError), name


def test_a_saver_from_conn_string_is_closed_with_its_block(tmp_path) -> None:
    from telar_checkpoint.errors import SaverClosedError

    with TelarSaver.from_conn_string(f"sqlite:///{tmp_path / 'x.db'}") as saver:
        pass
    with pytest.raises(SaverClosedError, match="sqlite store"):
        saver.get_tuple({"configurable": {"thread_id": "t"}})


async def _drain(items) -> list:
    return [item async for item in items]


@pytest.mark.servers("redis")
def test_an_async_call_on_a_sync_only_redis_client_says_what_to_pass(request) -> None:
    import redis

    from telar_checkpoint.errors import NoAsyncDriverError
    from telar_checkpoint.stores.redis import RedisStore

    store = RedisStore("redis://127.0.0.1:6379/0", prefix="telar_first_hour:", connection_class=redis.Connection)
    request.addfinalizer(store.close)
    assert store.read("t") is None  # the sync methods work
    with pytest.raises(NoAsyncDriverError, match="connection_class=redis.connection.Connection, a sync connection"):
        asyncio.run(TelarSaver(store).aget_tuple({"configurable": {"thread_id": "t"}}))


@pytest.mark.servers("postgres")
def test_an_async_call_with_a_sync_postgres_cursor_says_what_to_pass(request) -> None:
    import psycopg

    from telar_checkpoint.errors import NoAsyncDriverError
    from telar_checkpoint.stores.postgres import PostgresStore
    from tests.stores import POSTGRES_URL

    store = PostgresStore(POSTGRES_URL, schema="telar_first_hour", cursor_factory=psycopg.Cursor)
    request.addfinalizer(store.close)
    with pytest.raises(NoAsyncDriverError, match="cursor_factory=psycopg.Cursor, a sync cursor"):
        asyncio.run(store.aread("t"))


def test_a_config_without_a_thread_id_says_what_to_pass() -> None:
    saver = TelarSaver(MemoryStore())
    with pytest.raises(UsageError, match=r'pass a config such as \{"configurable": \{"thread_id"'):
        saver.get_tuple({"configurable": {}})
    with pytest.raises(ArgumentTypeError, match=r'config\["configurable"\] must be a dict'):
        saver.get_tuple({"configurable": 5})  # type: ignore[typeddict-item]


# --- an unknown thread id: the closest ones ---------------------------------------------


def _store_with(tmp_path, *thread_ids: str):
    from telar_checkpoint import FileStore

    store = FileStore(tmp_path / "store")
    saver = TelarSaver(store)
    for thread_id in thread_ids:
        saver.put({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}, _checkpoint(), {"source": "input", "step": -1}, {})
    return store


def test_an_unknown_thread_suggests_the_closest(tmp_path) -> None:
    from telar_checkpoint.inspection import ThreadNotFoundError, read_thread

    store = _store_with(tmp_path, "legacy-chat", "support-42", "zebra")
    with pytest.raises(ThreadNotFoundError, match=r"no thread 'legcy-chat' in this store; did you mean 'legacy-chat'\?") as raised:
        read_thread(store, "legcy-chat")
    assert raised.value.suggestions == ["legacy-chat"]
    with pytest.raises(ThreadNotFoundError) as raised:
        read_thread(store, "qqqqqqqq")
    assert raised.value.suggestions == [] and "did you mean" not in str(raised.value)


def test_the_suggestions_look_at_a_bounded_number_of_ids(monkeypatch) -> None:
    from telar_checkpoint import inspection

    store = MemoryStore()
    for i in range(50):
        store.write(f"a{i:03}", "x\n")
    store.write("legacy-chat", "x\n")
    monkeypatch.setattr(inspection, "SUGGEST_FROM", 10)
    asked = []
    real = store.sorted_keys
    monkeypatch.setattr(store, "sorted_keys", lambda after=None, limit=None: asked.append(limit) or real(after, limit))
    assert inspection.closest_threads(store, "legcy-chat") == ["legacy-chat"]  # found from its first letters on
    assert asked == [10, 10]


@pytest.mark.parametrize("command", [
    ["history", "{url}", "legcy-chat"], ["show", "{url}", "legcy-chat"], ["diff", "{url}", "legcy-chat", "a", "b"],
    ["verify", "{url}", "legcy-chat"], ["trim", "{url}", "legcy-chat", "--keep", "1", "--yes"],
    ["delete", "{url}", "legcy-chat", "--yes"], ["repair", "{url}", "legcy-chat", "--yes"], ["export", "{url}", "legcy-chat"],
])
def test_every_command_taking_a_thread_suggests_the_closest(tmp_path, capsys, command) -> None:
    from telar_checkpoint.cli import EXIT_NOT_FOUND, main

    _store_with(tmp_path, "legacy-chat", "other")
    url = str(tmp_path / "store")
    assert main([part.format(url=url) for part in command]) == EXIT_NOT_FOUND
    assert "did you mean 'legacy-chat'?" in capsys.readouterr().err


def test_export_thread_suggests_the_closest(tmp_path) -> None:
    from telar_checkpoint.migration import export_thread

    store = _store_with(tmp_path, "legacy-chat")
    with pytest.raises(UsageError, match="did you mean 'legacy-chat'"):
        export_thread(TelarSaver(store), "legcy-chat")


# --- every file written gets the thread files' permissions ------------------------------


def _mode(path) -> int:
    import os
    import stat

    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.mark.parametrize("mode", [0o600, 0o640])
def test_every_file_of_a_file_store_has_the_threads_mode(tmp_path, monkeypatch, mode) -> None:
    import os

    from telar_checkpoint import FileStore
    from telar_checkpoint.stores import file_temps

    seen = {}
    real_replace = os.replace

    def replace(source, target, *, src_dir_fd=None, dst_dir_fd=None):
        seen[source] = os.stat(source, dir_fd=src_dir_fd).st_mode & 0o777
        return real_replace(source, target, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)

    monkeypatch.setattr(file_temps.os, "replace", replace)
    store = FileStore(tmp_path / "store", mode=mode)
    saver = TelarSaver(store)
    saver.put({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, _checkpoint(), {"source": "input", "step": -1, "run_id": "r"}, {})
    saver.prune(["t"])  # a rewrite, through a temporary file in .tmp
    saver.delete_for_runs(["another-run"])  # looks the run up in the index (the thread stays)
    assert seen and set(seen.values()) == {mode}, "the temporary file in .tmp"
    index = tmp_path / "store" / ".index"
    files = [tmp_path / "store" / "t.jsonl", *index.iterdir()]
    assert {p.name for p in index.iterdir()} >= {"index.sqlite3", "index.sqlite3-wal", "index.sqlite3-shm"}
    assert {p.name: _mode(p) for p in files} == {p.name: mode for p in files}


@pytest.mark.parametrize("mode", [0o600, 0o640])
def test_an_export_and_a_repair_backup_have_the_threads_mode(tmp_path, mode) -> None:
    from telar_checkpoint import FileStore, repair
    from telar_checkpoint.cli import main

    store = FileStore(tmp_path / "store", mode=mode)
    with TelarSaver(store) as saver:
        saver.put({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, _checkpoint(), {"source": "input", "step": -1}, {})
    assert main(["export", str(tmp_path / "store"), "t", "-o", str(tmp_path / "t.jsonl")]) == 0
    assert _mode(tmp_path / "t.jsonl") == mode  # not the umask's 0644
    store.write("t", (store.read("t") or "") + "not json\n")
    done = repair(store, "t", backup=tmp_path / "t.bak")
    assert done.backup is not None and _mode(done.backup) == mode
