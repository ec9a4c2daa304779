"""RedisStore on a redis-py client the application made and owns (issue 41): the four kinds
(sync or async, a server or a cluster), as applications make them (``decode_responses``, one
connection, redis-py's default retries), real graphs on them, the client left open and working
after the saver closes, refusals in our words, and no write sent twice whatever the client's
retry policy says. Real Redis and Redis Cluster, no mocks; the faults come from a TCP proxy."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from telar_checkpoint import TelarSaver
from telar_checkpoint.errors import (
    ArgumentTypeError,
    NoAsyncDriverError,
    NoSyncDriverError,
    StoreError,
    UnusableConnectionError,
    UsageError,
)
from telar_checkpoint.stores import redis_scripts as scripts
from telar_checkpoint.stores.redis import RedisStore
from telar_checkpoint.stores.redis_clients import GIVEN_FROM, REDIS_VERSION
from telar_checkpoint.stores.url import cluster_nodes
from telar_checkpoint.testing import child_exit_code
from tests import agent_graph
from tests.graphs import history_summary, multi_step
from tests.servers import REDIS_CLUSTER_URL
from tests.stores import REDIS_URL, redis_admin, redis_cluster_admin, redis_delete_prefix, require_server

OLD_REDIS = REDIS_VERSION < GIVEN_FROM


@pytest.fixture(autouse=True)
def new_enough_redis(request: pytest.FixtureRequest) -> None:
    """Every test but the refusal's needs a redis-py whose clients the store can use."""
    if OLD_REDIS and request.node.originalname != "test_an_older_redis_py_client_is_refused_in_our_words":
        pytest.skip(f"a given client needs redis-py {GIVEN_FROM} or newer; this is {redis.__version__}")


@pytest.mark.skipif(not OLD_REDIS, reason=f"redis-py {redis.__version__} is new enough: nothing to refuse")
def test_an_older_redis_py_client_is_refused_in_our_words() -> None:
    with pytest.raises(UnusableConnectionError, match=r"needs redis-py 6\.2 or newer .* or give the store a URL"):
        RedisStore(redis.Redis.from_url(REDIS_URL))

SERVER, CLUSTER = pytest.mark.servers("redis"), pytest.mark.servers("redis-cluster")
KINDS = [
    pytest.param("sync", False, id="sync-server", marks=SERVER),
    pytest.param("sync", True, id="sync-cluster", marks=CLUSTER),
    pytest.param("async", False, id="async-server", marks=SERVER),
    pytest.param("async", True, id="async-cluster", marks=CLUSTER),
]


def server_kind(cluster: bool) -> str:
    return "redis-cluster" if cluster else "redis"


@pytest.fixture
def prefix_of(request: pytest.FixtureRequest) -> Callable[[bool], str]:
    """A new prefix on the server (or the cluster), its keys deleted after the test."""

    def make(cluster: bool) -> str:
        require_server(server_kind(cluster))
        prefix = f"telar_test_{uuid.uuid4().hex[:12]}:"
        request.addfinalizer(lambda: redis_delete_prefix(prefix, cluster=cluster))
        return prefix

    return make


def make_client(mode: str, cluster: bool, **options: Any) -> Any:
    """A client as an application makes one: redis-py's defaults (its retries too) and `options`."""
    if cluster:
        nodes, _ = cluster_nodes(REDIS_CLUSTER_URL)
        if mode == "sync":
            return redis.cluster.RedisCluster(startup_nodes=[redis.cluster.ClusterNode(*n) for n in nodes], **options)
        return redis.asyncio.cluster.RedisCluster(startup_nodes=[redis.asyncio.cluster.ClusterNode(*n) for n in nodes], **options)
    if mode == "sync":
        return redis.Redis.from_url(REDIS_URL, **options)
    return redis.asyncio.Redis.from_url(REDIS_URL, **options)


def url_store(cluster: bool, prefix: str) -> RedisStore:
    return RedisStore(REDIS_CLUSTER_URL if cluster else REDIS_URL, prefix=prefix)


