"""How `RedisStore` reaches Redis: `OwnClients`, made from a URL and configured by us, or a client
the application made and owns (`given`).

Our own clients do not retry commands (``Retry(NoBackoff(), 0)``), reply in bytes, and the async
ones are one per event loop (`stores.event_loops`). On a single server the frequent commands go
straight to a connection of the pool (``send_command`` then ``read_response``), skipping the
client's per-command machinery, unless the client is bound to one connection
(``single_connection_client``) or caches replies on the client side.

A given client keeps its own settings, and we change none of them. Every command of ours goes
on one of its connections by our own call (packed, sent, read with decoding off), never through
its ``execute_command``, for three reasons:

- its retry policy (redis-py 6 and later retry a command after a connection error) would send a
  write again after a lost reply: the compare-and-set or append was applied, the second sending
  finds the new token and answers "moved", and the caller would then apply its change a second
  time. A write is sent once; a lost reply is a `StoreError`, as with our own clients. Only a
  command that changes nothing is sent once more (`redis_scripts.reads_only`).
- ``decode_responses=True`` would give us str where our values are bytes;
- its client-side cache would answer our reads from memory (a pre-packed command is never cached).

On a cluster we route each command to the primary of its key's slot ourselves, following
``MOVED`` (the topology is read again), ``ASK`` and ``TRYAGAIN``, which the server sends without
applying the command. A given client is never closed by the store; an async one serves the event
loop it was made on (it is not one per loop).
"""

from __future__ import annotations

import asyncio
import inspect
import os
import threading
import time
import typing
from collections.abc import Callable, Coroutine
from typing import Any, NamedTuple, NoReturn, Union

import redis
import redis.asyncio
import redis.asyncio.client
import redis.asyncio.cluster
import redis.asyncio.retry
import redis.client
import redis.cluster
from redis.backoff import NoBackoff
from redis.exceptions import AskError, MovedError, TryAgainError
from redis.retry import Retry

from telar_checkpoint.errors import ArgumentTypeError, NoAsyncDriverError, NoSyncDriverError, UnusableConnectionError, UsageError
from telar_checkpoint.stores import redis_scripts as scripts
from telar_checkpoint.stores.event_loops import PerLoop
from telar_checkpoint.stores.url import cluster_nodes

Client = Union[redis.Redis, redis.cluster.RedisCluster, redis.asyncio.Redis, redis.asyncio.cluster.RedisCluster]
"""The redis-py clients a `RedisStore` may be given instead of a URL."""

try:  # redis>=7: with maintenance notifications on ("auto"), the asyncio pool skips its dead-connection check
    from redis.maint_notifications import MaintNotificationsConfig

    CLIENT_DEFAULTS: dict[str, Any] = {"maint_notifications_config": MaintNotificationsConfig(enabled=False)}
except ImportError:  # pragma: no cover - older redis
    CLIENT_DEFAULTS = {}

# redis<5.3 requires a command name here (a plain pool ignores it); redis>=5.3 warns when given one.
_POOL_ARGS: tuple[str, ...] = (
    ("GET",)
    if inspect.signature(redis.ConnectionPool.get_connection).parameters["command_name"].default
    is inspect.Parameter.empty
    else ()
)

# A cluster client re-sends a command after a dropped connection (which may apply a write twice):
# redis<6 as often as this option says, newer ones as their `retry` says (deprecating the option).
_CLUSTER_DEFAULTS: dict[str, Any] = {"cluster_error_retry_attempts": 0} if int(redis.__version__.split(".")[0]) < 6 else {}

SCAN_BATCH = 1000
REDIRECTS = 5
"""Times a cluster command follows MOVED, ASK or TRYAGAIN before giving up."""

_PIPELINES = (redis.client.Pipeline, redis.cluster.ClusterPipeline, redis.asyncio.client.Pipeline, redis.asyncio.cluster.ClusterPipeline)


def _name(client: object) -> str:
    kind = type(client)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


