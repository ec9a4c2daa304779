"""PostgreSQL connections lent to one operation at a time: `Connections` (sync) and
`AsyncConnections` (one per event loop, see `stores.event_loops`), and the drivers that run an
operation's steps on a lent connection (`drive`, `adrive`).

They replace psycopg_pool, for two measured reasons. After the server dropped its connections
(restart, failover, idle timeout), the pool checked each dead one in turn with backoff, so the next
call waited 30 s and failed although the server was up (issue 19); and the async pool's worker
tasks swallowed an event loop's cancellation, so `asyncio.run` hung at exit about one run in two
(issue 17). Here a connection has no thread or task of its own. Before an idle connection is lent,
its socket is polled (no round trip): a connection the server closed has something to read (its
farewell, or the end of the stream) and is closed and replaced by a new one, so the first call
after a drop connects afresh at once. At most `max_size` connections are lent at once (for async,
per event loop); a call waits up to `timeout` seconds for one. Idle connections are kept, up to
`max_size`; closing closes them, and a connection lent then is closed when it comes back.
"""

from __future__ import annotations

import asyncio
import os
import select
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Generator, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from typing import Any, Generic, Protocol, TypeVar

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import TransactionStatus
from psycopg.rows import tuple_row

from telar_checkpoint.errors import StoreError

Conn = TypeVar("Conn", psycopg.Connection[Any], psycopg.AsyncConnection[Any])
Rows = list[tuple[Any, ...]]
SqlSteps = Generator[tuple[sql.Composed | sql.SQL, tuple[Any, ...]], Rows, Any]
"""An operation of the PostgreSQL store as a generator: it yields each ``(query, params)`` to run,
is sent back its rows, and returns its result; `drive` and `adrive` run it (not the saver's
`steps.Steps`, whose steps are calls of a store's methods)."""


def drive(steps: SqlSteps, conn: psycopg.Connection[Any]) -> Any:
    """Run `steps` on `conn`, each statement through a cursor of tuple rows (a connection the
    application gave may make dicts: a pool set up for LangGraph's PostgresSaver does)."""
    try:
        query, params = next(steps)
        while True:
            cursor = conn.cursor(row_factory=tuple_row).execute(query, params)
            query, params = steps.send(cursor.fetchall() if cursor.description else [])
    except StopIteration as stop:
        return stop.value


async def adrive(steps: SqlSteps, conn: psycopg.AsyncConnection[Any]) -> Any:
    """`drive`, on an async connection."""
    try:
        query, params = next(steps)
        while True:
            cursor = await conn.cursor(row_factory=tuple_row).execute(query, params)
            query, params = steps.send(await cursor.fetchall() if cursor.description else [])
    except StopIteration as stop:
        return stop.value


class Lender:
    """What lends the store's sync methods a connection: `Connections`, or one the application
    gave (`stores.postgres_given`). Each defines `get`, `put` and `close`."""

    def get(self) -> psycopg.Connection[Any]:
        """A connection for one operation, in autocommit; give it back with `put`."""
        raise NotImplementedError

    def put(self, conn: psycopg.Connection[Any]) -> None:
        """Give back a connection `get` lent, outside any transaction."""
        raise NotImplementedError

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """`get`, and `put` at the end of the block."""
        conn = self.get()
        try:
            yield conn
        finally:
            self.put(conn)

    def close(self) -> None:
        """Close what the lender opened (never what the application gave)."""
        raise NotImplementedError


class AsyncLender(Protocol):
    """What lends the store's async methods a connection: the running loop's `AsyncConnections`,
    or one the application gave (their `put` is sync for the one, async for the other: the store's
    hot path takes `AsyncConnections.get` and `put` itself)."""

    def connection(self) -> AbstractAsyncContextManager[psycopg.AsyncConnection[Any]]:
        """A connection for one operation, in autocommit, given back at the end of the block."""

    def close(self) -> None:
        """Close what the lender opened (never what the application gave)."""


def server_name(conninfo: str, **kwargs: Any) -> str:
    """``host:port`` of the server that `conninfo` names, for messages."""
    params = {**conninfo_to_dict(conninfo), **kwargs}
    host = params.get("host") or params.get("hostaddr") or os.environ.get("PGHOST") or "localhost"
    port = params.get("port") or os.environ.get("PGPORT") or "5432"
    return f"{host}:{port}"

if hasattr(select, "poll"):

    def _readable(fd: int) -> bool:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(0))

