"""What only some stores do: schema versions and migration (SQLite, Postgres, Redis), the file
store's open files, SQLite's locks after a fork and its fsyncs, server faults (Postgres, Redis).
The contract every store keeps is tests/test_store_contract.py (`telar_checkpoint.testing`)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from telar_checkpoint.errors import StoreError
from telar_checkpoint.stores import FileStore, Store
from telar_checkpoint.stores.sqlite import SQLiteStore
from tests.servers import NO_REDIS_SERVER
from tests.stores import (
    REDIS_URL,
    child_exit_code,
    describe,
    make_store,
    postgres_admin,
    redis_admin,
    redis_delete_prefix,
    reopen,
    unavailable,
)

SCHEMA_KINDS = ["sqlite", "postgres", "redis"]  # stores with a schema version of their own


def append(suffix: str) -> Callable[[str | None], str]:
    return lambda old: (old or "") + suffix


# --- Schema versions ---


@pytest.mark.parametrize("store", SCHEMA_KINDS, indirect=True)
def test_schema_version_recorded_and_newer_refused(store: Store) -> None:
    store.write("t", "v")
    assert store.schema_version() == current_schema(store)  # type: ignore[attr-defined]
    kind, options = describe(store)
    if kind == "sqlite":
        with contextlib.closing(sqlite3.connect(options["path"])) as conn, conn:
            conn.execute("UPDATE telar_meta SET value = '99' WHERE name = 'schema_version'")
    elif kind == "postgres":
        postgres_admin(f'UPDATE "{options["schema"]}".telar_meta SET value = \'99\'')
    else:
        redis_admin().set(options["prefix"] + "schema", 99)
    newer = reopen((kind, options))
    try:
        with pytest.raises(StoreError, match="schema version 99.*upgrade telar-checkpoint"):
            newer.update("t", append("x"))
    finally:
        newer.close()


def current_schema(store: Store) -> int:
    """The schema version the store's module writes (the one a store it opened must record)."""
    return int(sys.modules[type(store).__module__].SCHEMA_VERSION)


SCHEMA_1 = {"t": "one\ntwo\n", "nul\x00key": "é🧵\n", "empty": ""}


def write_schema_1(store: Store) -> None:
    """The layout of schema 1 (one value per thread, no versions), written by hand where `store` will look."""
    kind, options = describe(store)
    if kind == "sqlite":
        with contextlib.closing(sqlite3.connect(options["path"])) as conn, conn:
            conn.execute("CREATE TABLE telar_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)")
            conn.execute("CREATE TABLE telar_histories (key BLOB PRIMARY KEY, value TEXT NOT NULL)")
            conn.execute("INSERT INTO telar_meta VALUES ('schema_version', '1')")
            for key, value in SCHEMA_1.items():
                conn.execute("INSERT INTO telar_histories VALUES (?, CAST(? AS TEXT))", (key.encode(), value.encode()))
        conn.close()
    elif kind == "postgres":
        schema = options["schema"]
        postgres_admin(f'CREATE SCHEMA "{schema}"')
        postgres_admin(f'CREATE TABLE "{schema}".telar_meta (name text PRIMARY KEY, value text NOT NULL)')
        postgres_admin(f'CREATE TABLE "{schema}".telar_histories (key bytea PRIMARY KEY, value text)')
        postgres_admin(f"INSERT INTO \"{schema}\".telar_meta VALUES ('schema_version', '1')")
        for key, value in SCHEMA_1.items():
            postgres_admin(f'INSERT INTO "{schema}".telar_histories VALUES (%s, %s)', (key.encode(), value))
    else:
        client = redis_admin()
        client.set(options["prefix"] + "schema", 1)
        for key, value in SCHEMA_1.items():
            client.set(options["prefix"].encode() + b"h:" + key.encode(), value.encode())
        client.close()