# --- Our own clients, made from a URL ---


def _blocking(client_class: Any, pool_class: Any, url: str, options: dict[str, Any]) -> Any:
    """A client of `client_class` on a `pool_class` pool (a blocking one) made from `url`, which
    closes its pool when it is closed (as ``from_url``'s clients do)."""
    client = client_class(connection_pool=pool_class.from_url(url, **options))
    client.auto_close_connection_pool = True
    return client


class OwnClients:
    """The clients a store makes from its URL: a sync one, made at once on a single server and on
    first use on a cluster, and one async client per event loop."""

    def __init__(
        self,
        url: str,
        cluster: bool,
        connect_timeout: float,
        timeout: float | None,
        client_options: dict[str, Any],
        max_connections: int = 64,
    ) -> None:
        self.url, self.cluster = url, cluster
        # On a single server, each client's connections are at most `max_connections`, and a call
        # waits for a free one (up to `timeout`, 30 s when that is None) instead of failing: redis-py's
        # plain pool raises "Too many connections" past 100 (256 concurrent runs did that). Options
        # that choose the pool (connection_pool_class) are the caller's to choose.
        self._blocking = not cluster and not {"connection_pool_class", "connection_pool", "single_connection_client"} & set(client_options)
        pool = {"max_connections": max_connections, "timeout": 30.0 if timeout is None else timeout} if self._blocking else {}
        self.options: dict[str, Any] = {
            "socket_connect_timeout": connect_timeout,
            "socket_timeout": timeout,
            "retry": Retry(NoBackoff(), 0),
            **CLIENT_DEFAULTS,
            **pool,
            **client_options,
        }
        options = self.options
        # The asyncio clients get the asyncio Retry (redis-py>=8 warns when given the sync one);
        # a `retry` of the caller's goes to both as given.
        async_retry = {} if "retry" in client_options else {"retry": redis.asyncio.retry.Retry(NoBackoff(), 0)}
        self.async_options = {**self.options, **async_retry}
        self._lock = threading.Lock()
        self.client: Any = None  # Any: its replies are bytes (decode_responses is off), which redis-py's types cannot say
        self.direct = False
        self.db = 0
        if cluster:
            self._nodes, self._node_options = cluster_nodes(url)
            self.server = ",".join(f"{host}:{port}" for host, port in self._nodes)
        else:
            try:
                if self._blocking:
                    self.client = _blocking(redis.Redis, redis.BlockingConnectionPool, url, options)
                else:
                    self.client = redis.Redis.from_url(url, **options)
            except ValueError as exc:
                raise UsageError(f"not a Redis URL: {exc}") from exc
            # A client bound to one connection (single_connection_client), or caching replies on the
            # client side (whose connections need the keys of each command), keeps the client's path.
            self.direct = self.client.connection is None and getattr(self.client.connection_pool, "cache", None) is None
            params = self.client.connection_pool.connection_kwargs
            self.server = params.get("path") or f"{params.get('host', 'localhost')}:{params.get('port', 6379)}"
            self.db = params.get("db", 0)
        self._async: PerLoop[_AsyncClient] = PerLoop(self._new_async_client, _AsyncClient.aclose, _AsyncClient.abandon)

    def sync_client(self) -> Any:
        if self.client is None:
            with self._lock:
                if self.client is None:
                    nodes = [redis.cluster.ClusterNode(host, port) for host, port in self._nodes]
                    options = {**_CLUSTER_DEFAULTS, **self._node_options, **self.options}
                    self.client = redis.cluster.RedisCluster(startup_nodes=nodes, **options)
        return self.client

    def command(self, *args: Any) -> Any:
        """The reply to one command, sent on a connection of the pool (see the module's docs).
        A connection error disconnects it (redis-py does), so the pool reconnects next time."""
        if self.cluster:
            try:
                return self.sync_client().execute_command(*args)
            except redis.ConnectionError:
                if not scripts.reads_only(args):
                    raise
                return self.sync_client().execute_command(*args)  # see `redis_scripts.reads_only`
        if not self.direct:
            return self.client.execute_command(*args)
        pool = self.client.connection_pool
        conn = pool.get_connection(*_POOL_ARGS)
        try:
            conn.send_command(*args)
            return conn.read_response()
        finally:
            pool.release(conn)

    def scan(self, match: bytes) -> list[bytes]:
        return list(self.sync_client().scan_iter(match=match, count=SCAN_BATCH))

    def close(self) -> None:
        client = self.client
        if client is not None:
            if self.cluster:  # the next use makes a new one
                self.client = None
            client.close()
        self._async.close()

    def _new_async_client(self) -> _AsyncClient:
        given = self.options.get("connection_class")
        if given is not None and not issubclass(given, redis.asyncio.connection.AbstractConnection):
            raise NoAsyncDriverError(
                f"RedisStore was given connection_class={given.__module__}.{given.__qualname__}, a sync connection, "
                "which its async methods cannot use: use the sync methods, or give it no connection_class "
                "(for TLS, a rediss:// URL; for a socket, unix://)"
            )
        options = self.async_options
        if self.cluster:
            nodes = [redis.asyncio.cluster.ClusterNode(host, port) for host, port in self._nodes]
            options = {**_CLUSTER_DEFAULTS, **self._node_options, **options}
            return _AsyncClient(redis.asyncio.cluster.RedisCluster(startup_nodes=nodes, **options), False)
        if self._blocking:
            client = _blocking(redis.asyncio.Redis, redis.asyncio.BlockingConnectionPool, self.url, options)
        else:
            client = redis.asyncio.Redis.from_url(self.url, **options)
        direct = not client.single_connection_client and getattr(client.connection_pool, "cache", None) is None
        return _AsyncClient(client, direct)

    async def acommand(self, *args: Any) -> Any:
        """`command` on the running loop's client."""
        client, direct = self._async.current() or await self._async.get()
        if self.cluster:
            try:
                return await client.execute_command(*args)
            except redis.ConnectionError:
                if not scripts.reads_only(args):
                    raise
                return await client.execute_command(*args)  # see `redis_scripts.reads_only`
        if not direct:
            return await client.execute_command(*args)
        pool = client.connection_pool
        conn = await pool.get_connection(*_POOL_ARGS)
        try:
            await conn.send_command(*args)
            return await conn.read_response()
        finally:
            await pool.release(conn)

    async def ascan(self, match: bytes) -> list[bytes]:
        client = (self._async.current() or await self._async.get()).client
        return [key async for key in client.scan_iter(match=match, count=SCAN_BATCH)]

    async def aclose(self) -> None:
        await self._async.aclose()
        self.close()