def keys_under(prefix: str, cluster: bool) -> list[bytes]:
    admin = redis_cluster_admin() if cluster else redis_admin()
    try:
        return list(admin.scan_iter(match=prefix.encode() + b"*"))
    finally:
        admin.close()


CONFIG = {"configurable": {"thread_id": "t1"}}
TURNS = [agent_graph.question("Weather in Paris?"), Command(resume="yes"), agent_graph.question("And tomorrow?"), Command(resume="no")]


def expected_history() -> list[tuple]:
    graph = agent_graph.build().compile(checkpointer=InMemorySaver())
    for turn in TURNS:
        graph.invoke(turn, CONFIG)
    return history_summary(graph, CONFIG)


def reads_back(cluster: bool, prefix: str, expected: list[tuple]) -> None:
    """The thread reads back the same through a second store, made from the URL."""
    with TelarSaver(url_store(cluster, prefix)) as saver:
        assert history_summary(agent_graph.build().compile(checkpointer=saver), CONFIG) == expected


# --- A graph on each kind, and the client left open ---


@pytest.mark.parametrize("decode", [False, True], ids=["bytes", "decode_responses"])
@pytest.mark.parametrize("mode, cluster", KINDS)
def test_a_graph_runs_on_the_applications_client_which_stays_open(prefix_of, mode: str, cluster: bool, decode: bool) -> None:
    prefix = prefix_of(cluster)
    expected = expected_history()
    client = make_client(mode, cluster, decode_responses=decode)
    probe = prefix + "app-key"
    if mode == "sync":
        with TelarSaver(RedisStore(client, prefix=prefix)) as saver:
            graph = agent_graph.build().compile(checkpointer=saver)
            for turn in TURNS:
                graph.invoke(turn, CONFIG)
            assert history_summary(graph, CONFIG) == expected
        assert client.ping() is True
        client.set(probe, "still mine")
        assert client.get(probe) == ("still mine" if decode else b"still mine")
        client.close()
    else:

        async def run() -> None:
            async with TelarSaver(RedisStore(client, prefix=prefix)) as saver:
                graph = agent_graph.build().compile(checkpointer=saver)
                for turn in TURNS:
                    await graph.ainvoke(turn, CONFIG)
                assert history_summary_of([s async for s in graph.aget_state_history(CONFIG)]) == expected
            assert await client.ping() is True
            await client.set(probe, "still mine")
            assert await client.get(probe) == ("still mine" if decode else b"still mine")
            await client.aclose()

        asyncio.run(run())
    reads_back(cluster, prefix, expected)


def history_summary_of(snapshots: list[Any]) -> list[tuple]:
    from tests.graphs import summary

    return [summary(s) for s in snapshots]


@pytest.mark.parametrize("mode, cluster", KINDS)
def test_close_and_aclose_leave_the_given_client_open(prefix_of, mode: str, cluster: bool) -> None:
    prefix = prefix_of(cluster)
    client = make_client(mode, cluster)
    store = RedisStore(client, prefix=prefix)
    if mode == "sync":
        store.write("t", "a\n")
        store.close()
        assert client.ping() is True and store.read("t") == "a\n"  # still usable, by the app and the store
        client.close()
        return

    async def run() -> None:
        await store.awrite("t", "a\n")
        await store.aclose()
        store.close()
        assert await client.ping() is True and await store.aread("t") == "a\n"
        await client.aclose()

    asyncio.run(run())


# --- Clients as applications make them ---

SYNC_VARIANTS = {
    "single_connection": {"single_connection_client": True},
    "single_connection_decoded": {"single_connection_client": True, "decode_responses": True},
    "resp3_decoded": {"protocol": 3, "decode_responses": True},
}


