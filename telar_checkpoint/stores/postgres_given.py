"""Connections and pools the application gives a `PostgresStore`, lent to its operations as
`Connections` lends the store's own (`stores.postgres_connections`).

The store takes what LangGraph's PostgresSaver takes: a psycopg ``Connection`` or a psycopg_pool
``ConnectionPool`` serves its sync methods, an ``AsyncConnection`` or an ``AsyncConnectionPool``
its async ones; the methods of the other side refuse (`NoAsyncDriverError`, `NoSyncDriverError`),
changing nothing. psycopg_pool is not our dependency: a pool given was made with it, so it is
imported, and its classes are looked up in `sys.modules`. The store never closes what it was
given: its `close` leaves the pool or connection open, the application's to close. A connection
serves one operation at a time (a lock, waited for up to the store's `timeout`); a pool lends one
per operation (``getconn(timeout)``, ``putconn``). A given async object serves the event loop it is
used on (no `PerLoop`: it is not ours to reopen in each loop).

While an operation holds a connection, it runs as on the store's own: in autocommit, and with rows
as tuples (through a cursor of its own: a pool set up for PostgresSaver gives `dict_row`s). A
connection the application keeps out of autocommit is switched to autocommit for the operation
and back after it; psycopg makes that switch without a round trip, where a COMMIT after each
operation would cost two (BEGIN, COMMIT). So nothing is left in a transaction, and each write
acknowledged is committed. A connection the store cannot use is refused with
`UnusableConnectionError` when an operation takes it, doing nothing: closed, in pipeline mode,
inside a transaction of the application's own, or inherited by a forked child (its socket is the
parent's).
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, Any, Protocol

import psycopg
from psycopg import pq
from psycopg.conninfo import make_conninfo

from telar_checkpoint import forks
from telar_checkpoint.errors import ArgumentTypeError, NoAsyncDriverError, NoSyncDriverError, StoreError, UnusableConnectionError
from telar_checkpoint.stores.postgres_connections import Lender, server_name

if TYPE_CHECKING:
    from typing import TypeAlias

    from psycopg_pool import AsyncConnectionPool, ConnectionPool

    Pool: TypeAlias = ConnectionPool[Any] | AsyncConnectionPool[Any]
else:

    class Pool(Protocol):
        """A psycopg_pool ConnectionPool or AsyncConnectionPool, as annotations read at run time see it
        (psycopg_pool is not our dependency: `adopt` finds its classes in `sys.modules`)."""

        def getconn(self, timeout: float | None = None) -> Any: ...

        def putconn(self, conn: Any) -> Any: ...

AnyConnection = psycopg.Connection[Any] | psycopg.AsyncConnection[Any]

WHAT_TO_PASS = (
    "a conninfo string (a postgresql:// URL or key=value pairs), a psycopg Connection or AsyncConnection, "
    "or a psycopg_pool ConnectionPool or AsyncConnectionPool"
)
_CONNINFO_KEYS = frozenset(option.keyword.decode() for option in pq.Conninfo.get_defaults())


class Given:
    """What the application gave the store: its lender for one side, a refusal for the other."""

    def __init__(self, what: str, conninfo: str, server: str, sync: Lender, async_: AsyncGivenConnection | AsyncGivenPool | None) -> None:
        self.what, self.conninfo, self.server = what, conninfo, server
        self.sync, self._async = sync, async_

    def async_lender(self) -> AsyncGivenConnection | AsyncGivenPool:
        if self._async is None:
            raise NoAsyncDriverError(
                f"PostgresStore was given {self.what}, which serves only its sync methods: for async calls "
                "(ainvoke, astream) give it a psycopg AsyncConnection or a psycopg_pool AsyncConnectionPool, "
                "or a conninfo string (which serves both); nothing was done"
            )
        return self._async


def adopt(given: object, timeout: float) -> Given:
    """The store's lenders for `given`, or our refusal of it (ArgumentTypeError for another type)."""
    if isinstance(given, (psycopg.Pipeline, psycopg.AsyncPipeline)):
        raise UnusableConnectionError(
            "PostgresStore cannot work through a psycopg Pipeline (its statements wait for their results): "
            "give it the connection itself, used outside its pipeline() block, a pool, or a conninfo string"
        )
    if isinstance(given, (psycopg.Connection, psycopg.AsyncConnection)):
        kind = type(given).__name__
        if given.closed:
            raise UnusableConnectionError(
                f"the psycopg {kind} given to PostgresStore is closed: give it an open one, a pool, or a conninfo string"
            )
        info = given.info
        server = f"{info.host}:{info.port}"
        what = f"the psycopg {kind} to {server}/{info.dbname}"
        if isinstance(given, psycopg.Connection):
            return Given(what, info.dsn, server, GivenConnection(given, what, server, timeout), None)
        return Given(what, info.dsn, server, NoSync(what), AsyncGivenConnection(given, what, server, timeout))
    pools = sys.modules.get("psycopg_pool")
    if pools is not None and isinstance(given, (pools.ConnectionPool, pools.AsyncConnectionPool)):
        conninfo = given.conninfo if isinstance(given.conninfo, str) else ""  # (or a function, called at each connect)
        kwargs = given.kwargs if isinstance(given.kwargs, dict) else {}
        params = {key: value for key, value in kwargs.items() if key in _CONNINFO_KEYS}
        conninfo = make_conninfo(conninfo, **params) if params else conninfo
        server = server_name(conninfo)
        what = f"the psycopg_pool {type(given).__name__} {given.name!r} ({server})"
        if isinstance(given, pools.ConnectionPool):
            return Given(what, conninfo, server, GivenPool(given, what, server, timeout), None)
        return Given(what, conninfo, server, NoSync(what), AsyncGivenPool(given, what, server, timeout))
    raise ArgumentTypeError(f"PostgresStore: conninfo must be {WHAT_TO_PASS}, not {type(given).__name__}")