class _AsyncClient(NamedTuple):
    """An event loop's client, and whether its commands may go straight to a connection."""

    client: Any
    direct: bool

    async def aclose(self) -> None:
        await self.client.aclose()

    def abandon(self) -> None:
        """A client whose loop closed without shutting down: its connections cannot be closed
        without the loop, and close when collected."""


# --- A client the application made ---


class Given:
    """A client the application gave the store: how our commands reach it (see the module's docs).
    Subclasses serve one side, sync or async, and refuse the other in our words."""

    cluster = False

    def __init__(self, client: Any, url: str, server: str, db: int = 0) -> None:
        self.client, self.url, self.server, self.db = client, url, server, db

    def refuse_sync(self) -> NoReturn:
        name = _name(self.client)
        other = "redis.cluster.RedisCluster client or a redis+cluster://" if self.cluster else "redis.Redis client or a redis://"
        other += " URL"
        raise NoSyncDriverError(
            f"RedisStore was given a {name} client, which only its async methods can use: call the async "
            f"methods (ainvoke, astream, aget_tuple), or give it a {other} (with a URL, both kinds of methods work)"
        )

    def refuse_async(self) -> NoReturn:
        name = _name(self.client)
        other = "redis.asyncio.cluster.RedisCluster client or a redis+cluster://" if self.cluster else "redis.asyncio.Redis client or a redis://"
        other += " URL"
        raise NoAsyncDriverError(
            f"RedisStore was given a {name} client, which only its sync methods can use: call the sync "
            f"methods (invoke, stream, get_tuple), or give it a {other} (with a URL, both kinds of methods work)"
        )

    def command(self, *args: Any) -> Any:
        self.refuse_sync()

    def scan(self, match: bytes) -> list[bytes]:
        self.refuse_sync()

    async def acommand(self, *args: Any) -> Any:
        self.refuse_async()

    async def ascan(self, match: bytes) -> list[bytes]:
        self.refuse_async()


