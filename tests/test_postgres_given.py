"""PostgresStore on the application's own psycopg connections and psycopg_pool pools (issue 41):
a real graph runs on each kind, its state is InMemorySaver's and committed, the store never
closes what it was given, and what it cannot use is refused in our words, writing nothing.

Each test works in a schema of its own (dropped after), on the test server of `tests.stores`.
"""

from __future__ import annotations

import asyncio
import os
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import pytest

psycopg = pytest.importorskip("psycopg")
psycopg_pool = pytest.importorskip("psycopg_pool")

from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.types import Command  # noqa: E402
from psycopg.rows import dict_row  # noqa: E402

from telar_checkpoint import TelarSaver  # noqa: E402
from telar_checkpoint.errors import (  # noqa: E402
    ArgumentTypeError,
    NoAsyncDriverError,
    NoSyncDriverError,
    StoreError,
    UnusableConnectionError,
    UsageError,
)
from telar_checkpoint.stores.postgres import PostgresStore  # noqa: E402
from telar_checkpoint.testing import child_exit_code  # noqa: E402
from telar_checkpoint.testing._workers import append, assert_all_lines  # noqa: E402
from tests.agent_graph import build, question  # noqa: E402
from tests.graphs import async_interrupts, history_summary, summary  # noqa: E402
from tests.servers import uses_servers  # noqa: E402
from tests.stores import POSTGRES_URL, postgres_admin  # noqa: E402

SYNC_KINDS = ["connection", "connection-autocommit", "pool", "pool-dict-row"]
ASYNC_KINDS = ["async-connection", "async-connection-autocommit", "async-pool-dict-row"]
SAVER_KWARGS = {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}  # LangGraph's PostgresSaver's


@pytest.fixture(autouse=True)
def strict_allowlist(monkeypatch: pytest.MonkeyPatch) -> None:
    """LangGraph passes the agent state's classes through with_allowlist (as in test_agent_state)."""
    try:
        from langgraph._internal import _serde
    except ImportError:  # an older langgraph: no strict allowlist to turn on
        return
    monkeypatch.setattr(_serde, "STRICT_MSGPACK_ENABLED", True)