@pytest.mark.parametrize("store", SCHEMA_KINDS, indirect=True)
def test_schema_1_is_migrated(store: Store) -> None:
    write_schema_1(store)
    old = reopen(describe(store))
    try:
        old.update("t", append("three\n"))
        assert old.schema_version() == current_schema(old)  # type: ignore[attr-defined]
        assert {key: old.read(key) for key in old.keys()} == {**SCHEMA_1, "t": "one\ntwo\nthree\n"}
        assert old.foreign() == []
        for key in SCHEMA_1:
            version = old.update_versioned(key, append("more\n"))[1]
            assert version is not None and old.append_if(key, "last\n", version) == old.version(key)
            assert old.read(key) == SCHEMA_1[key] + ("three\n" if key == "t" else "") + "more\nlast\n"
    finally:
        old.close()


# --- The file store's open files; SQLite after a fork and its fsyncs ---


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts open descriptors in /proc")
def test_a_file_store_keeps_a_bounded_number_of_files_open(tmp_path: Path) -> None:
    from telar_checkpoint.stores.file import FILES_KEPT

    store = FileStore(tmp_path / "store", fsync=False)
    before = len(os.listdir("/proc/self/fd"))
    for i in range(3 * FILES_KEPT):
        store.update(f"thread-{i}", append("a\n"))
        store.update(f"thread-{i}", append("b\n"))  # an append: the history file stays open
    assert len(os.listdir("/proc/self/fd")) - before <= FILES_KEPT + 8
    assert all(store.read(f"thread-{i}") == "a\nb\n" for i in range(3 * FILES_KEPT))
    store.close()
    assert len(os.listdir("/proc/self/fd")) - before <= 8


@pytest.mark.skipif(not hasattr(os, "fork"), reason="forks")
def test_a_sqlite_child_forked_while_its_parent_syncs_does_not_inherit_the_locks(tmp_path: Path) -> None:
    """The parent was committing and syncing (its commit lock and fsync lock held) when it
    forked: the child's store starts with locks of its own and writes."""
    store = SQLiteStore(tmp_path / "db.sqlite")
    store.update("t", append("before\n"))
    store._commit_lock.acquire()
    store._commits.sync_lock.acquire()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            version = store.update_versioned("t", append("child\n"))[1]
            store.append_if_deferred("t", "again\n", version)
            store.flush("t")
            code = 0
        finally:
            os._exit(code)
    store._commit_lock.release()
    store._commits.sync_lock.release()
    assert child_exit_code(pid, "the forked child waited on a lock its parent held at the fork") == 0
    assert store.read("t") == "before\nchild\nagain\n"
    store.close()


def test_sqlite_appends_commit_unsynced_and_share_one_fsync_of_the_wal(tmp_path: Path) -> None:
    """Commits run with synchronous=NORMAL; one flush of the WAL serves every commit before it."""
    store = SQLiteStore(tmp_path / "db.sqlite")
    syncs: list[int] = []
    sync_wal = store._sync_wal
    store._sync_wal = lambda: syncs.append(store._commits.written) or sync_wal()  # type: ignore[method-assign]
    version = store.update_versioned("t", lambda old: "a\n")[1]
    assert len(syncs) == 1  # an update: a NORMAL commit, then the WAL's fsync
    version = store.append_if_deferred("t", "b\n", version)
    version = store.append_if_deferred("t", "c\n", version)
    with store._connection() as conn:
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    assert store._commits.pending and len(syncs) == 1
    store.flush("t")
    assert len(syncs) == 2 and not store._commits.pending
    assert store.read("t") == "a\nb\nc\n"
    store.close()


# --- Server faults: a dropped connection fails one call, changes nothing, and the next call works ---


def drop_connections(store: Store) -> None:
    """End the server connections of `store` (and only of it: other test runs share the servers)."""
    kind, options = describe(store)
    if kind == "postgres":
        postgres_admin(
            "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE application_name = %s",
            (options["schema"],),
        )
    else:
        admin = redis_admin()
        for client in admin.client_list(_type="normal"):
            if client["name"] == options["prefix"].rstrip(":"):
                admin.client_kill_filter(_id=client["id"])
        admin.close()


