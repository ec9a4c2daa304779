"""No silent empty store: a store opened on a database that holds a LangGraph saver's data and none
of ours refuses it before writing anything, saying how many threads are there, the command that
migrates them and the option that shares the database on purpose (issue "The first hour of a new
user", "No silent empty store"). The databases are written by LangGraph's real savers; a RedisSaver
(langgraph-checkpoint-redis, which needs RedisJSON and RediSearch) by its key names, written here.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import shlex
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.sqlite import SqliteSaver

from telar_checkpoint import TelarSaver
from telar_checkpoint.cli import main
from telar_checkpoint.errors import ForeignStoreError, UsageError
from telar_checkpoint.stores import open_store
from telar_checkpoint.stores.sqlite import SQLiteStore
from tests.graphs import multi_step
from tests.servers import uses_servers
from tests.stores import POSTGRES_URL, REDIS_URL, postgres_admin

PROG = "telar-checkpoint: error: "
SHARE_HINT = "pass share_database=True (TelarSaver(url, share_database=True), or ?share_database=true in the URL)"
START = {"log": [], "count": 0}
COUNTED = 10_000  # stores.foreign.THREADS_COUNTED: threads counted for a message, at most


def config(thread: str) -> Any:
    return {"configurable": {"thread_id": thread}}


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def snapshot(directory: Path) -> dict[str, bytes]:
    """Every file of `directory` and its bytes (so a -wal or -shm file left behind shows too)."""
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def migrate_command(message: str) -> list[str]:
    """The migrate command a refusal names, as argv (without the program name)."""
    match = re.search(r"run: (telar-checkpoint migrate .*?) \(then the URL", message)
    assert match, message
    argv = shlex.split(match.group(1))
    assert argv[0] == "telar-checkpoint"
    return argv[1:]


# --- SQLite -------------------------------------------------------------------------------------------


@pytest.fixture
def langgraph_db(tmp_path: Path) -> Path:
    """A LangGraph SqliteSaver database holding three threads, alone in its directory."""
    path = tmp_path / "lg" / "app.sqlite"
    path.parent.mkdir()
    with SqliteSaver.from_conn_string(str(path)) as saver:
        graph = multi_step().compile(checkpointer=saver)
        for thread in ("t1", "t2", "t3"):
            graph.invoke(START, config(thread))
    return path


def sqlite_message(path: Path, threads: str) -> str:
    command = f"telar-checkpoint migrate --from langgraph+sqlite:///{path} --to 'sqlite:///{path}?share_database=true'"
    return (
        f"SQLite database {path} holds LangGraph SqliteSaver checkpoints ({threads}) and no telar-checkpoint store; "
        f"nothing was written. To move them into telar-checkpoint, beside LangGraph's data (left as it is), run: "
        f"{command} (then the URL opens without the option). To keep telar-checkpoint's data in this same place on "
        f"purpose, {SHARE_HINT}"
    )


def test_a_langgraph_sqlite_database_is_refused_before_anything_is_written(langgraph_db: Path) -> None:
    before = snapshot(langgraph_db.parent)
    saver = TelarSaver(f"sqlite:///{langgraph_db}")
    uses = {
        "get_tuple": lambda: saver.get_tuple(config("t1")),
        "list": lambda: list(saver.list(None)),
        "put": lambda: saver.put(config("new"), empty_checkpoint(), {}, {}),
        "invoke": lambda: multi_step().compile(checkpointer=saver).invoke(START, config("t1")),
    }
    for name, use in uses.items():
        with pytest.raises(ForeignStoreError) as caught:
            use()
        assert str(caught.value) == sqlite_message(langgraph_db, "3 threads"), name
    saver.store.close()
    assert snapshot(langgraph_db.parent) == before  # the file byte for byte, and nothing beside it


async def test_the_async_methods_refuse_it_too(langgraph_db: Path) -> None:
    before = snapshot(langgraph_db.parent)
    async with TelarSaver.from_conn_string(f"sqlite:///{langgraph_db}") as saver:
        with pytest.raises(ForeignStoreError, match=r"\(3 threads\)"):
            await saver.aget_tuple(config("t1"))
    assert snapshot(langgraph_db.parent) == before


def test_share_database_opens_it_beside_langgraph(langgraph_db: Path) -> None:
    for url, options in [(f"sqlite:///{langgraph_db}", {"share_database": True}),
                         (f"sqlite:///{langgraph_db}?share_database=true", {})]:
        with TelarSaver.from_conn_string(url, **options) as saver:
            assert saver.get_tuple(config("t1")) is None  # LangGraph's threads are LangGraph's
    saver = TelarSaver(f"sqlite:///{langgraph_db}", share_database=True)
    result = multi_step().compile(checkpointer=saver).invoke(START, config("mine"))
    assert result == {"log": ["a", "b", "c"], "count": 3}
    saver.store.close()
    with contextlib.closing(sqlite3.connect(langgraph_db)) as conn, conn:
        names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"checkpoints", "writes", "telar_meta", "telar_chunks"} <= names
    with SqliteSaver.from_conn_string(str(langgraph_db)) as lg:  # LangGraph's data is as it was
        assert {t.config["configurable"]["thread_id"] for t in lg.list(None)} == {"t1", "t2", "t3"}
    with TelarSaver.from_conn_string(f"sqlite:///{langgraph_db}") as saver:  # once ours are there: as any store of ours
        assert saver.get_tuple(config("mine")).checkpoint["channel_values"]["count"] == 3
    with pytest.raises(UsageError, match="share_database is true or false, not 'maybe'"):
        open_store(f"sqlite:///{langgraph_db}?share_database=maybe")


def test_the_store_alone_refuses_it_and_open_store_passes_the_option(langgraph_db: Path, tmp_path: Path) -> None:
    before = snapshot(langgraph_db.parent)
    store = SQLiteStore(langgraph_db)
    with pytest.raises(ForeignStoreError, match="holds LangGraph SqliteSaver checkpoints"):
        store.read("t1")
    store.close()
    assert snapshot(langgraph_db.parent) == before
    store = open_store(f"sqlite:///{langgraph_db}", share_database=True).store
    assert store.read("t1") is None and store.share_database  # type: ignore[attr-defined]
    store.close()
    other = tmp_path / "other.sqlite"  # a database of other tables, or none: opened as before
    with contextlib.closing(sqlite3.connect(other)) as conn, conn:
        conn.execute("CREATE TABLE notes (body TEXT)")
    for url in (f"sqlite:///{other}", f"sqlite:///{tmp_path / 'new.sqlite'}"):
        with TelarSaver.from_conn_string(url) as saver:
            multi_step().compile(checkpointer=saver).invoke(START, config("t"))


def test_the_cli_gives_the_same_message_and_its_command_migrates(capsys: pytest.CaptureFixture[str], langgraph_db: Path,
                                                                  tmp_path: Path) -> None:
    before = snapshot(langgraph_db.parent)
    message = sqlite_message(langgraph_db, "3 threads")
    ours = tmp_path / "ours.db"
    with TelarSaver.from_conn_string(f"sqlite:///{ours}") as saver:
        multi_step().compile(checkpointer=saver).invoke(START, config("x"))
    export = tmp_path / "x.jsonl"
    assert run(capsys, "export", f"sqlite:///{ours}", "x", "-o", str(export))[0] == 0
    for argv in (["migrate", "--from", f"sqlite:///{ours}", "--to", f"sqlite:///{langgraph_db}"],
                 ["import", f"sqlite:///{langgraph_db}", "x", str(export)]):
        assert run(capsys, *argv) == (2, "", f"{PROG}{message}\n"), argv
    assert snapshot(langgraph_db.parent) == before
    code, out, err = run(capsys, *migrate_command(message))  # the command the message gives works
    assert (code, err) == (0, "") and out.startswith("Migrated 3 threads"), out
    with TelarSaver.from_conn_string(f"sqlite:///{langgraph_db}") as saver:
        with SqliteSaver.from_conn_string(str(langgraph_db)) as lg:
            for thread in ("t1", "t2", "t3"):
                assert saver.get_tuple(config(thread)).checkpoint["id"] == lg.get_tuple(config(thread)).checkpoint["id"]


def test_the_thread_count_is_bounded(tmp_path: Path) -> None:
    path = tmp_path / "many.sqlite"
    with SqliteSaver.from_conn_string(str(path)) as saver:
        saver.setup()
        saver.conn.executemany(
            "INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, type, checkpoint, metadata) "
            "VALUES (?, '', 'c', 'msgpack', x'', '{}')",
            [(f"t{i}",) for i in range(COUNTED + 5)],
        )
        saver.conn.commit()
    with pytest.raises(ForeignStoreError, match=r"\(at least 10,000 threads\)"):
        TelarSaver(f"sqlite:///{path}").get_tuple(config("t1"))
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("DELETE FROM checkpoints WHERE thread_id <> 't1'")
    with pytest.raises(ForeignStoreError, match=r"\(1 thread\)"):
        TelarSaver(f"sqlite:///{path}").get_tuple(config("t1"))


# --- PostgreSQL ---------------------------------------------------------------------------------------


@pytest.fixture
@uses_servers("postgres")
def langgraph_schema() -> Any:
    """A fresh schema where a LangGraph PostgresSaver stored two threads; its URL."""
    from langgraph.checkpoint.postgres import PostgresSaver

    schema = f"telar_test_{uuid.uuid4().hex[:12]}"
    postgres_admin(f'CREATE SCHEMA "{schema}"')
    url = f"{POSTGRES_URL}?options=-c%20search_path%3D{schema}"
    try:
        with PostgresSaver.from_conn_string(url) as saver:
            saver.setup()
            graph = multi_step().compile(checkpointer=saver)
            for thread in ("p1", "p2"):
                graph.invoke(START, config(thread))
        yield schema, url
    finally:
        postgres_admin(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def schema_tables(schema: str) -> list[str]:
    rows = postgres_admin("SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,))
    return sorted(row[0] for row in rows)


def test_a_langgraph_postgres_schema_is_refused_before_anything_is_created(capsys: pytest.CaptureFixture[str],
                                                                             langgraph_schema: Any) -> None:
    schema, url = langgraph_schema
    before = schema_tables(schema)
    assert not any(name.startswith("telar") for name in before)
    saver = TelarSaver(url)
    with pytest.raises(ForeignStoreError) as caught:
        saver.get_tuple(config("p1"))
    saver.store.close()
    message = str(caught.value)
    command = shlex.join(["telar-checkpoint", "migrate", "--from", f"langgraph+{url}", "--to", f"{url}&share_database=true"])
    assert message == (
        "PostgreSQL database test at 127.0.0.1:5432 holds LangGraph PostgresSaver checkpoints (2 threads) and no "
        "telar-checkpoint store; nothing was written. To move them into telar-checkpoint, beside LangGraph's data "
        f"(left as it is), run: {command} (then the URL opens without the option). To keep telar-checkpoint's data "
        f"in this same place on purpose, {SHARE_HINT}"
    ) or not POSTGRES_URL.startswith("postgresql://postgres@127.0.0.1:5432/")
    assert schema_tables(schema) == before
    code, out, err = run(capsys, "import", url, "x", "/dev/null")
    assert (code, out, err) == (2, "", f"{PROG}{message}\n")
    assert schema_tables(schema) == before
    code, out, err = run(capsys, *migrate_command(message))
    assert (code, err) == (0, "") and out.startswith("Migrated 2 threads"), out
    with TelarSaver.from_conn_string(url) as saver:
        assert saver.get_tuple(config("p2")).checkpoint["channel_values"]["count"] == 3


def test_share_database_opens_a_langgraph_postgres_schema(langgraph_schema: Any) -> None:
    schema, url = langgraph_schema
    with TelarSaver.from_conn_string(url, share_database=True) as saver:
        multi_step().compile(checkpointer=saver).invoke(START, config("mine"))
    assert {"checkpoints", "checkpoint_writes", "checkpoint_blobs", "telar_meta", "telar_threads"} <= set(schema_tables(schema))
    with TelarSaver.from_conn_string(url) as saver:
        assert saver.get_tuple(config("mine")) is not None and saver.get_tuple(config("p1")) is None


def test_a_schema_named_to_the_store_is_the_one_checked(langgraph_schema: Any) -> None:
    """`schema=` puts our tables elsewhere than the search path: that schema is what is checked."""
    from telar_checkpoint.stores.postgres import PostgresStore

    schema, _url = langgraph_schema
    store = PostgresStore(POSTGRES_URL, schema=schema)
    with pytest.raises(ForeignStoreError, match=f"schema {schema} holds LangGraph PostgresSaver checkpoints"):
        store.read("p1")
    store.close()
    other = f"telar_test_{uuid.uuid4().hex[:12]}"
    try:
        store = PostgresStore(POSTGRES_URL, schema=other)
        assert store.read("p1") is None
        store.close()
    finally:
        postgres_admin(f'DROP SCHEMA IF EXISTS "{other}" CASCADE')


# --- Redis ------------------------------------------------------------------------------------------------

REDIS_DB = 9  # a database of its own: the LangGraph keys here would make every new prefix of db 0 refuse


@pytest.fixture
@uses_servers("redis")
def langgraph_redis() -> Any:
    """Keys as langgraph-checkpoint-redis's RedisSaver writes them (langgraph/checkpoint/redis/base.py,
    key_registry.py: prefix:thread:ns:checkpoint...; ns "" as "__empty__"), for two threads, in a
    database of their own; its URL and client. (Its values are RedisJSON documents; strings here.)"""
    import redis

    url = REDIS_URL.rsplit("/", 1)[0] + f"/{REDIS_DB}"
    client = redis.Redis.from_url(url, socket_connect_timeout=2)
    assert client.dbsize() == 0, f"Redis database {REDIS_DB} is not empty"
    for thread in ("r1", "r2"):
        cid = str(uuid.uuid4())
        client.set(f"checkpoint:{thread}:__empty__:{cid}", '{"thread_id": "%s"}' % thread)
        client.set(f"checkpoint_latest:{thread}:__empty__", f"checkpoint:{thread}:__empty__:{cid}")
        client.set(f"checkpoint_write:{thread}:__empty__:{cid}:task:0", '{"channel": "log"}')
        client.zadd(f"write_keys_zset:{thread}:__empty__:{cid}", {f"checkpoint_write:{thread}:__empty__:{cid}:task:0": 0})
    try:
        yield url, client
    finally:
        client.flushdb()
        client.close()


def redis_keys(client: Any) -> set[bytes]:
    return set(client.scan_iter(count=1000))


def test_a_langgraph_redis_database_is_refused_before_anything_is_written(langgraph_redis: Any) -> None:
    url, client = langgraph_redis
    before = redis_keys(client)
    saver = TelarSaver(url)
    for use in (lambda: saver.put(config("new"), empty_checkpoint(), {}, {}),
                lambda: list(saver.list(None)),
                lambda: saver.get_tuple(config("r1")),  # a read, which writes nothing, refuses too
                lambda: asyncio.run(saver.aget_tuple(config("r1"))),
                lambda: multi_step().compile(checkpointer=saver).invoke(START, config("r1"))):
        with pytest.raises(ForeignStoreError) as caught:
            use()
        assert str(caught.value) == (
            f"Redis server at 127.0.0.1:6379 (database {REDIS_DB}) holds LangGraph RedisSaver checkpoints (2 threads) "
            "and no telar-checkpoint store; nothing was written. To move them, call "
            f"telar_checkpoint.migrate(source, TelarSaver('{url}', share_database=True)) from Python with the RedisSaver "
            "as the source (the migrate command has no source URL for it). To keep telar-checkpoint's data in this same "
            f"place on purpose, {SHARE_HINT}"
        ) or not REDIS_URL.startswith("redis://127.0.0.1:6379/")
    saver.store.close()
    assert redis_keys(client) == before


def test_share_database_opens_a_langgraph_redis_database(langgraph_redis: Any) -> None:
    url, client = langgraph_redis
    for saver in (TelarSaver(url, share_database=True), TelarSaver(url + "?share_database=true")):
        multi_step().compile(checkpointer=saver).invoke(START, config("mine"))
        assert saver.get_tuple(config("mine")).checkpoint["channel_values"]["count"] == 3
        saver.store.close()
    assert client.exists("telar:schema") and client.exists("checkpoint_latest:r1:__empty__")
    with TelarSaver.from_conn_string(url) as saver:  # once ours are there: as any store of ours
        assert saver.get_tuple(config("mine")) is not None