@SERVER
@pytest.mark.parametrize("options", list(SYNC_VARIANTS.values()), ids=list(SYNC_VARIANTS))
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_clients_as_applications_make_them(prefix_of, mode: str, options: dict[str, Any]) -> None:
    prefix = prefix_of(False)
    expected = expected_history()
    client = make_client(mode, False, **options)
    if mode == "sync":
        with TelarSaver(RedisStore(client, prefix=prefix)) as saver:
            graph = agent_graph.build().compile(checkpointer=saver)
            for turn in TURNS:
                graph.invoke(turn, CONFIG)
        assert client.ping() is True
        client.close()
    else:

        async def run() -> None:
            async with TelarSaver(RedisStore(client, prefix=prefix)) as saver:
                graph = agent_graph.build().compile(checkpointer=saver)
                for turn in TURNS:
                    await graph.ainvoke(turn, CONFIG)
            assert await client.ping() is True
            await client.aclose()

        asyncio.run(run())
    reads_back(False, prefix, expected)


@SERVER
def test_client_side_caching_never_answers_the_stores_reads(prefix_of) -> None:
    """A value changed by another writer reads as changed, though the app's client caches replies."""
    from redis.cache import CacheConfig

    prefix = prefix_of(False)
    version = redis_admin().info()["redis_version"]
    if tuple(int(p) for p in version.split(".")[:2]) < (7, 4):
        pytest.skip(f"the test server is Redis {version}: client-side caching needs 7.4")
    client = make_client("sync", False, protocol=3, cache_config=CacheConfig())
    store, other = RedisStore(client, prefix=prefix), url_store(False, prefix)
    store.write("t", "a\n")
    assert client.get(store._raw_key("t")) == b"a\n"  # now in the client's cache
    other.update("t", lambda old: (old or "") + "b\n")
    assert store.read("t") == "a\nb\n"
    other.close()
    client.close()


@SERVER
def test_a_fastapi_style_app_shares_one_async_client(prefix_of) -> None:
    """One `redis.asyncio.Redis` made at startup, 32 requests at once, closed by the app at shutdown."""
    prefix = prefix_of(False)

    async def app() -> None:
        client = redis.asyncio.Redis.from_url(REDIS_URL, decode_responses=True)  # the app's lifespan
        async with TelarSaver(RedisStore(client, prefix=prefix)) as saver:
            graph = multi_step().compile(checkpointer=saver)

            async def request(i: int) -> dict[str, Any]:
                return await graph.ainvoke({"log": [f"r{i}"], "count": 0}, {"configurable": {"thread_id": f"user-{i}"}})

            results = await asyncio.gather(*(request(i) for i in range(32)))
        assert [r["log"] for r in results] == [[f"r{i}", "a", "b", "c"] for i in range(32)]
        assert await client.ping() is True
        await client.aclose()

    asyncio.run(app())
    with TelarSaver(url_store(False, prefix)) as saver:
        graph = multi_step().compile(checkpointer=saver)
        assert all(graph.get_state({"configurable": {"thread_id": f"user-{i}"}}).values["count"] == 3 for i in range(32))


# --- Refusals ---


def refused(error: type[Exception], make: Callable[[], Any], *words: str) -> str:
    with pytest.raises(error) as raised:
        make()
    message = str(raised.value)
    for word in words:
        assert word in message, message
    return message


@pytest.mark.parametrize("mode, cluster", KINDS)
def test_a_pipeline_is_refused(prefix_of, mode: str, cluster: bool) -> None:
    prefix = prefix_of(cluster)
    client = make_client(mode, cluster)
    pipeline = client.pipeline()
    refused(UnusableConnectionError, lambda: RedisStore(pipeline, prefix=prefix), "a pipeline", "give it the client the pipeline came from")
    assert keys_under(prefix, cluster) == []
    if mode == "sync":
        client.close()
    else:
        asyncio.run(client.aclose())


@pytest.mark.servers("redis", "redis-cluster")
def test_closed_clients_are_refused(prefix_of) -> None:
    prefix = prefix_of(False)
    single = make_client("sync", False, single_connection_client=True)
    single.close()
    refused(UnusableConnectionError, lambda: RedisStore(single, prefix=prefix), "was closed", "give it an open client")
    prefix_cluster = prefix_of(True)
    cluster = make_client("sync", True)
    cluster.close()
    refused(UnusableConnectionError, lambda: RedisStore(cluster, prefix=prefix_cluster), "was closed", "give it an open client")
    assert keys_under(prefix, False) == [] and keys_under(prefix_cluster, True) == []