def dropping(store: Store, suffix: str) -> Callable[[str | None], str]:
    """A change that drops the store's connections mid-update (once), then appends `suffix`."""
    dropped: list[bool] = []

    def change(old: str | None) -> str:
        if not dropped:
            drop_connections(store)
            dropped.append(True)
        return (old or "") + suffix

    return change


@pytest.fixture(params=["postgres", "redis"])
def server_store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    return make_store(request.param, tmp_path, request)


def test_connections_dropped_mid_update(server_store: Store) -> None:
    """Postgres holds its connection through the change, so the update fails and rolls back;
    Redis holds none between its commands (compare-and-set), so it either reconnects and applies
    the change exactly once, or fails before the write: never half, never twice."""
    store = server_store
    store.write("t", "before\n")
    try:
        result = store.update("t", dropping(store, "once\n"))
    except StoreError as exc:
        assert f"server at {store.server}" in str(exc)  # type: ignore[attr-defined]
        assert store.read("t") == "before\n"
    else:
        assert store.kind == "redis" and result == "before\nonce\n" == store.read("t")
    drop_connections(store)  # idle pooled connections, dropped between calls, are replaced silently
    before = store.read("t")
    assert store.update("t", append("after\n")) == f"{before}after\n" == store.read("t")


async def test_connections_dropped_mid_update_async(server_store: Store) -> None:
    store = server_store
    try:
        await store.awrite("t", "before\n")
        try:
            result = await store.aupdate("t", dropping(store, "once\n"))
        except StoreError as exc:
            assert f"server at {store.server}" in str(exc)  # type: ignore[attr-defined]
            assert await store.aread("t") == "before\n"
        else:
            assert store.kind == "redis" and result == "before\nonce\n" == await store.aread("t")
        drop_connections(store)
        await asyncio.sleep(0.1)  # let the loop see the closed sockets
        before = await store.aread("t")
        assert await store.aupdate("t", append("after\n")) == f"{before}after\n" == await store.aread("t")
    finally:
        await store.aclose()


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[Callable[[], None]]:
    """A redis-server of our own on a free port (AOF, fsync always), and a function that restarts it."""
    if shutil.which("redis-server") is None:
        unavailable(NO_REDIS_SERVER, "redis-server")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(tmp_path)]
    command += ["--appendonly", "yes", "--appendfsync", "always", "--save", ""]
    server: list[subprocess.Popen[bytes]] = []

    def start() -> None:
        server.append(subprocess.Popen(command, stdout=subprocess.DEVNULL))
        client = redis_admin().from_url(f"redis://127.0.0.1:{port}")
        for _ in range(100):
            try:
                client.ping()
                break
            except Exception:
                time.sleep(0.05)
        client.close()

    start()
    yield port, start, server
    for process in server:
        process.kill()
        process.wait()


def test_redis_scripts_flushed(private_redis: Any) -> None:
    """Scripts run by EVALSHA; a server that lost them (SCRIPT FLUSH, a restart) gets them again by EVAL."""
    from telar_checkpoint.stores.redis import RedisStore

    port, _start, _server = private_redis
    store = RedisStore(f"redis://127.0.0.1:{port}", connect_timeout=2)
    admin = redis_admin().from_url(f"redis://127.0.0.1:{port}")
    try:
        store.write("t", "a\n")
        admin.script_flush()
        version = store.version("t")
        admin.script_flush()
        assert store.append_if("t", "b\n", version) is not None

        async def both() -> None:
            admin.script_flush()
            version = await store.aversion("t")
            admin.script_flush()
            assert await store.aappend_if("t", "c\n", version) is not None
            admin.script_flush()
            assert await store.aupdate("t", append("d\n")) == "a\nb\nc\nd\n"
            await store.aclose()

        asyncio.run(both())
        assert store.read("t") == "a\nb\nc\nd\n"
    finally:
        admin.close()
        store.close()