else:  # pragma: no cover - Windows

    def _readable(fd: int) -> bool:
        return bool(select.select([fd], [], [], 0)[0])


def _reusable(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """`conn` can be lent again: open, outside any transaction, and the server has not spoken
    since (an idle connection has nothing to read unless the server is closing it)."""
    return (
        not conn.closed
        and conn.pgconn.transaction_status == TransactionStatus.IDLE
        and not _readable(conn.pgconn.socket)
    )


def _close(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> None:
    """Close `conn` at once, sync or async (closing sends one message and does not wait)."""
    conn.pgconn.finish()


class _Idle(Generic[Conn]):
    """The idle connections and the bookkeeping shared by the sync and async lenders."""

    _slots: threading.BoundedSemaphore | asyncio.Semaphore  # a permit for each connection lent

    def __init__(self, server: str, max_size: int, timeout: float) -> None:
        self.server, self.max_size, self.timeout = server, max_size, timeout
        self._lock = threading.Lock()
        self._idle: list[Conn] = []
        self._generation = 0  # bumped by close(): a connection lent before it is closed on return
        self._lent: dict[int, int] = {}  # id of a lent connection: the generation it was lent in

    def _take(self) -> Conn | None:
        """An idle connection that can be lent, or None (connections that cannot are closed)."""
        while True:
            with self._lock:
                if not self._idle:
                    return None
                conn = self._idle.pop()
            if _reusable(conn):
                return conn
            _close(conn)

    def _lend(self, conn: Conn) -> Conn:
        with self._lock:
            self._lent[id(conn)] = self._generation
        return conn

    def put(self, conn: Conn) -> None:
        """Give back a connection that `get` lent (never waits, so a cancelled operation still
        gives its connection back)."""
        try:
            self._give_back(conn)
        finally:
            self._slots.release()

    def _give_back(self, conn: Conn) -> None:
        with self._lock:
            keep = self._lent.pop(id(conn), None) == self._generation and len(self._idle) < self.max_size
            keep = keep and not conn.closed and conn.pgconn.transaction_status == TransactionStatus.IDLE
            if keep:
                self._idle.append(conn)
        if not keep:
            _close(conn)

    def _timed_out(self) -> StoreError:
        return StoreError(
            f"PostgreSQL server at {self.server}: no connection free after {self.timeout:g} s "
            f"({self.max_size} lent, the store's max_size); raise max_size or timeout"
        )

    def close(self) -> None:
        """Close the idle connections; those lent now are closed when they come back."""
        with self._lock:
            idle, self._idle = self._idle, []
            self._generation += 1
        for conn in idle:
            _close(conn)


class Connections(_Idle[psycopg.Connection[Any]], Lender):
    """Sync connections, made by `connect`."""

    def __init__(self, connect: Callable[[], psycopg.Connection[Any]], server: str, max_size: int, timeout: float) -> None:
        super().__init__(server, max_size, timeout)
        self._connect = connect
        self._slots: threading.BoundedSemaphore = threading.BoundedSemaphore(max_size)

    def get(self) -> psycopg.Connection[Any]:
        """A connection for one operation; give it back with `put`."""
        if not self._slots.acquire(timeout=self.timeout):
            raise self._timed_out()
        try:
            return self._lend(self._take() or self._connect())
        except BaseException:
            self._slots.release()
            raise


class AsyncConnections(_Idle[psycopg.AsyncConnection[Any]]):
    """Async connections of one event loop, made by `connect`."""

    def __init__(
        self, connect: Callable[[], Coroutine[Any, Any, psycopg.AsyncConnection[Any]]], server: str, max_size: int, timeout: float
    ) -> None:
        super().__init__(server, max_size, timeout)
        self._connect = connect
        self._slots: asyncio.Semaphore = asyncio.Semaphore(max_size)

    async def get(self) -> psycopg.AsyncConnection[Any]:
        """A connection for one operation; give it back with `put`."""
        if self._slots.locked():
            try:
                await asyncio.wait_for(self._slots.acquire(), self.timeout)
            except asyncio.TimeoutError:
                raise self._timed_out() from None
        else:
            await self._slots.acquire()
        try:
            return self._lend(self._take() or await self._connect())
        except BaseException:
            self._slots.release()
            raise

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        conn = await self.get()
        try:
            yield conn
        finally:
            self.put(conn)

    async def aclose(self) -> None:
        """`close`, as `PerLoop` calls it at the loop's shutdown."""
        self.close()