@SERVER
def test_a_single_connection_client_of_a_forked_parent_is_refused(prefix_of) -> None:
    prefix = prefix_of(False)
    client = make_client("sync", False, single_connection_client=True)
    client.ping()
    pid = os.fork()
    if pid == 0:  # the child shares the parent's socket: using it would mix their replies
        try:
            RedisStore(client, prefix=prefix)
        except UnusableConnectionError as exc:
            os._exit(0 if "before a fork" in str(exc) else 2)
        except BaseException:
            os._exit(3)
        os._exit(1)
    assert child_exit_code(pid, "the forked child hung") == 0
    assert client.ping() is True  # the parent's connection is intact
    client.close()


@SERVER
def test_a_pooled_client_of_a_forked_parent_serves_the_child(prefix_of) -> None:
    """redis-py's sync pool starts afresh in a forked child (it compares process ids), so such a
    client is not refused: the child's store writes on connections of its own."""
    prefix = prefix_of(False)
    client = make_client("sync", False)
    client.ping()
    pid = os.fork()
    if pid == 0:
        try:
            store = RedisStore(client, prefix=prefix)
            store.write("child", "c\n")
            os._exit(0 if store.read("child") == "c\n" else 1)
        except BaseException:
            os._exit(2)
    assert child_exit_code(pid, "the forked child hung") == 0
    assert client.ping() is True and RedisStore(client, prefix=prefix).read("child") == "c\n"
    client.close()


def test_another_type_is_refused_naming_what_to_pass() -> None:
    for wrong in (42, object(), b"redis://127.0.0.1"):
        refused(ArgumentTypeError, lambda w=wrong: RedisStore(w), "url", "redis.Redis", "redis.asyncio.Redis", "redis+cluster://")


@SERVER
def test_client_options_are_for_url_stores(prefix_of) -> None:
    prefix = prefix_of(False)
    client = make_client("sync", False)
    make = lambda: RedisStore(client, prefix=prefix, health_check_interval=5)  # noqa: E731
    refused(UsageError, make, "health_check_interval", "set them on your client")
    refused(UsageError, lambda: RedisStore(client, prefix=prefix, max_connections=8), "max_connections", "set them on your client")
    refused(UsageError, lambda: RedisStore(client, prefix=prefix, timeout=1.0), "'timeout'", "set them on your client")
    client.close()


@pytest.mark.parametrize("mode, cluster", KINDS)
def test_the_other_kind_of_methods_refuses_changing_nothing(prefix_of, mode: str, cluster: bool) -> None:
    prefix = prefix_of(cluster)
    client = make_client(mode, cluster)
    store = RedisStore(client, prefix=prefix)
    if mode == "sync":
        store.write("t", "a\n")

        async def calls() -> None:
            for call in (lambda: store.aread("t"), lambda: store.awrite("t", "x\n"), lambda: store.adelete("t"), store.akeys):
                with pytest.raises(NoAsyncDriverError) as raised:
                    await call()
                assert "only its sync methods" in str(raised.value) and ("redis.asyncio" in str(raised.value))

        asyncio.run(calls())
        assert store.read("t") == "a\n"
        store.close()
        client.close()
        return
    async def run() -> None:  # one loop: the client's connections belong to the loop that opened them
        await store.awrite("t", "a\n")
        for call in (lambda: store.read("t"), lambda: store.write("t", "x\n"), lambda: store.delete("t"), lambda: list(store.keys())):
            message = refused(NoSyncDriverError, call, "only its async methods", "ainvoke")
            assert ("redis.cluster.RedisCluster" if cluster else "redis.Redis client") in message
        other = url_store(cluster, prefix)
        assert other.read("t") == "a\n"
        other.close()
        await store.aclose()
        await client.aclose()

    asyncio.run(run())


