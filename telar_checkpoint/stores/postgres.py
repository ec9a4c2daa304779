"""`PostgresStore`: each thread as ordered chunks in a PostgreSQL table, through psycopg 3.

Sync methods lend connections from one `Connections`; async methods from the
running event loop's `AsyncConnections`, made on the loop's first use and
closed when the loop shuts down, so they never block a loop nor hang its
shutdown, whether or not the store is closed (see `stores.postgres_connections`
and `stores.event_loops`). A connection the server dropped is replaced before
it is lent, so the first call after a restart, failover or idle timeout
connects afresh and succeeds; a call whose connection dropped under it fails
with `StoreError`, and the next one succeeds.

Keys are stored as the UTF-8 bytes of the thread id (``bytea``, so NUL and any
other character round-trip); values are ``text``, which cannot hold NUL or
lone surrogates: such a value is refused with `StoreError`, never altered.
A thread has one small row in ``{prefix}threads`` (its key and version, drawn
from the sequence ``{prefix}versions`` on every write, so a version is never
reused) and its value is the concatenation, in ``seq`` order, of its rows in
``{prefix}chunks`` (``seq`` is the version that wrote the chunk). Appending
bumps the version and inserts one chunk, in one statement that does nothing
when the version moved: the history is never rewritten (nor left behind as a
dead row) for an append. An update upserts and so locks the thread row (a new
key is locked too), and appends a chunk, or replaces the chunks by one (which
also compacts a value of many chunks). A store of schema 1 (one row per
thread) or 2 (no index) is migrated when first opened.

The index (see `Store.index`) is ``{prefix}terms``, a row per term and key; a
term recorded commits before the write it describes, so a durable write never
has its terms lost. Deleting a thread deletes its terms in the same transaction.
``{prefix}meta`` holds ``index = ready`` once the index covers every thread.
Keys are listed in the order of their bytes, which is code point order, but for
keys of more than `LONG_KEY` bytes, which sort by their hash.

Expiries (see `Store.expire_at`) are ``{prefix}expiry``, a row per key read in the order
of its index on ``(expires_at, key)``, and leases ``{prefix}leases``, a row per
lease with its holder and end, taken or renewed by one upsert whose update runs
only when the lease is lapsed or the holder's. A store opened without `create`
makes them, when missing, on its first expiry or lease. Deleting a thread
deletes its expiry in the same transaction.

The store may instead be given the application's own psycopg connection or psycopg_pool pool
(what LangGraph's PostgresSaver takes): see `stores.postgres_given`. It serves the store's sync
methods or its async ones, and the store never closes it.

Each operation is written once as a generator of ``(query, params)`` steps
that receives each step's rows; a sync and an async driver run it
(`stores.postgres_connections`). The
operations of one statement (`read`, `version`, `append_if`) skip the
generator and run their statement, pre-rendered to bytes, on a lent
connection directly.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Collection, Hashable, Iterator
from contextlib import AbstractContextManager, nullcontext
from typing import Any, TypeVar

try:
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict
    from psycopg.rows import tuple_row
except ImportError as exc:  # pragma: no cover - exercised by simulating a missing driver
    raise ImportError(f"{exc}: PostgresStore needs psycopg; pip install 'telar-checkpoint[postgres]'") from exc

from telar_checkpoint import forks
from telar_checkpoint._arguments import check
from telar_checkpoint.errors import NoAsyncDriverError, NoStoreError, StoreError, UsageError
from telar_checkpoint.stores.base import ABSENT, Change, Store
from telar_checkpoint.stores.common import check_schema, decode_key, decoded_keys, driver_error, driver_errors, encode, extension
from telar_checkpoint.stores.event_loops import INHERITED, PerLoop
from telar_checkpoint.stores.postgres_connections import (
    AsyncConnections,
    AsyncLender,
    Connections,
    Lender,
    Rows,
    SqlSteps,
    adrive,
    drive,
    server_name,
)
from telar_checkpoint.stores.postgres_given import Given, Pool, adopt

__all__ = ["PostgresStore", "server_name"]

AsyncLent = TypeVar("AsyncLent", bound=AsyncLender)

SCHEMA_VERSION = 3
"""The layout of our tables; 1 and 2 are migrated, a database recording a newer one is refused
(3 added the index, which a release without it would leave behind when it writes)."""


LONG_KEY = 1024  # bytes; a longer key is indexed by its hash (b"\xff" + sha256, never UTF-8)


def _key(key: str) -> bytes:
    raw = encode(key)
    return raw if len(raw) <= LONG_KEY else b"\xff" + hashlib.sha256(raw).digest()


def _full_key(key: str) -> bytes | None:
    """The key itself when the row is indexed by its hash (btree entries are limited in size)."""
    raw = encode(key)
    return raw if len(raw) > LONG_KEY else None


def _storable(text: str, key: str) -> str:
    """`text` itself, or StoreError when a PostgreSQL text value cannot hold it exactly."""
    if "\x00" in text:
        raise StoreError(f"thread {key!r}: PostgreSQL text cannot hold a NUL character; nothing was written")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise StoreError(f"thread {key!r}: PostgreSQL text cannot hold a lone surrogate; nothing was written") from exc
    return text


class PostgresStore(Store):
    """Histories as rows of ``{table_prefix}histories`` in `schema` (created if needed)."""

    kind = "postgres"
    # Versions: drawn from the sequence ``{prefix}versions``; the index: ``{prefix}terms``;
    # expiries and leases: ``{prefix}expiry`` and ``{prefix}leases``.
    keeps_versions = keeps_index = True

    def __init__(
        self,
        conninfo: str | psycopg.Connection[Any] | psycopg.AsyncConnection[Any] | Pool,
        *,
        schema: str | None = None,
        table_prefix: str = "telar_",
        max_size: int = 8,
        timeout: float = 30.0,
        connect_timeout: float = 5.0,
        create: bool = True,
        share_database: bool = False,
        **connect_kwargs: Any,
    ) -> None:
        """`conninfo`: a libpq URL or key=value string, or the application's own connection or pool
        (a psycopg ``Connection`` or psycopg_pool ``ConnectionPool`` for the sync methods, an
        ``AsyncConnection`` or ``AsyncConnectionPool`` for the async ones; never closed by the store:
        see `stores.postgres_given`); `max_size`: connections lent at once (sync, and per event loop;
        a pool given lends its own); `timeout`: seconds to wait for one; `connect_timeout`: seconds to
        wait for the server; `connect_kwargs` go to `psycopg.connect` (``application_name=...``, say);
        `create`: False opens only tables that already exist, creating nothing (NoStoreError
        otherwise, naming another tool's tables); `share_database`: add our tables beside a LangGraph
        PostgresSaver's (else, when the schema holds its tables and none of ours, the first operation
        raises ForeignStoreError, creating nothing)."""
        check(PostgresStore.__init__, {k: v for k, v in locals().items() if k not in ("connect_kwargs", "conninfo")})
        self.create = create
        self.share_database = share_database
        self.schema = schema
        self._given: Given | None = None
        if isinstance(conninfo, str):
            self.conninfo = conninfo
            try:
                self.server = server_name(conninfo, **connect_kwargs)
            except psycopg.ProgrammingError as exc:
                raise UsageError(f"not a PostgreSQL connection string: {exc}") from exc
        else:
            self._given = adopt(conninfo, timeout)
            options = sorted(connect_kwargs) + [name for name, value, default in
                                                (("max_size", max_size, 8), ("connect_timeout", connect_timeout, 5.0)) if value != default]
            if options:
                raise UsageError(
                    f"PostgresStore was given {self._given.what}: it connects nothing itself, so it takes no "
                    f"connection options ({', '.join(options)}); set them where the application connects"
                )
            self.conninfo, self.server = self._given.conninfo, self._given.server
        self._where = f"PostgreSQL server at {self.server}"
        self._kwargs = {"connect_timeout": max(2, round(connect_timeout)), **connect_kwargs, "autocommit": True}
        self._limits = (max_size, timeout)
        self._sql = _Queries(schema, table_prefix)
        self._ready = False
        self._expiring = False  # the expiry and lease tables are known to be there
        self._lock = threading.Lock()
        self._pid = forks.pid
        self._hot: dict[str, bytes] | None = None
        self._connections: Lender = Connections(self._connect, self.server, *self._limits) if self._given is None else self._given.sync
        self._async_connections: PerLoop[AsyncConnections] = PerLoop(  # (unused when given a connection or pool)
            self._new_async_connections, AsyncConnections.aclose, AsyncConnections.close
        )

    def _connect(self) -> psycopg.Connection[Any]:
        return psycopg.connect(self.conninfo, **self._kwargs)

    async def _aconnect(self) -> psycopg.AsyncConnection[Any]:
        return await psycopg.AsyncConnection.connect(self.conninfo, **self._kwargs)

    def _new_async_connections(self) -> AsyncConnections:
        given = self._kwargs.get("cursor_factory")
        if given is not None and not issubclass(given, psycopg.AsyncCursor):
            raise NoAsyncDriverError(
                f"PostgresStore was given cursor_factory={given.__module__}.{given.__qualname__}, a sync cursor, "
                "which its async methods cannot use: use the sync methods, or give it no cursor_factory"
            )
        return AsyncConnections(self._aconnect, self.server, *self._limits)

    def _check_pid(self) -> None:
        """In a forked child, start afresh: the parent's connections are its own (closing one
        from here would end it for the parent), so they are kept, never used nor closed. (A connection
        or pool the application gave is the parent's too: its lender refuses it in a child.)"""
        if self._pid == forks.pid:
            return
        if self._given is None:
            INHERITED.append(self._connections)
            self._async_connections.forget()
            self._connections = Connections(self._connect, self.server, *self._limits)
        self._pid, self._lock = forks.pid, threading.Lock()

    # Operations, each written once as steps

    def _setup_steps(self) -> SqlSteps:
        fresh = False
        if self.create:
            yield self._sql.advisory_lock, (self._sql.lock_name,)
            if not self.share_database:
                yield from self._refuse_foreign_steps()
            rows = yield self._sql.terms_exist, ()
            fresh = not rows[0][0]
            for statement in self._sql.setup:
                yield statement, ()
            rows = yield self._sql.v1_table, ()
            yield (self._sql.record_v1 if rows[0][0] else self._sql.record_version), ()
        else:
            yield from self._existing_steps()
        rows = yield self._sql.version, ()
        version = int(rows[0][0])
        check_schema(self._where, version, SCHEMA_VERSION)
        if self.create and version < SCHEMA_VERSION:  # 1: one row per thread in {prefix}histories; 2: no index
            for statement in (self._sql.migrate_v1 if version == 1 else []) + [self._sql.to_current]:
                yield statement, ()
        self._expiring = self._expiring or self.create
        if fresh:
            rows = yield self._sql.any_thread, ()
            if not rows[0][0]:  # a new store: nothing to index
                yield self._sql.set_index_ready, ()
        return SCHEMA_VERSION

    def _refuse_foreign_steps(self) -> SqlSteps:
        """Refuse a schema holding a LangGraph PostgresSaver's tables and none of ours (see `stores.foreign`)."""
        rows = yield self._sql.foreign_probe, ()
        if rows[0][0] or not rows[0][1]:  # ours are there, or LangGraph's are not
            return
        from telar_checkpoint.stores.foreign import THREADS_COUNTED, masked, refusal

        rows = yield self._sql.foreign_threads, (THREADS_COUNTED + 1,)
        threads = int(rows[0][0])
        dbname = conninfo_to_dict(self.conninfo).get("dbname")
        where = f"PostgreSQL database {f'{dbname} ' if dbname else ''}at {self.server}" + (f", schema {self.schema}" if self.schema else "")
        url = self.conninfo if "://" in self.conninfo else "postgresql://..."
        if self.schema:
            url += f"{'&' if '?' in url else '?'}options=-c%20search_path%3D{self.schema}"
        raise refusal(
            where, "PostgresSaver", min(threads, THREADS_COUNTED), threads <= THREADS_COUNTED,
            source=masked("langgraph+" + url), target=masked(url),
        )

    def _existing_steps(self) -> SqlSteps:
        """Without `create`: check that our tables are there (of schema 2), changing nothing."""
        from telar_checkpoint.stores.foreign import masked, not_ours

        rows = yield self._sql.meta_exists, ()
        if not rows[0][0]:
            tables = yield self._sql.tables, (self.schema,)
            where = f"PostgreSQL database at {self.server}" + (f", schema {self.schema}" if self.schema else "")
            url = "langgraph+" + self.conninfo if "://" in self.conninfo else "langgraph+postgresql://..."
            raise not_ours(where, [row[0] for row in tables], postgres=True, langgraph_url=masked(url))
        rows = yield self._sql.v1_table, ()
        if rows[0][0]:
            raise NoStoreError(f"{self._where}: a store of schema 1; open it once with TelarSaver to upgrade it")

    def _update_steps(self, key: str, change: Change) -> SqlSteps:
        """Runs in a transaction: the upsert locks the thread row (version 0: a placeholder, never committed)."""
        raw_key = _key(key)
        rows = yield self._sql.lock_thread, (raw_key, _full_key(key))
        version: int | None = rows[0][0] or None
        old, chunks = None, 0
        if version is not None:
            rows = yield self._sql.read, (raw_key,)
            old, chunks = "".join(row[0] for row in rows), len(rows)
        new = change(old)
        if new is None:
            yield self._sql.delete_chunks, (raw_key,)
            yield self._sql.delete_thread, (raw_key,)
            yield self._sql.drop_terms, (raw_key,)
            if (yield from self._has_expiry_steps()):
                yield self._sql.drop_expiry, (raw_key,)
            return None, None
        if new == old:
            return new, version
        suffix = extension(old, new, chunks)
        stored = _storable(new if suffix is None else suffix, key)
        if suffix is None and old is not None:
            yield self._sql.delete_chunks, (raw_key,)
        rows = yield self._sql.bump_and_insert, (raw_key, stored)
        return new, rows[0][0]

    def _delete_steps(self, key: str) -> SqlSteps:
        """Runs in a transaction: lock the thread row as an update does (the upsert also waits for
        an update creating the thread, whose row a plain DELETE would not see), then delete its
        chunks and its row. Deleting the row first left, when an update creating the thread
        committed between the two statements, a row without chunks (RELIABILITY.md bug 11)."""
        raw_key = _key(key)
        yield self._sql.lock_thread, (raw_key, _full_key(key))
        yield self._sql.delete_chunks, (raw_key,)
        yield self._sql.delete_thread, (raw_key,)
        yield self._sql.drop_terms, (raw_key,)
        if (yield from self._has_expiry_steps()):
            yield self._sql.drop_expiry, (raw_key,)

    def _index_steps(self, key: str, terms: Collection[str], add: bool) -> SqlSteps:
        raw_key, raw_terms = _key(key), [encode(term) for term in terms]
        yield (self._sql.add_terms, (raw_terms, raw_key, _full_key(key))) if add else (self._sql.drop_some_terms, (raw_key, raw_terms))

    def _indexed_steps(self, term: str, start: str | None, limit: int | None) -> SqlSteps:
        rows = yield self._sql.indexed, (encode(term), b"" if start is None else _bound(start), limit)
        return decoded_keys([bytes(row[0]) for row in rows])

    def _index_ready_steps(self) -> SqlSteps:
        rows = yield self._sql.index_ready, ()
        return bool(rows)

    def _set_index_ready_steps(self) -> SqlSteps:
        yield self._sql.set_index_ready, ()

    def _sorted_keys_steps(self, after: str | None, limit: int | None) -> SqlSteps:
        if after is None:
            rows = yield self._sql.first_keys, (limit,)
        else:
            rows = yield self._sql.keys_after, (_key(after), limit)
        return decoded_keys([bytes(row[0]) for row in rows])

    def _has_expiry_steps(self) -> SqlSteps:
        """Whether the expiry and lease tables are there (a store opened without `create`, on
        tables older code made, may have none until its first expiry or lease is recorded)."""
        if not self._expiring:
            rows = yield self._sql.expiry_exists, ()
            self._expiring = bool(rows[0][0])
        return self._expiring

    def _expiry_write_steps(self, name: str, params: tuple[Any, ...]) -> SqlSteps:
        """Runs statement `name`, in a transaction that first makes the expiry and lease tables
        when they are not there (under the setup's lock)."""
        if not self._expiring:
            yield self._sql.advisory_lock, (self._sql.lock_name,)
            for statement in self._sql.expiry_setup:
                yield statement, ()
        return (yield getattr(self._sql, name), params)

    def _expiry_read_steps(self, name: str, params: tuple[Any, ...]) -> SqlSteps:
        """The rows of statement `name` (none when the tables are not there)."""
        if not (yield from self._has_expiry_steps()):
            return []
        return (yield getattr(self._sql, name), params)

    def _set_expiry_args(self, key: str, when: float | None) -> tuple[str, tuple[Any, ...]]:
        if when is None:
            return "drop_expiry", (_key(key),)
        return "set_expiry", (_key(key), when, _full_key(key))

    def _lease_args(self, name: str, holder: str, now: float, seconds: float) -> tuple[Any, ...]:
        return encode(name), encode(holder), now + seconds, now

    def _keys_steps(self) -> SqlSteps:
        rows = yield self._sql.keys, ()
        return [bytes(row[0]) for row in rows]

    def _version_steps(self) -> SqlSteps:
        rows = yield self._sql.version, ()
        return int(rows[0][0])

    # The sync driver

    def _errors(self) -> AbstractContextManager[None]:
        return driver_errors(self._where, psycopg.Error)

    def _lender(self) -> Lender:
        """The sync connections, once the tables are set up (in this process)."""
        if self._pid != forks.pid:
            self._check_pid()
        if not self._ready:
            with self._lock:
                if not self._ready:
                    with self._connections.connection() as conn, conn.transaction():
                        drive(self._setup_steps(), conn)
                    self._ready = True
        return self._connections

    def _run(self, steps: SqlSteps, *, transaction: bool = False) -> Any:
        with self._errors(), self._lender().connection() as conn, conn.transaction() if transaction else nullcontext():
            return drive(steps, conn)

    def _one(self, name: str, params: tuple[Any, ...]) -> Rows:
        """The rows of one statement of `_Queries.hot`, run in autocommit: the path of the
        frequent operations, without the steps driver or context managers."""
        try:
            lender = self._connections if self._ready and self._pid == forks.pid else self._lender()
            conn = lender.get()
            try:
                # Each hot statement returns rows (SELECT, or INSERT ... RETURNING). A cursor of our own row
                # factory, as fast as conn.execute: a connection given may make dicts (a pool for PostgresSaver).
                cursor = conn.cursor(row_factory=tuple_row)
                return cursor.execute(self._hot[name] if self._hot is not None else self._render(conn)[name], params).fetchall()
            finally:
                lender.put(conn)
        except psycopg.Error as exc:
            raise driver_error(self._where, exc) from exc

    def _render(self, conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> dict[str, bytes]:
        """The hot statements as bytes, rendered once (quoting names as `conn` does)."""
        self._hot = {name: query.as_bytes(conn) for name, query in self._sql.hot.items()}
        return self._hot

    def setup(self) -> None:
        """Create the tables now, as the first operation would (with `create=False`, check that they
        are there); a server that cannot be reached is a StoreError naming it."""
        with self._errors():
            self._lender()

    def close(self) -> None:
        """Close the idle connections (sync, and those of event loops that ended); the store
        stays usable and connects again when next used. A connection or pool the application
        gave is left open (the application closes it)."""
        self._connections.close()
        self._async_connections.close()

    # The async driver

    async def _async_lender(self) -> AsyncLender:
        """The running loop's connections, or the async connection or pool given, once the tables are set up."""
        return await self._own_async_lender() if self._given is None else await self._set_up(self._given.async_lender())

    async def _own_async_lender(self) -> AsyncConnections:
        """The running loop's connections (of a store given no connection or pool), once the tables are set up."""
        if self._pid != forks.pid:
            self._check_pid()
        return await self._set_up(await self._async_connections.get())

    async def _set_up(self, lender: AsyncLent) -> AsyncLent:
        if not self._ready:
            async with lender.connection() as conn, conn.transaction():
                await adrive(self._setup_steps(), conn)
            self._ready = True
        return lender

    async def _arun(self, steps: SqlSteps, *, transaction: bool = False) -> Any:
        with self._errors():
            async with (await self._async_lender()).connection() as conn:
                if not transaction:
                    return await adrive(steps, conn)
                async with conn.transaction():
                    return await adrive(steps, conn)

    async def _aone(self, name: str, params: tuple[Any, ...]) -> Rows:
        """`_one`, on the running loop's connections."""
        if self._given is not None:
            return await self._aone_given(name, params)
        try:
            lender = self._async_connections.current() if self._ready and self._pid == forks.pid else None
            if lender is None:
                lender = await self._own_async_lender()
            conn = await lender.get()
            try:
                cursor = await conn.execute(self._hot[name] if self._hot is not None else self._render(conn)[name], params)
                return await cursor.fetchall()
            finally:
                lender.put(conn)
        except psycopg.Error as exc:
            raise driver_error(self._where, exc) from exc

    async def _aone_given(self, name: str, params: tuple[Any, ...]) -> Rows:
        """`_aone`, on the async connection or pool given (whose lender gives back asynchronously)."""
        with self._errors():
            async with (await self._async_lender()).connection() as conn:
                cursor = conn.cursor(row_factory=tuple_row)
                await cursor.execute(self._hot[name] if self._hot is not None else self._render(conn)[name], params)
                return await cursor.fetchall()

    async def asetup(self) -> None:
        """`setup`, on the async side (which a store given only a sync connection or pool refuses)."""
        with self._errors():
            await self._async_lender()

    async def aclose(self) -> None:
        """`close`, and close the running loop's connections now."""
        await self._async_connections.aclose()
        self.close()

    # The Store interface

    def read(self, key: str) -> str | None:
        rows = self._one("read", (_key(key),))
        return "".join([row[0] for row in rows]) if rows else None

    def version(self, key: str) -> int | None:
        rows = self._one("thread_version", (_key(key),))
        return rows[0][0] if rows else None

    def append_if(self, key: str, suffix: str, version: Hashable) -> int | None:
        if version is ABSENT:
            rows = self._one("create", (_key(key), _full_key(key), _storable(suffix, key)))
        elif isinstance(version, int):
            rows = self._one("append_if", (_key(key), version, _storable(suffix, key)))
        else:
            return None
        return rows[0][0] if rows else None

    def update(self, key: str, change: Change) -> str | None:
        return self.update_versioned(key, change)[0]

    def update_versioned(self, key: str, change: Change) -> tuple[str | None, int | None]:
        return self._run(self._update_steps(key, change), transaction=True)

    def delete(self, key: str) -> None:
        self._run(self._delete_steps(key), transaction=True)

    def keys(self) -> Iterator[str]:
        return iter(decoded_keys(self._run(self._keys_steps())))

    def foreign(self) -> list[str]:
        """Rows whose key is not UTF-8 text (so not written by us), shown as hex."""
        return _undecodable(self._run(self._keys_steps()))

    def schema_version(self) -> int:
        """The schema version recorded in the store's meta table."""
        return self._run(self._version_steps())

    def index(self, key: str, terms: Collection[str]) -> None:
        self._run(self._index_steps(key, terms, add=True))

    def unindex(self, key: str, terms: Collection[str]) -> None:
        self._run(self._index_steps(key, terms, add=False))

    def indexed(self, term: str, start: str | None = None, limit: int | None = None) -> list[str]:
        return self._run(self._indexed_steps(term, start, limit))

    def index_ready(self) -> bool:
        return self._run(self._index_ready_steps())

    def set_index_ready(self) -> None:
        self._run(self._set_index_ready_steps())

    def sorted_keys(self, after: str | None = None, limit: int | None = None) -> list[str]:
        return self._run(self._sorted_keys_steps(after, limit))

    def _expiry_write(self, name: str, params: tuple[Any, ...]) -> Rows:
        made = self._expiring
        rows: Rows = self._run(self._expiry_write_steps(name, params), transaction=not made)
        self._expiring = True  # (committed)
        return rows

    def expire_at(self, key: str, when: float) -> None:
        self._expiry_write("expire_at", (_key(key), when, _full_key(key)))

    def set_expiry(self, key: str, when: float | None) -> None:
        self._expiry_write(*self._set_expiry_args(key, when))

    def expiry(self, key: str) -> float | None:
        rows = self._run(self._expiry_read_steps("expiry", (_key(key),)))
        return float(rows[0][0]) if rows else None

    def expired(self, now: float, limit: int) -> list[tuple[str, float]]:
        if limit <= 0:
            return []
        return _expired(self._run(self._expiry_read_steps("expired", (now, limit))))

    def lease(self, name: str, holder: str, now: float, seconds: float) -> bool:
        return bool(self._expiry_write("lease", self._lease_args(name, holder, now, seconds)))

    def release(self, name: str, holder: str) -> None:
        self._expiry_write("release", (encode(name), encode(holder)))

    async def _aexpiry_write(self, name: str, params: tuple[Any, ...]) -> Rows:
        made = self._expiring
        rows: Rows = await self._arun(self._expiry_write_steps(name, params), transaction=not made)
        self._expiring = True
        return rows

    async def aexpire_at(self, key: str, when: float) -> None:
        await self._aexpiry_write("expire_at", (_key(key), when, _full_key(key)))

    async def aset_expiry(self, key: str, when: float | None) -> None:
        await self._aexpiry_write(*self._set_expiry_args(key, when))

    async def aexpiry(self, key: str) -> float | None:
        rows = await self._arun(self._expiry_read_steps("expiry", (_key(key),)))
        return float(rows[0][0]) if rows else None

    async def aexpired(self, now: float, limit: int) -> list[tuple[str, float]]:
        if limit <= 0:
            return []
        return _expired(await self._arun(self._expiry_read_steps("expired", (now, limit))))

    async def alease(self, name: str, holder: str, now: float, seconds: float) -> bool:
        return bool(await self._aexpiry_write("lease", self._lease_args(name, holder, now, seconds)))

    async def arelease(self, name: str, holder: str) -> None:
        await self._aexpiry_write("release", (encode(name), encode(holder)))

    async def aindex(self, key: str, terms: Collection[str]) -> None:
        await self._arun(self._index_steps(key, terms, add=True))

    async def aunindex(self, key: str, terms: Collection[str]) -> None:
        await self._arun(self._index_steps(key, terms, add=False))

    async def aindexed(self, term: str, start: str | None = None, limit: int | None = None) -> list[str]:
        return await self._arun(self._indexed_steps(term, start, limit))

    async def aindex_ready(self) -> bool:
        return await self._arun(self._index_ready_steps())

    async def aset_index_ready(self) -> None:
        await self._arun(self._set_index_ready_steps())

    async def asorted_keys(self, after: str | None = None, limit: int | None = None) -> list[str]:
        return await self._arun(self._sorted_keys_steps(after, limit))

    async def aread(self, key: str) -> str | None:
        rows = await self._aone("read", (_key(key),))
        return "".join([row[0] for row in rows]) if rows else None

    async def aversion(self, key: str) -> int | None:
        rows = await self._aone("thread_version", (_key(key),))
        return rows[0][0] if rows else None

    async def aappend_if(self, key: str, suffix: str, version: Hashable) -> int | None:
        if version is ABSENT:
            rows = await self._aone("create", (_key(key), _full_key(key), _storable(suffix, key)))
        elif isinstance(version, int):
            rows = await self._aone("append_if", (_key(key), version, _storable(suffix, key)))
        else:
            return None
        return rows[0][0] if rows else None

    async def aupdate(self, key: str, change: Change) -> str | None:
        return (await self.aupdate_versioned(key, change))[0]

    async def aupdate_versioned(self, key: str, change: Change) -> tuple[str | None, int | None]:
        return await self._arun(self._update_steps(key, change), transaction=True)

    async def adelete(self, key: str) -> None:
        await self._arun(self._delete_steps(key), transaction=True)

    async def akeys(self) -> list[str]:
        return decoded_keys(await self._arun(self._keys_steps()))


_SETUP = [
    "CREATE TABLE IF NOT EXISTS {meta} (name text PRIMARY KEY, value text NOT NULL)",
    "CREATE SEQUENCE IF NOT EXISTS {versions}",
    "CREATE TABLE IF NOT EXISTS {threads} (key bytea PRIMARY KEY, version bigint NOT NULL, full_key bytea)",
    "ALTER TABLE {threads} ADD COLUMN IF NOT EXISTS full_key bytea",
    "CREATE TABLE IF NOT EXISTS {chunks} (key bytea NOT NULL, seq bigint NOT NULL, value text NOT NULL, PRIMARY KEY (key, seq))",
    "CREATE TABLE IF NOT EXISTS {terms} (term bytea NOT NULL, key bytea NOT NULL, full_key bytea, PRIMARY KEY (term, key))",
    "CREATE INDEX IF NOT EXISTS {terms_key} ON {terms} (key)",
]
_EXPIRY_SETUP = [  # not in the schema version: a release without them leaves them be
    "CREATE TABLE IF NOT EXISTS {expiry} (key bytea PRIMARY KEY, expires_at double precision NOT NULL, full_key bytea)",
    "CREATE INDEX IF NOT EXISTS {expiry_when} ON {expiry} (expires_at, key)",
    "CREATE TABLE IF NOT EXISTS {leases} (name bytea PRIMARY KEY, holder bytea NOT NULL, until double precision NOT NULL)",
]
_MIGRATE_V1 = [
    "INSERT INTO {threads} (key, version) SELECT key, nextval({versions_name}) FROM {histories} WHERE value IS NOT NULL",
    "INSERT INTO {chunks} SELECT key, version, value FROM {threads} JOIN {histories} USING (key)",
    "DROP TABLE {histories}",
]
_BUMPED = "WITH bumped AS (UPDATE {threads} SET version = nextval({versions_name}) WHERE key = %s"
_INSERTED = "RETURNING key, version) INSERT INTO {chunks} SELECT key, version, %s FROM bumped RETURNING seq"
_STATEMENTS = {
    # The schema: set up, checked and migrated by `_setup_steps`
    "advisory_lock": "SELECT pg_advisory_xact_lock(hashtext(%s))",
    "meta_exists": "SELECT to_regclass({meta_name}) IS NOT NULL",
    "terms_exist": "SELECT to_regclass({terms_name}) IS NOT NULL",
    "v1_table": "SELECT to_regclass({histories_name}) IS NOT NULL",
    # ours (of any schema), and a LangGraph PostgresSaver's tables, in the schema the store uses
    "foreign_probe": "SELECT to_regclass({meta_name}) IS NOT NULL OR to_regclass({histories_name}) IS NOT NULL, "
    "to_regclass({lg_checkpoints}) IS NOT NULL AND to_regclass({lg_writes}) IS NOT NULL AND to_regclass({lg_blobs}) IS NOT NULL",
    "foreign_threads": "SELECT count(*) FROM (SELECT DISTINCT thread_id FROM {lg_checkpoints_table} LIMIT %s) AS t",
    "tables": "SELECT table_name FROM information_schema.tables WHERE table_schema = coalesce(%s, current_schema())",
    "record_version": "INSERT INTO {meta} VALUES ('schema_version', {version}) ON CONFLICT DO NOTHING",
    "record_v1": "INSERT INTO {meta} VALUES ('schema_version', '1') ON CONFLICT DO NOTHING",
    "to_current": "UPDATE {meta} SET value = {version} WHERE name = 'schema_version'",
    "version": "SELECT value FROM {meta} WHERE name = 'schema_version'",
    "any_thread": "SELECT EXISTS (SELECT 1 FROM {threads})",
    # Threads (version 0: the placeholder row of an update creating the thread, never committed)
    "read": "SELECT value FROM {chunks} WHERE key = %s ORDER BY seq",
    "thread_version": "SELECT version FROM {threads} WHERE key = %s",
    "append_if": f"{_BUMPED} AND version = %s {_INSERTED}",
    "bump_and_insert": f"{_BUMPED} {_INSERTED}",
    # A new thread's first write, in one statement: nothing when the thread is there (an update
    # creating it holds its placeholder row until it commits, and this waits for it)
    "create": "WITH made AS (INSERT INTO {threads} VALUES (%s, nextval({versions_name}), %s) ON CONFLICT (key) DO NOTHING "
    "RETURNING key, version) INSERT INTO {chunks} SELECT key, version, %s FROM made RETURNING seq",
    "lock_thread": "INSERT INTO {threads} AS t VALUES (%s, 0, %s) ON CONFLICT (key) DO UPDATE SET version = t.version RETURNING version",
    "delete_thread": "DELETE FROM {threads} WHERE key = %s",
    "delete_chunks": "DELETE FROM {chunks} WHERE key = %s",
    "keys": "SELECT coalesce(full_key, key) FROM {threads} WHERE version <> 0",
    # Two statements, not one with "(key > %s OR first)": an OR there keeps the planner from the
    # primary key's range, and it reads every thread.
    "first_keys": "SELECT coalesce(full_key, key) FROM {threads} WHERE version <> 0 ORDER BY key LIMIT %s",
    "keys_after": "SELECT coalesce(full_key, key) FROM {threads} WHERE version <> 0 AND key > %s ORDER BY key LIMIT %s",
    # The index
    "index_ready": "SELECT 1 FROM {meta} WHERE name = 'index' AND value = 'ready'",
    "set_index_ready": "INSERT INTO {meta} VALUES ('index', 'ready') ON CONFLICT (name) DO UPDATE SET value = 'ready'",
    "add_terms": "INSERT INTO {terms} SELECT unnest(%s::bytea[]), %s, %s ON CONFLICT DO NOTHING",
    "drop_some_terms": "DELETE FROM {terms} WHERE key = %s AND term = ANY(%s::bytea[])",
    "drop_terms": "DELETE FROM {terms} WHERE key = %s",
    "indexed": "SELECT coalesce(full_key, key) FROM {terms} WHERE term = %s AND key >= %s ORDER BY key LIMIT %s",
    # Expiries and leases
    "expiry_exists": "SELECT to_regclass({expiry_name}) IS NOT NULL AND to_regclass({leases_name}) IS NOT NULL",
    "expire_at": "INSERT INTO {expiry} AS e VALUES (%s, %s, %s) "
    "ON CONFLICT (key) DO UPDATE SET expires_at = GREATEST(e.expires_at, excluded.expires_at)",
    "set_expiry": "INSERT INTO {expiry} VALUES (%s, %s, %s) ON CONFLICT (key) DO UPDATE SET expires_at = excluded.expires_at",
    "drop_expiry": "DELETE FROM {expiry} WHERE key = %s",
    "expiry": "SELECT expires_at FROM {expiry} WHERE key = %s",
    "expired": "SELECT coalesce(full_key, key), expires_at FROM {expiry} WHERE expires_at <= %s ORDER BY expires_at, key LIMIT %s",
    # Changes the row (and returns it) only when the lease is the holder's or lapsed; atomic, as an upsert is.
    "lease": "INSERT INTO {leases} AS l VALUES (%s, %s, %s) ON CONFLICT (name) DO UPDATE "
    "SET holder = excluded.holder, until = excluded.until WHERE l.holder = excluded.holder OR l.until <= %s RETURNING 1",
    "release": "DELETE FROM {leases} WHERE name = %s AND holder = %s",
}


class _Queries:
    """Every statement the store runs (`_STATEMENTS`, each an attribute of its name), composed
    once for its schema and table names."""

    def __init__(self, schema: str | None, prefix: str) -> None:
        names: dict[str, sql.Composable] = {"version": sql.Literal(str(SCHEMA_VERSION))}
        for table in ("meta", "threads", "chunks", "terms", "histories", "versions", "expiry", "leases"):
            names[table] = sql.Identifier(schema, prefix + table) if schema else sql.Identifier(prefix + table)
            names[f"{table}_name"] = sql.Literal(names[table].as_string(None))  # for to_regclass, nextval
        names["terms_key"] = sql.Identifier(prefix + "terms_key")  # an index is in its table's schema
        names["expiry_when"] = sql.Identifier(prefix + "expiry_when")
        for name, table in (("checkpoints", "checkpoints"), ("writes", "checkpoint_writes"), ("blobs", "checkpoint_blobs")):
            identifier = sql.Identifier(schema, table) if schema else sql.Identifier(table)  # LangGraph's PostgresSaver's
            names[f"lg_{name}"] = sql.Literal(identifier.as_string(None))
            names[f"lg_{name}_table"] = identifier
        names["schema"] = sql.Identifier(schema or "")

        def compose(text: str) -> sql.Composed:
            return sql.SQL(text).format(**names)

        self.lock_name = f"telar-checkpoint setup {schema or ''}.{prefix}"
        self.setup = [compose("CREATE SCHEMA IF NOT EXISTS {schema}")] if schema else []
        self.expiry_setup = [compose(text) for text in _EXPIRY_SETUP]
        self.setup += [compose(text) for text in _SETUP] + self.expiry_setup
        self.migrate_v1 = [compose(text) for text in _MIGRATE_V1]
        vars(self).update({name: compose(text) for name, text in _STATEMENTS.items()})
        self.hot = {name: vars(self)[name] for name in ("read", "thread_version", "append_if", "create")}

    def __getattr__(self, name: str) -> sql.Composed:
        """(Only for type checkers: every statement is an attribute, set by `__init__`.)"""
        raise AttributeError(name)


def _bound(start: str) -> bytes:
    """Where keys from `start` on begin, in the order of the stored keys: ``key + "\\x00"`` (the
    least key after `key`) is just after the stored form of `key`, even a long key's hash."""
    return _key(start[:-1]) + b"\x00" if start.endswith("\x00") else _key(start)


def _expired(rows: Rows) -> list[tuple[str, float]]:
    return [(key, float(when)) for raw, when in rows if (key := decode_key(bytes(raw))) is not None]


def _undecodable(raw_keys: list[bytes]) -> list[str]:
    return sorted(f"histories key '\\x{raw.hex()}'" for raw in raw_keys if decode_key(raw) is None)