def _send(conn: Any, args: tuple[Any, ...]) -> Any:
    """One command on `conn`, sent once (a packed command is never answered from a client-side cache)."""
    conn.send_packed_command(conn.pack_command(*args))
    return conn.read_response(disable_decoding=True)


async def _asend(conn: Any, args: tuple[Any, ...]) -> Any:
    await conn.send_packed_command(conn.pack_command(*args))
    return await conn.read_response(disable_decoding=True)


def _key(args: tuple[Any, ...]) -> Any:
    """The key that routes one of our commands on a cluster (each names at least one)."""
    return args[3] if args[0] in ("EVALSHA", "EVAL") else args[1]


def _once_more_if_read(send: Callable[[tuple[Any, ...]], Any], args: tuple[Any, ...]) -> Any:
    try:
        return send(args)
    except redis.ConnectionError:
        if not scripts.reads_only(args):
            raise
        return send(args)  # see `redis_scripts.reads_only`


async def _aonce_more_if_read(send: Callable[[tuple[Any, ...]], Coroutine[Any, Any, Any]], args: tuple[Any, ...]) -> Any:
    try:
        return await send(args)
    except redis.ConnectionError:
        if not scripts.reads_only(args):
            raise
        return await send(args)


def _too_many(args: tuple[Any, ...]) -> redis.exceptions.ClusterError:
    return redis.exceptions.ClusterError(f"{args[0]}: redirected {REDIRECTS} times (the cluster's slots are moving)")


class _GivenRedis(Given):
    """A `redis.Redis`: its one connection (``single_connection_client``, under its lock) or its pool's."""

    def _on_connection(self, args: tuple[Any, ...]) -> Any:
        client = self.client
        conn = client.connection
        if conn is not None:
            with client.single_connection_lock:
                return _send(conn, args)
        pool = client.connection_pool
        conn = pool.get_connection(*_POOL_ARGS)
        try:
            return _send(conn, args)
        finally:
            pool.release(conn)

    def command(self, *args: Any) -> Any:
        return _once_more_if_read(self._on_connection, args)

    def scan(self, match: bytes) -> list[bytes]:
        return _scan_with(self.command, match)


class _GivenCluster(Given):
    """A `redis.cluster.RedisCluster`: a connection of the pool of the node that serves the key."""

    cluster = True

    def _routed(self, args: tuple[Any, ...], node: Any = None) -> Any:
        client, asking = self.client, False
        for _ in range(REDIRECTS):
            node = node or client.get_node_from_key(_key(args))
            pool = client.get_redis_connection(node).connection_pool
            conn = pool.get_connection(*_POOL_ARGS)
            try:
                if asking:
                    _send(conn, ("ASKING",))
                return _send(conn, args)
            except MovedError:
                client.nodes_manager.initialize()
                node, asking = None, False
            except AskError as exc:
                node, asking = _node(client, exc.host, exc.port), True
            except TryAgainError:
                time.sleep(0.05)
                node, asking = None, False
            finally:
                pool.release(conn)
        raise _too_many(args)

    def command(self, *args: Any) -> Any:
        return _once_more_if_read(self._routed, args)

    def scan(self, match: bytes) -> list[bytes]:
        return [key for node in self.client.get_primaries() for key in _scan_with(lambda *a, n=node: self._routed(a, n), match)]


