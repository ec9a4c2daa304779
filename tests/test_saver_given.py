"""`TelarSaver(conn)`: the saver on the application's own psycopg connection or pool, or redis-py
client, as LangGraph's own savers take them (issue 41). The app opens it, the saver never closes it,
and the app closes it after. The stores' own tests are tests/test_postgres_given.py and
tests/test_redis_given.py; here, the saver's part: which store it makes, and what it refuses.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from langgraph.types import Command

from telar_checkpoint import TelarSaver
from telar_checkpoint.errors import ArgumentTypeError, NoAsyncDriverError, NoSyncDriverError, UnusableConnectionError
from telar_checkpoint.stores.redis_clients import GIVEN_FROM, REDIS_VERSION
from tests.agent_graph import build, question
from tests.graphs import async_interrupts
from tests.servers import uses_servers
from tests.stores import POSTGRES_URL, REDIS_URL, postgres_admin

REDIS_DB = 11  # TelarSaver(client) keeps the store's default prefix: these tests use a database of their own


@pytest.fixture
@uses_servers("postgres")
def schema() -> Iterator[str]:
    name = f"telar_test_{uuid.uuid4().hex[:12]}"
    postgres_admin(f'CREATE SCHEMA "{name}"')
    yield name
    postgres_admin(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


@pytest.fixture
@uses_servers("redis")
def redis_url() -> Iterator[str]:
    url = REDIS_URL.rsplit("/", 1)[0] + f"/{REDIS_DB}" if REDIS_URL.count("/") > 2 else f"{REDIS_URL}/{REDIS_DB}"
    yield url
    import redis

    client = redis.Redis.from_url(url)
    try:
        for key in client.scan_iter(match="telar:*", count=1000):
            client.delete(key)
    finally:
        client.close()


def _kwargs(schema: str) -> dict[str, Any]:
    from psycopg.rows import dict_row

    return {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row, "options": f"-c search_path={schema}"}


@async_interrupts
def test_a_fastapi_style_app_passes_its_async_pool_and_closes_it_itself(schema: str) -> None:
    """The app's AsyncConnectionPool (opened at startup, max_size 4) serves 32 concurrent runs
    through `async with TelarSaver(pool)`; after the block the pool still works, and the app
    closes it. The threads are stored in the app's schema, committed."""
    from psycopg_pool import AsyncConnectionPool

    async def app() -> list[str]:
        pool = AsyncConnectionPool(POSTGRES_URL, min_size=1, max_size=4, kwargs=_kwargs(schema), open=False)
        await pool.open()
        try:
            async with TelarSaver(pool) as saver:
                assert saver.store.kind == "postgres"
                graph = build().compile(checkpointer=saver)

                async def request(i: int) -> str:
                    config = {"configurable": {"thread_id": f"user-{i}"}}
                    await graph.ainvoke(question(f"weather {i}?"), config)
                    await graph.ainvoke(Command(resume="yes"), config)
                    return (await graph.aget_state(config)).values["messages"][-1].content

                answers = await asyncio.gather(*(request(i) for i in range(32)))
            async with pool.connection() as conn:  # the saver's block is over: the pool is the app's, open
                assert (await (await conn.execute("SELECT 1 AS one")).fetchone())["one"] == 1
        finally:
            await pool.close()
        assert pool.closed
        return answers

    assert asyncio.run(app()) == ["It is sunny in Paris (approved:yes)."] * 32
    from telar_checkpoint.stores.postgres import PostgresStore

    with TelarSaver(PostgresStore(POSTGRES_URL, schema=schema)) as own:
        assert sorted(own.store.keys()) == sorted(f"user-{i}" for i in range(32))


def test_a_wsgi_style_app_passes_its_pool_and_a_connection(schema: str) -> None:
    """A sync ConnectionPool, and a single Connection not in autocommit, each under `with
    TelarSaver(...)`: the run is stored and committed, and what the app gave stays open."""
    import psycopg
    from psycopg_pool import ConnectionPool

    with ConnectionPool(POSTGRES_URL, min_size=1, max_size=2, kwargs=_kwargs(schema), open=True) as pool:
        with TelarSaver(pool) as saver:
            graph = build().compile(checkpointer=saver)
            graph.invoke(question("weather?"), {"configurable": {"thread_id": "pool"}})
            with pytest.raises(NoAsyncDriverError, match="ConnectionPool"):
                asyncio.run(saver.aget_tuple({"configurable": {"thread_id": "pool"}}))
        with pool.connection() as conn:
            assert conn.execute("SELECT count(*) AS n FROM telar_threads").fetchone()["n"] == 1
    with psycopg.connect(POSTGRES_URL, options=f"-c search_path={schema}") as conn:
        with TelarSaver(conn) as saver:
            graph = build().compile(checkpointer=saver)
            graph.invoke(question("weather?"), {"configurable": {"thread_id": "conn"}})
        assert not conn.closed
        assert conn.execute("SELECT count(*) FROM telar_threads").fetchone()[0] == 2
    with psycopg.connect(POSTGRES_URL, options=f"-c search_path={schema}") as other:  # committed: another session sees it
        assert other.execute("SELECT count(*) FROM telar_threads").fetchone()[0] == 2


@async_interrupts
@pytest.mark.skipif(REDIS_VERSION < GIVEN_FROM, reason=f"a given client needs redis-py {GIVEN_FROM} or newer")
def test_the_saver_takes_the_apps_redis_clients_sync_and_async(redis_url: str) -> None:
    import redis
    import redis.asyncio

    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        with TelarSaver(client) as saver:
            assert saver.store.kind == "redis"
            graph = build().compile(checkpointer=saver)
            graph.invoke(question("weather?"), {"configurable": {"thread_id": "sync"}})
            with pytest.raises(NoAsyncDriverError):
                asyncio.run(saver.aget_tuple({"configurable": {"thread_id": "sync"}}))
        assert client.ping() and client.exists("telar:h:sync")
    finally:
        client.close()

    async def app() -> str:
        aclient = redis.asyncio.Redis.from_url(redis_url)
        try:
            async with TelarSaver(aclient) as saver:
                graph = build().compile(checkpointer=saver)
                config = {"configurable": {"thread_id": "async"}}
                await graph.ainvoke(question("weather?"), config)
                await graph.ainvoke(Command(resume="yes"), config)
                with pytest.raises(NoSyncDriverError):
                    saver.get_tuple(config)
                answer = (await graph.aget_state(config)).values["messages"][-1].content
            assert await aclient.ping()
            return answer
        finally:
            await aclient.aclose()

    assert asyncio.run(app()) == "It is sunny in Paris (approved:yes)."


def test_what_the_saver_cannot_use_is_refused_in_our_words(redis_url: str) -> None:
    import redis

    client = redis.Redis.from_url(redis_url)
    try:
        with pytest.raises(UnusableConnectionError, match="[Pp]ipeline"):
            TelarSaver(client.pipeline())
    finally:
        client.close()
    with pytest.raises(ArgumentTypeError, match="psycopg connection or pool or redis-py client, not object"):
        TelarSaver(object())  # type: ignore[arg-type]