# What every lender checks, sync and async

def _check_process(pid: int, what: str) -> None:
    if pid != forks.pid:
        raise UnusableConnectionError(
            f"{what} was given to the store in process {pid} and is used in its forked child {forks.pid}: "
            "its sockets are the parent's (using one from here would break the parent's); open a connection "
            "or a pool in the child, or give the store a conninfo string (it connects afresh in a child)"
        )


def _check_usable(conn: AnyConnection, what: str) -> None:
    """Refuse a connection the store cannot use now (nothing was sent on it)."""
    if conn.closed:
        raise UnusableConnectionError(
            f"{what} is closed (by the application, or its server ended it): the store never reopens a "
            "connection it was given; give it an open one, a pool, or a conninfo string"
        )
    if conn.pgconn.pipeline_status != pq.PipelineStatus.OFF:
        raise UnusableConnectionError(
            f"{what} is in pipeline mode (inside a pipeline() block): use the store outside it, "
            "or give it a pool or a conninfo string; nothing was done"
        )
    status = pq.TransactionStatus(conn.pgconn.transaction_status)
    if status != pq.TransactionStatus.IDLE:
        raise UnusableConnectionError(
            f"{what} is inside a transaction of the application's own (status {status.name}): commit or roll "
            "it back before the store uses the connection (the store commits its own work, and would commit "
            "yours with it), or give the store a pool or a conninfo string; nothing was done"
        )


def _busy(server: str, what: str, timeout: float) -> StoreError:
    return StoreError(
        f"PostgreSQL server at {server}: {what} stayed busy with the store's other operations for {timeout:g} s "
        "(one connection serves one at a time); give the store a pool, or raise its timeout"
    )


def _pool_error(exc: Exception, errors: Any, server: str, what: str, timeout: float) -> Exception:
    """A psycopg_pool refusal to lend, in our words."""
    if isinstance(exc, errors.PoolClosed):
        return UnusableConnectionError(
            f"{what} cannot lend a connection ({exc}): the store never opens nor closes a pool it was "
            "given; open it (pool.open(), or `with ConnectionPool(...)`) before the store is used, "
            "and close it after"
        )
    return StoreError(
        f"PostgreSQL server at {server}: {what} had no connection free for {timeout:g} s ({exc}); "
        "raise the pool's max_size or the store's timeout"
    )