def _node(client: Any, host: str, port: int) -> Any:
    node = client.get_node(host=host, port=port)
    if node is None:
        client.nodes_manager.initialize()
        node = client.get_node(host=host, port=port)
    return node


class _GivenAsyncRedis(Given):
    """A `redis.asyncio.Redis`, as `_GivenRedis`."""

    async def _on_connection(self, args: tuple[Any, ...]) -> Any:
        client = self.client
        if client.single_connection_client:
            await client.initialize()
            async with client._single_conn_lock:  # the lock its own commands take (redis>=4.2)
                return await _asend(client.connection, args)
        pool = client.connection_pool
        conn = await pool.get_connection(*_POOL_ARGS)
        try:
            return await _asend(conn, args)
        finally:
            await pool.release(conn)

    async def acommand(self, *args: Any) -> Any:
        return await _aonce_more_if_read(self._on_connection, args)

    async def ascan(self, match: bytes) -> list[bytes]:
        return await _ascan_with(self.acommand, match)


class _GivenAsyncCluster(Given):
    """A `redis.asyncio.cluster.RedisCluster`, as `_GivenCluster`, on the node's own connections."""

    cluster = True

    async def _routed(self, args: tuple[Any, ...], node: Any = None) -> Any:
        client, asking = self.client, False
        await client.initialize()  # at once when done: it connects on first use
        for _ in range(REDIRECTS):
            node = lender = node or client.get_node_from_key(_key(args))
            conn = lender.acquire_connection()
            try:
                if hasattr(node, "disconnect_if_needed"):  # redis>=7: one marked for reconnection
                    await node.disconnect_if_needed(conn)
                if asking:
                    await _asend(conn, ("ASKING",))
                return await _asend(conn, args)
            except MovedError:
                await client.nodes_manager.initialize()
                node, asking = None, False
            except AskError as exc:
                node, asking = client.get_node(host=exc.host, port=exc.port), True
                if node is None:
                    await client.nodes_manager.initialize()
                    node = client.get_node(host=exc.host, port=exc.port)
            except TryAgainError:
                await asyncio.sleep(0.05)
                node, asking = None, False
            finally:
                lender.release(conn)
        raise _too_many(args)

    async def acommand(self, *args: Any) -> Any:
        return await _aonce_more_if_read(self._routed, args)

    async def ascan(self, match: bytes) -> list[bytes]:
        await self.client.initialize()
        found: list[bytes] = []
        for node in self.client.get_primaries():
            async def on_node(*args: Any, node: Any = node) -> Any:
                return await self._routed(args, node)

            found += await _ascan_with(on_node, match)
        return found


def _scan_with(command: Callable[..., Any], match: bytes) -> list[bytes]:
    found: list[bytes] = []
    cursor: Any = b"0"
    while True:
        cursor, keys = command("SCAN", cursor, "MATCH", match, "COUNT", SCAN_BATCH)
        found += keys
        if int(cursor) == 0:
            return found


async def _ascan_with(command: Callable[..., Coroutine[Any, Any, Any]], match: bytes) -> list[bytes]:
    found: list[bytes] = []
    cursor: Any = b"0"
    while True:
        cursor, keys = await command("SCAN", cursor, "MATCH", match, "COUNT", SCAN_BATCH)
        found += keys
        if int(cursor) == 0:
            return found


# --- Which client, and whether it can serve ---


GIVEN_FROM = (6, 2)  # the redis-py release from which a given client's internals the store uses are there
REDIS_VERSION = tuple(int(part) for part in redis.__version__.split(".")[:2] if part.isdigit())