@pytest.fixture
@uses_servers("postgres")
def tag() -> Iterator[str]:
    """A schema of the test's own, dropped after."""
    name = f"telar_test_{uuid.uuid4().hex[:12]}"
    yield name
    postgres_admin(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def own_store(tag: str) -> PostgresStore:
    """A store on its own URL, on the schema of the test: what another process would see."""
    return PostgresStore(POSTGRES_URL, schema=tag, connect_timeout=2)


def stored(tag: str, key: str) -> str | None:
    store = own_store(tag)
    try:
        return store.read(key)
    finally:
        store.close()


@contextmanager
def given(kind: str) -> Iterator[Any]:
    """The application's connection or pool of `kind`, opened and closed by the application."""
    if kind.startswith("connection"):
        with psycopg.connect(POSTGRES_URL, autocommit=kind.endswith("autocommit"), connect_timeout=2) as conn:
            yield conn
    else:
        kwargs = SAVER_KWARGS if kind.endswith("dict-row") else {}
        with psycopg_pool.ConnectionPool(POSTGRES_URL, min_size=1, max_size=4, kwargs=kwargs, timeout=10) as pool:
            yield pool


@asynccontextmanager
async def agiven(kind: str, max_size: int = 4) -> AsyncIterator[Any]:
    if kind.startswith("async-connection"):
        conn = await psycopg.AsyncConnection.connect(POSTGRES_URL, autocommit=kind.endswith("autocommit"), connect_timeout=2)
        async with conn:
            yield conn
    else:
        pool = psycopg_pool.AsyncConnectionPool(POSTGRES_URL, min_size=1, max_size=max_size, kwargs=SAVER_KWARGS, open=False, timeout=10)
        async with pool:
            yield pool


def still_usable(obj: Any, autocommit: bool | None = None) -> None:
    """The application's connection or pool is open, outside any transaction, as it gave it, and works."""
    if isinstance(obj, psycopg_pool.ConnectionPool):
        assert not obj.closed
        with obj.connection() as conn:
            assert conn.execute("SELECT 1").fetchone() in ((1,), {"?column?": 1})
        return
    assert not obj.closed and obj.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert obj.autocommit is autocommit
    assert obj.execute("SELECT 1").fetchone() == (1,)
    if not obj.autocommit:
        obj.rollback()


async def astill_usable(obj: Any, autocommit: bool | None = None) -> None:
    if isinstance(obj, psycopg_pool.AsyncConnectionPool):
        assert not obj.closed
        async with obj.connection() as conn:
            assert await (await conn.execute("SELECT 1")).fetchone() == {"?column?": 1}
        stats = obj.get_stats()
        assert stats["pool_available"] == stats["pool_size"], "every connection the store took was given back"
        return
    assert not obj.closed and obj.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert obj.autocommit is autocommit
    assert await (await obj.execute("SELECT 1")).fetchone() == (1,)
    if not obj.autocommit:
        await obj.rollback()


def reference_history() -> list[tuple]:
    graph = build().compile(checkpointer=InMemorySaver())
    run_turns(graph, {"configurable": {"thread_id": "agent"}})
    return history_summary(graph, {"configurable": {"thread_id": "agent"}})


def run_turns(graph: Any, config: dict) -> None:
    """Two questions, each paused for approval and resumed: several turns of the agent."""
    for text in ("weather in Paris?", "and tomorrow?"):
        graph.invoke(question(text), config)
        graph.invoke(Command(resume="yes"), config)


async def arun_turns(graph: Any, config: dict) -> None:
    for text in ("weather in Paris?", "and tomorrow?"):
        await graph.ainvoke(question(text), config)
        await graph.ainvoke(Command(resume="yes"), config)


def committed_history(tag: str) -> list[tuple]:
    """The history a saver on a store of its own URL reads: what was committed."""
    with TelarSaver(own_store(tag)) as saver:
        return history_summary(build().compile(checkpointer=saver), {"configurable": {"thread_id": "agent"}})


# A real graph on each kind


@pytest.mark.parametrize("kind", SYNC_KINDS)
def test_a_graph_runs_on_the_applications_sync_connection_or_pool(kind: str, tag: str) -> None:
    config = {"configurable": {"thread_id": "agent"}}
    with given(kind) as obj:
        with TelarSaver(PostgresStore(obj, schema=tag)) as saver:
            graph = build().compile(checkpointer=saver)
            run_turns(graph, config)
            assert history_summary(graph, config) == reference_history()
        still_usable(obj, autocommit=kind.endswith("autocommit"))  # the saver's close left it open
        assert committed_history(tag) == reference_history()
    assert obj.closed  # the application closed it


@pytest.mark.parametrize("kind", ASYNC_KINDS)
@async_interrupts
def test_a_graph_runs_on_the_applications_async_connection_or_pool(kind: str, tag: str) -> None:
    config = {"configurable": {"thread_id": "agent"}}

    async def main() -> Any:
        async with agiven(kind) as obj:
            async with TelarSaver(PostgresStore(obj, schema=tag)) as saver:
                graph = build().compile(checkpointer=saver)
                await arun_turns(graph, config)
                got = [summary(s) async for s in graph.aget_state_history(config)]
            await astill_usable(obj, autocommit=kind.endswith("autocommit"))
        assert obj.closed
        return got

    assert asyncio.run(main()) == reference_history()
    assert committed_history(tag) == reference_history()


@async_interrupts
def test_many_concurrent_requests_share_a_small_async_pool(tag: str) -> None:
    """A FastAPI-style app: its pool (max_size 4), opened at startup and closed at shutdown by the
    app, serves 32 requests at once, each a graph run of its own thread."""

    async def main() -> list[Any]:
        async with agiven("async-pool", max_size=4) as pool:
            saver = TelarSaver(PostgresStore(pool, schema=tag))
            graph = build().compile(checkpointer=saver)

            async def request(i: int) -> Any:
                config = {"configurable": {"thread_id": f"user-{i}"}}
                await graph.ainvoke(question(f"weather {i}?"), config)
                await graph.ainvoke(Command(resume="yes"), config)
                return (await graph.aget_state(config)).values["messages"][-1].content

            answers = await asyncio.gather(*(request(i) for i in range(32)))
            await saver.store.aclose()
            await astill_usable(pool)
        assert pool.closed
        return answers

    assert asyncio.run(main()) == ["It is sunny in Paris (approved:yes)."] * 32
    store = own_store(tag)
    try:
        assert sorted(store.keys()) == sorted(f"user-{i}" for i in range(32))
    finally:
        store.close()


def test_a_store_is_not_closed_with_what_it_was_given_and_a_dict_row_pool_stays_dict_row(tag: str) -> None:
    with given("pool-dict-row") as pool:
        store = PostgresStore(pool, schema=tag)
        store.write("t", "v\n")
        store.close()
        store.close()
        assert store.read("t") == "v\n"  # usable after close, as the URL form is
        with pool.connection() as conn:
            assert conn.execute("SELECT 1 AS one").fetchone() == {"one": 1}  # the app's rows as it set them
            assert conn.autocommit
    with given("connection") as conn:
        store = PostgresStore(conn, schema=tag)
        assert store.read("t") == "v\n"
        store.close()
        assert not conn.closed and not conn.autocommit and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


def test_the_store_describes_what_it_was_given(tag: str) -> None:
    with given("pool") as pool:
        store = PostgresStore(pool, schema=tag)
        assert store.conninfo == POSTGRES_URL and store.server == "127.0.0.1:5432"
    with given("connection") as conn:
        store = PostgresStore(conn, schema=tag)
        assert "dbname=test" in store.conninfo and store.server == "127.0.0.1:5432"
        store.write("t", "v\n")
        other = PostgresStore(store.conninfo, schema=store.schema)  # what tests.stores.describe gives
        try:
            assert other.read("t") == "v\n"
        finally:
            other.close()


# What a store given one side refuses on the other


def test_a_sync_connection_or_pool_refuses_async_calls_changing_nothing(tag: str) -> None:
    for kind in ("connection", "pool"):
        with given(kind) as obj:
            store = PostgresStore(obj, schema=tag)
            store.write("t", "v\n")

            async def calls() -> None:
                for call in (lambda: store.aread("t"), lambda: store.awrite("t", "x\n"), lambda: store.adelete("t")):
                    expected = "serves only its sync methods: for async calls .* give it a psycopg AsyncConnection"
                    with pytest.raises(NoAsyncDriverError, match=expected):
                        await call()
                await store.aclose()  # closing is not refused

            asyncio.run(calls())
            assert store.read("t") == "v\n"


def test_an_async_connection_or_pool_refuses_sync_calls_changing_nothing(tag: str) -> None:
    async def main(kind: str) -> None:
        async with agiven(kind) as obj:
            store = PostgresStore(obj, schema=tag)
            for call in (lambda: store.read("t"), lambda: store.write("t", "x\n"), lambda: store.delete("t"), lambda: list(store.keys())):
                expected = "serves only its async methods: for sync calls .* give it a psycopg Connection"
                with pytest.raises(NoSyncDriverError, match=expected):
                    call()
            store.close()
            assert await store.aread("t") is None
            await store.awrite("t", "v\n")
            with pytest.raises(NoSyncDriverError):
                store.read("t")

    for kind in ("async-connection", "async-pool"):
        asyncio.run(main(kind))
        assert stored(tag, "t") == "v\n"
        postgres_admin(f'DELETE FROM "{tag}".telar_chunks')
        postgres_admin(f'DELETE FROM "{tag}".telar_threads')


# Refusals, in our words, writing nothing


@pytest.mark.servers("postgres")
def test_other_types_and_connection_options_are_refused() -> None:
    for bad in (42, b"postgresql://x", None, object()):
        expected = "conninfo must be a conninfo string .* a psycopg Connection or AsyncConnection, or a psycopg_pool"
        with pytest.raises(ArgumentTypeError, match=expected):
            PostgresStore(bad)  # type: ignore[arg-type]
    with psycopg.connect(POSTGRES_URL) as conn:
        with pytest.raises(UsageError, match="takes no connection options \\(application_name\\)"):
            PostgresStore(conn, application_name="x")
        with pytest.raises(UsageError, match="takes no connection options \\(max_size, connect_timeout\\)"):
            PostgresStore(conn, max_size=4, connect_timeout=1.0)


def test_a_pipeline_is_refused(tag: str) -> None:
    with given("connection-autocommit") as conn:
        with conn.pipeline() as pipeline:
            with pytest.raises(UnusableConnectionError, match="cannot work through a psycopg Pipeline .*: give it the connection itself"):
                PostgresStore(pipeline)
        store = PostgresStore(conn, schema=tag)
        store.read("t")  # set up
        with conn.pipeline():
            with pytest.raises(UnusableConnectionError, match="is in pipeline mode .*: use the store outside it"):
                store.write("t", "v\n")
        assert store.read("t") is None
        still_usable(conn, autocommit=True)
    assert stored(tag, "t") is None


@pytest.mark.parametrize("autocommit", [False, True])
def test_a_connection_inside_the_applications_transaction_is_refused(autocommit: bool, tag: str) -> None:
    with psycopg.connect(POSTGRES_URL, autocommit=autocommit) as conn:
        store = PostgresStore(conn, schema=tag)
        store.read("t")
        with conn.transaction():
            conn.execute("SELECT 1")
            expected = "inside a transaction of the application's own \\(status INTRANS\\): commit or roll"
            with pytest.raises(UnusableConnectionError, match=expected):
                store.write("t", "v\n")
            with pytest.raises(UnusableConnectionError):
                store.update("t", append("v\n"))
        assert stored(tag, "t") is None
        store.write("t", "v\n")  # once the application's transaction ended
        assert stored(tag, "t") == "v\n"
        assert conn.autocommit is autocommit and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


def test_an_async_connection_inside_the_applications_transaction_is_refused(tag: str) -> None:
    async def main() -> None:
        async with agiven("async-connection") as conn:
            store = PostgresStore(conn, schema=tag)
            await conn.execute("SELECT 1")  # not in autocommit: a transaction begins
            with pytest.raises(UnusableConnectionError, match="inside a transaction of the application's own"):
                await store.awrite("t", "v\n")
            await conn.rollback()
            await store.awrite("t", "v\n")
            assert not conn.autocommit and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE

    asyncio.run(main())
    assert stored(tag, "t") == "v\n"


def test_a_closed_connection_is_refused(tag: str) -> None:
    conn = psycopg.connect(POSTGRES_URL)
    store = PostgresStore(conn, schema=tag)
    store.write("t", "v\n")
    conn.close()
    expected = "the psycopg Connection to 127.0.0.1:5432/test is closed .*: the store never reopens"
    with pytest.raises(UnusableConnectionError, match=expected):
        store.write("t", "w\n")
    with pytest.raises(UnusableConnectionError, match="the psycopg Connection given to PostgresStore is closed"):
        PostgresStore(conn)
    assert stored(tag, "t") == "v\n"

    async def main() -> None:
        aconn = await psycopg.AsyncConnection.connect(POSTGRES_URL)
        astore = PostgresStore(aconn, schema=tag)
        await aconn.close()
        with pytest.raises(UnusableConnectionError, match="the psycopg AsyncConnection to .* is closed"):
            await astore.aread("t")

    asyncio.run(main())


def test_a_closed_or_unopened_pool_is_refused(tag: str) -> None:
    pool = psycopg_pool.ConnectionPool(POSTGRES_URL, min_size=1, open=False)
    store = PostgresStore(pool, schema=tag)
    expected = "ConnectionPool 'pool-\\d+' .* cannot lend a connection \\(the pool .* is not open yet\\): .* open it"
    with pytest.raises(UnusableConnectionError, match=expected):
        store.read("t")
    pool.open()
    store.write("t", "v\n")
    pool.close()
    with pytest.raises(UnusableConnectionError, match="is already closed"):
        store.write("t", "w\n")
    assert stored(tag, "t") == "v\n"

    async def main() -> None:
        apool = psycopg_pool.AsyncConnectionPool(POSTGRES_URL, min_size=1, open=False)
        await apool.open()
        astore = PostgresStore(apool, schema=tag)
        assert await astore.aread("t") == "v\n"
        await apool.close()
        with pytest.raises(UnusableConnectionError, match="AsyncConnectionPool .* is already closed"):
            await astore.awrite("t", "w\n")

    asyncio.run(main())
    assert stored(tag, "t") == "v\n"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="forks")
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded")  # the pool's workers: the child uses none
@pytest.mark.parametrize("kind", ["connection", "pool"])
def test_a_forked_child_is_refused_the_parents_connection(kind: str, tag: str) -> None:
    with given(kind) as obj:
        store = PostgresStore(obj, schema=tag)
        store.write("t", "v\n")
        pid = os.fork()
        if pid == 0:  # the child: never touch the parent's socket, leave without its teardown
            code = 1
            try:
                store.write("t", "child\n")
            except UnusableConnectionError as exc:
                code = 3 if "used in its forked child" in str(exc) and "open a connection or a pool in the child" in str(exc) else 2
            finally:
                os._exit(code)
        assert child_exit_code(pid, "the forked child's write never finished") == 3
        assert store.read("t") == "v\n"  # the parent's connection still works
        store.write("t", "parent\n")
    assert stored(tag, "t") == "parent\n"