def test_redis_server_down_then_back(private_redis: Any) -> None:
    from telar_checkpoint.stores.redis import RedisStore

    port, start, server = private_redis
    store = RedisStore(f"redis://127.0.0.1:{port}", connect_timeout=2)
    try:
        store.write("t", "before\n")
        server[-1].kill()
        server[-1].wait()
        for call in (lambda: store.read("t"), lambda: store.update("t", append("lost\n"))):
            with pytest.raises(StoreError, match=f"Redis server at 127.0.0.1:{port}"):
                call()
        start()
        assert store.read("t") == "before\n"
        assert store.update("t", append("after\n")) == "before\nafter\n"
    finally:
        store.close()


@pytest.mark.servers("redis")
@pytest.mark.parametrize("asynchronous", [False, True])
def test_redis_calls_past_max_connections_wait_for_one(asynchronous: bool, request: pytest.FixtureRequest) -> None:
    """More calls at once than the store's connections wait for a free one (redis-py's plain pool
    refused them past 100 with "Too many connections": 256 concurrent runs did that), and the
    store never opens more than `max_connections`."""
    import uuid
    from concurrent.futures import ThreadPoolExecutor

    from telar_checkpoint.stores.redis import RedisStore

    tag = f"telar_test_{uuid.uuid4().hex[:12]}"
    store = RedisStore(REDIS_URL, prefix=f"{tag}:", max_connections=3, client_name=tag)
    request.addfinalizer(lambda: redis_delete_prefix(f"{tag}:"))
    request.addfinalizer(store.close)
    store.write("t", "one\n")
    admin = redis_admin()

    def connections() -> int:
        return sum(1 for client in admin.client_list() if client.get("name") == tag)

    before = connections()  # the sync client's (async calls have a client of their own)

    if asynchronous:

        async def main() -> tuple[list[str | None], int]:
            reads = await asyncio.gather(*(store.aread("t") for _ in range(200)))
            opened = connections()
            await store.aclose()
            return list(reads), opened

        reads, opened = asyncio.run(main())
    else:
        with ThreadPoolExecutor(max_workers=50) as pool:
            reads = list(pool.map(lambda _: store.read("t"), range(200)))
        opened, before = connections(), 0
    assert reads == ["one\n"] * 200
    assert 1 <= opened - before <= 3


@pytest.mark.parametrize("kind", ["memory", "postgres", "redis"])
def test_a_new_threads_first_write_creates_it_in_one_step(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """A thread the saver read as holding nothing is created by its first put in one step
    (`append_if` at `ABSENT`), not by an update (read, then write, in a transaction or a
    compare-and-set): the first turn of 256 conversations started at once was the load
    benchmark's tail. The thread then reads as a graph wrote it."""
    from langgraph.graph import END, START, MessagesState, StateGraph

    from telar_checkpoint import TelarSaver
    from telar_checkpoint.stores.base import ABSENT

    store = make_store(kind, tmp_path, request)
    store.write("first", "x\n")  # (a Redis store creates at ABSENT once its schema was checked, by a first write)
    assert store.append_if("probe", "x\n", ABSENT) is not None, "this store creates at ABSENT"  # type: ignore[attr-defined]
    updates: list[str] = []
    update_versioned = store.update_versioned  # type: ignore[attr-defined]

    def counted(key: str, change: Any) -> Any:
        updates.append(key)
        return update_versioned(key, change)

    store.update_versioned = counted  # type: ignore[attr-defined]
    builder = StateGraph(MessagesState)
    builder.add_node("answer", lambda state: {"messages": [("ai", f"heard {len(state['messages'])}")]})
    builder.add_edge(START, "answer")
    builder.add_edge("answer", END)
    graph = builder.compile(checkpointer=TelarSaver(store))
    config = {"configurable": {"thread_id": "new"}}
    graph.invoke({"messages": [("user", "one")]}, config)
    graph.invoke({"messages": [("user", "two")]}, config)
    assert updates == []
    assert [m.content for m in graph.get_state(config).values["messages"]] == ["one", "heard 1", "two", "heard 3"]
    assert len(list(TelarSaver(store).list(config))) == 6