def given(client: object) -> Given:
    """How a store reaches Redis through `client`, refused in our words when it cannot serve
    (see `RedisStore`)."""
    if isinstance(client, _PIPELINES):
        raise UnusableConnectionError(
            f"RedisStore was given a {_name(client)}, a pipeline (it queues commands until execute()): "
            "give it the client the pipeline came from"
        )
    if GIVEN_FROM > REDIS_VERSION and isinstance(client, typing.get_args(Client)):
        raise UnusableConnectionError(
            f"RedisStore was given a {_name(client)} of redis-py {redis.__version__}: an application's own client needs "
            f"redis-py {'.'.join(map(str, GIVEN_FROM))} or newer (the connection locks and cluster nodes the store "
            "sends its commands through); upgrade redis, or give the store a URL"
        )
    if isinstance(client, redis.cluster.RedisCluster):
        if client.nodes_manager.default_node is None:
            raise UnusableConnectionError(f"RedisStore was given a {_name(client)} that was closed: give it an open client")
        return _GivenCluster(client, *_cluster_url(client))
    if isinstance(client, redis.Redis):
        if client.connection is None and getattr(client, "_single_connection_client", False):
            raise UnusableConnectionError(
                f"RedisStore was given a {_name(client)} (single_connection_client) that was closed: give it an open client"
            )
        if client.connection is not None and getattr(client.connection, "pid", os.getpid()) != os.getpid():
            raise UnusableConnectionError(
                f"RedisStore was given a {_name(client)} (single_connection_client) made in another process, before a "
                "fork: its connection is the parent's; make the client in this process"
            )
        return _GivenRedis(client, *_server_url(client.connection_pool, ssl=redis.connection.SSLConnection))
    if isinstance(client, redis.asyncio.cluster.RedisCluster):
        return _GivenAsyncCluster(client, *_cluster_url(client))
    if isinstance(client, redis.asyncio.Redis):
        return _GivenAsyncRedis(client, *_server_url(client.connection_pool, ssl=redis.asyncio.connection.SSLConnection))
    raise ArgumentTypeError(
        f"RedisStore's url: a redis://, rediss://, unix:// or redis+cluster:// URL (a str), or a redis-py client "
        f"(redis.Redis, redis.cluster.RedisCluster, redis.asyncio.Redis, redis.asyncio.cluster.RedisCluster), not {_name(client)}"
    )


def _server_url(pool: Any, ssl: type) -> tuple[str, str, int]:
    """The URL (without credentials), the server and the database of a client's pool."""
    params = pool.connection_kwargs
    db = int(params.get("db") or 0)
    path = params.get("path")
    if path:
        return f"unix://{path}?db={db}", path, db
    server = f"{params.get('host', 'localhost')}:{params.get('port', 6379)}"
    secure = isinstance(pool.connection_class, type) and issubclass(pool.connection_class, ssl)
    return f"{'rediss' if secure else 'redis'}://{server}/{db}", server, db


def _cluster_url(client: Any) -> tuple[str, str]:
    """The URL (without credentials) and the nodes of a cluster client: the nodes it was told of."""
    nodes = sorted({(node.host, int(node.port)) for node in client.nodes_manager.startup_nodes.values()})
    server = ",".join(f"{host}:{port}" for host, port in nodes)
    kwargs = getattr(client.nodes_manager, "connection_kwargs", None) or getattr(client, "connection_kwargs", {})
    connection_class = kwargs.get("connection_class")
    secure = bool(kwargs.get("ssl")) or (
        isinstance(connection_class, type)
        and issubclass(connection_class, (redis.connection.SSLConnection, redis.asyncio.connection.SSLConnection))
    )
    return f"{'rediss' if secure else 'redis'}+cluster://{server}", server


def is_redis_object(value: object) -> bool:
    """Whether `value` is a redis-py client or pipeline (what `given` takes or refuses in its words): for
    `TelarSaver` to choose `RedisStore` (check ``"redis" in sys.modules`` first, not to import redis)."""
    return isinstance(value, (*typing.get_args(Client), *_PIPELINES))