@pytest.mark.servers("redis", "redis-cluster")
def test_url_and_server_name_the_clients_server(prefix_of) -> None:
    prefix = prefix_of(False)
    client = redis.Redis(host="127.0.0.1", port=6379, db=3, password=None)
    store = RedisStore(client, prefix=prefix)
    assert (store.url, store.server, store.kind) == ("redis://127.0.0.1:6379/3", "127.0.0.1:6379", "redis")
    cluster = make_client("sync", True)
    store = RedisStore(cluster, prefix=prefix)
    nodes = [f"{host}:{port}" for host, port in cluster_nodes(REDIS_CLUSTER_URL)[0]]
    assert any(store.url.startswith(f"redis+cluster://{node}") for node in nodes) and store.kind == "redis-cluster"
    assert any(node in store.server for node in nodes)
    client.close()
    cluster.close()


# --- A write is sent once, whatever the client's retry policy ---


class DroppingProxy:
    """A TCP proxy to a Redis server that, when armed with a marker, passes the next command holding
    it on to the server, reads the server's reply, and closes the client's connection instead of
    passing the reply back: the write was applied, its reply lost. Counts the commands with the marker."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.marker: bytes | None = None
        self.armed = False
        self.seen = 0
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def arm(self, marker: bytes) -> None:
        with self._lock:
            self.marker, self.armed, self.seen = marker, True, 0

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            drop = threading.Event()
            threading.Thread(target=self._up, args=(conn, upstream, drop), daemon=True).start()
            threading.Thread(target=self._down, args=(conn, upstream, drop), daemon=True).start()

    def _up(self, conn: socket.socket, upstream: socket.socket, drop: threading.Event) -> None:
        try:
            while data := conn.recv(65536):
                with self._lock:
                    if self.marker is not None and self.marker in data:
                        self.seen += 1
                        if self.armed:
                            self.armed = False
                            drop.set()
                upstream.sendall(data)
        except OSError:
            pass

    def _down(self, conn: socket.socket, upstream: socket.socket, drop: threading.Event) -> None:
        try:
            while data := upstream.recv(65536):
                if drop.is_set():
                    break
                conn.sendall(data)
        except OSError:
            pass
        for sock in (conn, upstream):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def proxies() -> Iterator[Callable[[str, int], DroppingProxy]]:
    made: list[DroppingProxy] = []

    def make(host: str, port: int) -> DroppingProxy:
        made.append(DroppingProxy(host, port))
        return made[-1]

    yield make
    for proxy in made:
        proxy.close()


def proxied_client(mode: str, cluster: bool, proxies: Callable[[str, int], DroppingProxy]) -> tuple[Any, list[DroppingProxy]]:
    """An app's client with redis-py's default retries, reaching the server (each node) through a proxy."""
    if not cluster:
        params = redis.Redis.from_url(REDIS_URL).connection_pool.connection_kwargs
        proxy = proxies(params.get("host", "127.0.0.1"), params.get("port", 6379))
        kind = redis.Redis if mode == "sync" else redis.asyncio.Redis
        return kind(host="127.0.0.1", port=proxy.port, db=params.get("db", 0)), [proxy]
    by_port: dict[int, DroppingProxy] = {}
    admin = redis_cluster_admin()
    try:
        for node in admin.get_nodes():
            by_port[node.port] = proxies(node.host, node.port)
    finally:
        admin.close()
    remap = lambda address: ("127.0.0.1", by_port[address[1]].port) if address[1] in by_port else address  # noqa: E731
    nodes, _ = cluster_nodes(REDIS_CLUSTER_URL)
    if mode == "sync":
        client: Any = redis.cluster.RedisCluster(startup_nodes=[redis.cluster.ClusterNode(*n) for n in nodes], address_remap=remap)
    else:
        startup = [redis.asyncio.cluster.ClusterNode(*n) for n in nodes]
        client = redis.asyncio.cluster.RedisCluster(startup_nodes=startup, address_remap=remap)
    return client, list(by_port.values())


def arm(proxies: list[DroppingProxy], marker: bytes) -> None:
    for proxy in proxies:
        proxy.arm(marker)


def seen(proxies: list[DroppingProxy]) -> int:
    return sum(proxy.seen for proxy in proxies)


@pytest.mark.parametrize("mode, cluster", KINDS)
def test_a_write_whose_reply_is_lost_is_not_sent_again(prefix_of, proxies, mode: str, cluster: bool) -> None:
    """The app's client retries after a connection error (redis-py's default: shown first on INCR,
    applied twice); our compare-and-set and append, whose replies are lost the same way, are sent
    once: the store raises StoreError and the value holds the change once."""
    prefix = prefix_of(cluster)
    client, through = proxied_client(mode, cluster, proxies)
    counter = prefix + "counter"
    store = RedisStore(client, prefix=prefix)
    check = url_store(cluster, prefix)
    cas, append = scripts.COMPARE_AND_SET.sha.encode(), scripts.APPEND_IF.sha.encode()

    def load_scripts() -> None:
        for node in ([check._client] if not cluster else [check._client.get_redis_connection(n) for n in check._client.get_primaries()]):
            node.script_load(scripts.COMPARE_AND_SET.source)
            node.script_load(scripts.APPEND_IF.source)

    if mode == "sync":
        assert client.get_retry().get_retries() > 0 if not cluster else client.retry.get_retries() > 0
        arm(through, b"INCR")
        assert client.incr(counter) == 2 and seen(through) >= 2  # the client sent it again: applied twice
        store.write("warm", "w\n")  # schema checked, scripts loaded
        load_scripts()
        arm(through, cas)
        with pytest.raises(StoreError):
            store.update("t", lambda old: (old or "") + "x\n")
        assert seen(through) == 1 and check.read("t") == "x\n"
        version = store.version("t")
        arm(through, append)
        with pytest.raises(StoreError):
            store.append_if("t", "y\n", version)
        assert seen(through) == 1 and check.read("t") == "x\ny\n"
        store.update("t", lambda old: (old or "") + "z\n")  # the pool reconnects
        assert check.read("t") == "x\ny\nz\n"
        client.close()
    else:

        async def run() -> None:
            arm(through, b"INCR")
            assert await client.incr(counter) == 2 and seen(through) >= 2
            await store.awrite("warm", "w\n")
            load_scripts()
            arm(through, cas)
            with pytest.raises(StoreError):
                await store.aupdate("t", lambda old: (old or "") + "x\n")
            assert seen(through) == 1 and check.read("t") == "x\n"
            version = await store.aversion("t")
            arm(through, append)
            with pytest.raises(StoreError):
                await store.aappend_if("t", "y\n", version)
            assert seen(through) == 1 and check.read("t") == "x\ny\n"
            await store.aupdate("t", lambda old: (old or "") + "z\n")
            assert check.read("t") == "x\ny\nz\n"
            await client.aclose()

        asyncio.run(run())
    check.close()


# --- A cluster's moved slots ---


@CLUSTER
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_cluster_client_with_a_stale_slot_map_follows_moved(prefix_of, mode: str) -> None:
    """The app's cluster client believes a slot is on the wrong node: the server answers MOVED
    (applying nothing), the store reads the topology again and sends the command where it belongs."""
    prefix = prefix_of(True)
    client = make_client(mode, True)
    store = RedisStore(client, prefix=prefix)
    raw_key = store._raw_key("t")

    def mislead() -> None:
        slot = client.keyslot(raw_key)
        owner = client.nodes_manager.slots_cache[slot][0]
        wrong = next(n for n in client.get_primaries() if n.name != owner.name)
        client.nodes_manager.slots_cache[slot] = [wrong]

    if mode == "sync":
        store.write("warm", "w\n")
        mislead()
        store.write("t", "a\n")
        assert store.read("t") == "a\n"
        client.close()
    else:

        async def run() -> None:
            await store.awrite("warm", "w\n")
            mislead()
            await store.awrite("t", "a\n")
            assert await store.aread("t") == "a\n"
            await client.aclose()

        asyncio.run(run())
    assert url_store(True, prefix).read("t") == "a\n"