_OPEN = (pq.TransactionStatus.INTRANS, pq.TransactionStatus.INERROR)


def _enter(conn: psycopg.Connection[Any], what: str) -> bool:
    """Check `conn` and put it in autocommit; whether it was not (to set back by `_leave`)."""
    _check_usable(conn, what)
    if conn.autocommit:
        return False
    conn.autocommit = True  # (psycopg sends nothing: it only stops sending BEGIN)
    return True


def _leave(conn: psycopg.Connection[Any], switched: bool) -> None:
    """Give the application back `conn` as it gave it: outside any transaction (ours end by
    themselves: this rolls back only after an interrupted one), in its own autocommit mode."""
    try:
        if conn.closed:
            return
        if conn.pgconn.transaction_status in _OPEN:
            conn.rollback()
        if switched:
            conn.autocommit = False
    except psycopg.Error:  # its server ended it: nothing to give back
        pass


async def _aenter(conn: psycopg.AsyncConnection[Any], what: str) -> bool:
    _check_usable(conn, what)
    if conn.autocommit:
        return False
    await conn.set_autocommit(True)
    return True


async def _aleave(conn: psycopg.AsyncConnection[Any], switched: bool) -> None:
    try:
        if conn.closed:
            return
        if conn.pgconn.transaction_status in _OPEN:
            await conn.rollback()
        if switched:
            await conn.set_autocommit(False)
    except psycopg.Error:
        pass


class GivenConnection(Lender):
    """The application's sync connection, lent to one operation at a time."""

    def __init__(self, conn: psycopg.Connection[Any], what: str, server: str, timeout: float) -> None:
        self._conn, self.what, self.server, self.timeout = conn, what, server, timeout
        self._lock = threading.Lock()
        self._pid = forks.pid
        self._switched = False

    def get(self) -> psycopg.Connection[Any]:
        _check_process(self._pid, self.what)
        if not self._lock.acquire(timeout=self.timeout):
            raise _busy(self.server, self.what, self.timeout)
        try:
            self._switched = _enter(self._conn, self.what)
        except BaseException:
            self._lock.release()
            raise
        return self._conn

    def put(self, conn: psycopg.Connection[Any]) -> None:
        try:
            _leave(conn, self._switched)
        finally:
            self._lock.release()

    def close(self) -> None:
        """Nothing: the connection is the application's to close."""


class GivenPool(Lender):
    """The application's psycopg_pool ``ConnectionPool``: a connection of it for each operation."""

    def __init__(self, pool: ConnectionPool[Any], what: str, server: str, timeout: float) -> None:
        self._pool, self.what, self.server, self.timeout = pool, what, server, timeout
        self._errors = sys.modules["psycopg_pool"]
        self._pid = forks.pid
        self._switched: set[int] = set()  # ids of the lent connections put in autocommit by `_enter`

    def get(self) -> psycopg.Connection[Any]:
        _check_process(self._pid, self.what)
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                conn = self._pool.getconn(timeout=max(0.0, deadline - time.monotonic()))
            except (self._errors.PoolClosed, self._errors.PoolTimeout) as exc:
                raise _pool_error(exc, self._errors, self.server, self.what, self.timeout) from exc
            if not conn.closed:
                break
            self._pool.putconn(conn)  # one its server ended: the pool replaces it
        try:
            if _enter(conn, self.what):
                self._switched.add(id(conn))
        except BaseException:
            self._pool.putconn(conn)
            raise
        return conn

    def put(self, conn: psycopg.Connection[Any]) -> None:
        try:
            _leave(conn, id(conn) in self._switched)
            self._switched.discard(id(conn))
        finally:
            self._pool.putconn(conn)

    def close(self) -> None:
        """Nothing: the pool is the application's to close."""


class NoSync(Lender):
    """The sync side of a store given only an async connection or pool: each use refuses."""

    def __init__(self, what: str) -> None:
        self.what = what

    def get(self) -> psycopg.Connection[Any]:
        raise NoSyncDriverError(
            f"PostgresStore was given {self.what}, which serves only its async methods: for sync calls "
            "(invoke, stream) give it a psycopg Connection or a psycopg_pool ConnectionPool, or a conninfo "
            "string (which serves both); nothing was done"
        )

    def put(self, conn: psycopg.Connection[Any]) -> None:
        """(Never called: `get` lends nothing.)"""

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        yield self.get()  # (raises)

    def close(self) -> None:
        """Nothing: the connection or pool is the application's to close."""


