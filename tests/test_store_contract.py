"""The store contract (`telar_checkpoint.testing.StoreTests`) on each of our store kinds.

Each class builds its store with `tests.stores.make_store` (a space of its own, cleaned up
after); the shared ones reopen it with `describe`/`reopen`. Store-specific tests are in
tests/test_stores.py.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from langchain_core.runnables import RunnableConfig

from telar_checkpoint import TelarSaver
from telar_checkpoint.stores import Store
from telar_checkpoint.testing import StoreTests
from tests.stores import PlainFileStore, PlainStore, describe, make_store, reopen


class OurStore(StoreTests):
    kind = "memory"

    @pytest.fixture
    def store(self, request: pytest.FixtureRequest, tmp_path: Path) -> Store:
        return make_store(self.kind, tmp_path, request)

    def opener(self, store: Store) -> Callable[[], Store]:
        return functools.partial(reopen, describe(store))


class TestMemoryStore(OurStore):
    kind = "memory"


class TestFileStore(OurStore):
    kind = "file"
    shared = True


class TestSQLiteStore(OurStore):
    kind = "sqlite"
    shared = True
    forked_child_writes = False  # its copy of SQLite holds the parent's lock for ever


@pytest.mark.servers("postgres")
class TestPostgresStore(OurStore):
    kind = "postgres"
    shared = True


@pytest.mark.servers("redis")
class TestRedisStore(OurStore):
    kind = "redis"
    shared = True


@pytest.mark.servers("redis-cluster")
class TestRedisClusterStore(OurStore):
    kind = "redis-cluster"
    shared = True


class TestPlainStore(StoreTests):
    """`PlainStore` (tests/stores.py): the four abstract methods on a dict, `Store`'s defaults for
    the rest; its expiries and leases too."""

    versions = False
    indexes = False
    delete_forgets_expiry = False

    @pytest.fixture
    def store(self) -> Store:
        return PlainStore()


class TestPlainFileStore(TestPlainStore):
    """`PlainFileStore`: the four abstract methods on a directory that processes share; `Store`'s
    default leases hold across processes."""

    shared = True
    # (a child forked mid-write holds its parent's flock through the descriptor it inherited)
    test_a_child_forked_mid_write_takes_its_own_turn = None

    @pytest.fixture
    def store(self, tmp_path: Path) -> Store:
        return PlainFileStore(tmp_path / "plain")

    def opener(self, store: Store) -> Callable[[], Store]:
        return functools.partial(PlainFileStore, store.directory)  # type: ignore[attr-defined]


def test_a_saver_on_a_plain_store_runs_a_graph_and_its_time_travel() -> None:
    """The saver needs no more than the four abstract methods: on `PlainStore` (`Store`'s defaults
    for the rest), a real graph's thread is stored, continued, listed by filter, forked from a
    past checkpoint and deleted by run."""
    from langgraph.graph import END, START, MessagesState, StateGraph

    def answer(state: MessagesState) -> dict[str, object]:
        return {"messages": [("ai", f"heard {len(state['messages'])}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("answer", answer)
    builder.add_edge(START, "answer")
    builder.add_edge("answer", END)
    saver = TelarSaver(PlainStore())
    graph = builder.compile(checkpointer=saver)
    config: RunnableConfig = {"configurable": {"thread_id": "t"}}
    graph.invoke({"messages": [("user", "one")]}, config)
    run = "7f6c1d0e-0000-4000-8000-000000000001"
    out = graph.invoke({"messages": [("user", "two")]}, {**config, "metadata": {"run_id": run}})
    assert [m.content for m in out["messages"]] == ["one", "heard 1", "two", "heard 3"]
    history = list(graph.get_state_history(config))
    assert len(history) == 6 and isinstance(saver.store, PlainStore) and "t" in saver.store.values
    assert [t.config["configurable"]["thread_id"] for t in saver.list(None, filter={"step": 1})] == ["t"]
    assert sum(1 for t in saver.list(config) if t.metadata and t.metadata.get("run_id") == run) == 3
    saver.delete_for_runs([run])
    assert not any(t.metadata and t.metadata.get("run_id") == run for t in saver.list(config))
    past = next(s for s in graph.get_state_history(config) if s.metadata and s.metadata["step"] == 1)
    forked = graph.invoke({"messages": [("user", "again")]}, past.config)
    assert [m.content for m in forked["messages"]] == ["one", "heard 1", "again", "heard 3"]


@pytest.mark.servers("postgres")
class PostgresGiven(StoreTests):
    """PostgresStore on the application's own sync connection or pool (issue 41): its async methods
    refuse (NoAsyncDriverError), another store object opens the same schema on its own URL, and
    closing the store leaves what it was given open."""

    async_calls = False
    shared = True

    def given(self):  # a psycopg Connection or a psycopg_pool ConnectionPool
        """The application's connection or pool, open (the fixture closes it after the store)."""
        raise NotImplementedError

    @pytest.fixture
    def store(self) -> Iterator[Store]:
        import uuid

        from telar_checkpoint.stores.postgres import PostgresStore
        from tests.stores import postgres_admin, require_server

        require_server("postgres")
        tag = f"telar_test_{uuid.uuid4().hex[:12]}"
        given = self.given()
        try:
            store = PostgresStore(given, schema=tag)
            yield store
            store.close()
            assert not given.closed, "closing the store closed what the application gave it"
        finally:
            given.close()
            postgres_admin(f'DROP SCHEMA IF EXISTS "{tag}" CASCADE')

    def opener(self, store: Store) -> Callable[[], Store]:
        from telar_checkpoint.stores.postgres import PostgresStore
        from tests.stores import POSTGRES_URL

        return functools.partial(PostgresStore, POSTGRES_URL, schema=store.schema)  # type: ignore[attr-defined]