def test_one_connection_busy_past_the_timeout_fails_in_our_words(tag: str) -> None:
    inside, release = threading.Event(), threading.Event()

    def slow(old: str | None) -> str:
        inside.set()
        assert release.wait(10)
        return "slow\n"

    with given("connection-autocommit") as conn:
        store = PostgresStore(conn, schema=tag, timeout=0.3)
        store.read("t")
        writer = threading.Thread(target=store.update, args=("t", slow))
        writer.start()
        assert inside.wait(10)
        try:
            expected = "stayed busy with the store's other operations for 0.3 s .*give the store a pool, or raise its timeout"
            with pytest.raises(StoreError, match=expected):
                store.read("t")
        finally:
            release.set()
            writer.join(10)
        assert store.read("t") == "slow\n"
    with psycopg_pool.ConnectionPool(POSTGRES_URL, min_size=1, max_size=1) as pool:
        store = PostgresStore(pool, schema=tag, timeout=0.3)
        inside.clear(), release.clear()
        writer = threading.Thread(target=store.update, args=("t", slow))
        writer.start()
        assert inside.wait(10)
        try:
            with pytest.raises(StoreError, match="had no connection free for 0.3 s .*raise the pool's max_size or the store's timeout"):
                store.read("t")
        finally:
            release.set()
            writer.join(10)