class _AsyncGiven:
    """What the async lenders of a given connection or pool share: `connection` on their `get` and
    `put` (both awaited; `AsyncConnections.put` is not, so it has its own)."""

    async def get(self) -> psycopg.AsyncConnection[Any]:
        raise NotImplementedError

    async def put(self, conn: psycopg.AsyncConnection[Any]) -> None:
        raise NotImplementedError

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """`get`, and `put` at the end of the block."""
        conn = await self.get()
        try:
            yield conn
        finally:
            await self.put(conn)


class AsyncGivenConnection(_AsyncGiven):
    """The application's async connection, lent to one operation at a time, in the event loop
    that uses it (another loop running at once is refused: psycopg's async connection, and our
    lock, belong to one loop)."""

    def __init__(self, conn: psycopg.AsyncConnection[Any], what: str, server: str, timeout: float) -> None:
        self._conn, self.what, self.server, self.timeout = conn, what, server, timeout
        self._pid = forks.pid
        self._guard = threading.Lock()  # for `_loop` and `_lock`
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = asyncio.Lock()  # one operation at a time, in `_loop`
        self._held = self._lock  # the lock the operation under way took (`put` releases it)
        self._switched = False

    def _lock_of(self, loop: asyncio.AbstractEventLoop) -> asyncio.Lock:
        with self._guard:
            if loop is not self._loop:
                if self._loop is not None and self._loop.is_running():
                    raise UnusableConnectionError(
                        f"{self.what} is used by the store in another event loop, running now (in another "
                        "thread): an AsyncConnection serves one loop; give each loop its own, or a conninfo string"
                    )
                self._loop, self._lock = loop, asyncio.Lock()
            return self._lock

    async def get(self) -> psycopg.AsyncConnection[Any]:
        _check_process(self._pid, self.what)
        lock = self._lock_of(asyncio.get_running_loop())
        if lock.locked():
            try:
                await asyncio.wait_for(lock.acquire(), self.timeout)
            except asyncio.TimeoutError:
                raise _busy(self.server, self.what, self.timeout) from None
        else:
            await lock.acquire()
        try:
            self._switched = await _aenter(self._conn, self.what)
        except BaseException:
            lock.release()
            raise
        self._held = lock
        return self._conn

    async def put(self, conn: psycopg.AsyncConnection[Any]) -> None:
        try:
            await _aleave(conn, self._switched)
        finally:
            self._held.release()

    def close(self) -> None:
        """Nothing: the connection is the application's to close."""


class AsyncGivenPool(_AsyncGiven):
    """The application's psycopg_pool ``AsyncConnectionPool``: a connection of it for each operation."""

    def __init__(self, pool: AsyncConnectionPool[Any], what: str, server: str, timeout: float) -> None:
        self._pool, self.what, self.server, self.timeout = pool, what, server, timeout
        self._errors = sys.modules["psycopg_pool"]
        self._pid = forks.pid
        self._switched: set[int] = set()

    async def get(self) -> psycopg.AsyncConnection[Any]:
        _check_process(self._pid, self.what)
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                conn = await self._pool.getconn(timeout=max(0.0, deadline - time.monotonic()))
            except (self._errors.PoolClosed, self._errors.PoolTimeout) as exc:
                raise _pool_error(exc, self._errors, self.server, self.what, self.timeout) from exc
            if not conn.closed:
                break
            await self._pool.putconn(conn)
        try:
            if await _aenter(conn, self.what):
                self._switched.add(id(conn))
        except BaseException:
            await self._pool.putconn(conn)
            raise
        return conn

    async def put(self, conn: psycopg.AsyncConnection[Any]) -> None:
        try:
            await _aleave(conn, id(conn) in self._switched)
            self._switched.discard(id(conn))
        finally:
            await self._pool.putconn(conn)

    def close(self) -> None:
        """Nothing: the pool is the application's to close."""