class TestPostgresGivenPoolStore(PostgresGiven):
    """A pool set up as for LangGraph's PostgresSaver (autocommit, dict rows, no prepared statements)."""

    test_a_child_forked_mid_write_takes_its_own_turn = None  # a child is refused the parent's: test_postgres_given.py

    def given(self):  # a psycopg Connection or a psycopg_pool ConnectionPool
        from psycopg.rows import dict_row
        from psycopg_pool import ConnectionPool

        from tests.stores import POSTGRES_URL

        kwargs = {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}
        return ConnectionPool(POSTGRES_URL, min_size=1, max_size=4, kwargs=kwargs, timeout=30, open=True)


class TestPostgresGivenConnectionStore(PostgresGiven):
    """One connection, not in autocommit (the store switches it for each operation and back)."""

    test_a_child_forked_mid_write_takes_its_own_turn = None  # a child is refused the parent's: test_postgres_given.py

    def given(self):  # a psycopg Connection or a psycopg_pool ConnectionPool
        import psycopg

        from tests.stores import POSTGRES_URL

        return psycopg.connect(POSTGRES_URL, connect_timeout=2)


class RedisGiven(StoreTests):
    """RedisStore on a redis-py client the test makes and owns, as an application does (redis-py's
    defaults, its retries too): sync only, reopened from the URL on the same prefix; after the
    store closes, the client still answers, and the test closes it."""

    async_calls = False
    shared = True
    cluster = False

    @pytest.fixture
    def store(self, request: pytest.FixtureRequest) -> Iterator[Store]:
        import uuid

        import redis
        import redis.cluster

        from telar_checkpoint.stores.redis import RedisStore
        from telar_checkpoint.stores.redis_clients import GIVEN_FROM, REDIS_VERSION
        from telar_checkpoint.stores.url import cluster_nodes
        from tests.servers import REDIS_CLUSTER_URL
        from tests.stores import REDIS_URL, redis_delete_prefix, require_server

        if REDIS_VERSION < GIVEN_FROM:
            pytest.skip(f"a given client needs redis-py {GIVEN_FROM} or newer (tests/test_redis_given.py checks the refusal)")
        require_server("redis-cluster" if self.cluster else "redis")
        prefix = f"telar_test_{uuid.uuid4().hex[:12]}:"
        request.addfinalizer(lambda: redis_delete_prefix(prefix, cluster=self.cluster))
        if self.cluster:
            nodes, _ = cluster_nodes(REDIS_CLUSTER_URL)
            client: redis.Redis | redis.cluster.RedisCluster = redis.cluster.RedisCluster(
                startup_nodes=[redis.cluster.ClusterNode(*node) for node in nodes]
            )
        else:
            client = redis.Redis.from_url(REDIS_URL)
        store = RedisStore(client, prefix=prefix)
        yield store
        store.close()
        assert client.ping() is True, "closing the store leaves the application's client open"
        client.close()

    def opener(self, store: Store) -> Callable[[], Store]:
        from telar_checkpoint.stores.redis import RedisStore
        from tests.servers import REDIS_CLUSTER_URL, REDIS_URL

        return functools.partial(RedisStore, REDIS_CLUSTER_URL if self.cluster else REDIS_URL, prefix=store.prefix)  # type: ignore[attr-defined]


@pytest.mark.servers("redis")
class TestRedisGivenClientStore(RedisGiven):
    cluster = False


@pytest.mark.servers("redis-cluster")
class TestRedisClusterGivenClientStore(RedisGiven):
    cluster = True