# Concurrency on one connection


@pytest.mark.parametrize("kind", ["connection", "connection-autocommit", "pool"])
def test_threads_sharing_one_connection_lose_nothing(kind: str, tag: str) -> None:
    with given(kind) as obj:
        store = PostgresStore(obj, schema=tag)

        def work(worker: int) -> None:
            for i in range(40):
                store.update("shared", append(f"{worker}:{i}\n"))
                store.read("shared")
                version = store.version("shared")
                assert version is not None

        threads = [threading.Thread(target=work, args=(worker,)) for worker in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert_all_lines(store.read("shared"), workers=8, count=40)
    assert_all_lines(stored(tag, "shared"), workers=8, count=40)


@pytest.mark.parametrize("kind", ["async-connection", "async-connection-autocommit", "async-pool"])
def test_tasks_sharing_one_async_connection_lose_nothing(kind: str, tag: str) -> None:
    async def main() -> None:
        async with agiven(kind) as obj:
            store = PostgresStore(obj, schema=tag)

            async def work(worker: int) -> None:
                for i in range(20):
                    await store.aupdate("shared", append(f"{worker}:{i}\n"))
                    assert await store.aversion("shared") is not None
                    assert f"{worker}:{i}\n" in (await store.aread("shared") or "")

            await asyncio.gather(*(work(worker) for worker in range(16)))
            assert_all_lines(await store.aread("shared"), workers=16, count=20)
            await store.aclose()
            await astill_usable(obj, autocommit=None if "pool" in kind else kind.endswith("autocommit"))

    asyncio.run(main())
    assert_all_lines(stored(tag, "shared"), workers=16, count=20)
