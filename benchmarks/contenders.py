"""The savers under test ("contenders"), each in a space of its own, and how to weigh their storage.

`open_contenders(names, lab)` builds the savers the benchmark compares: LangGraph's
`InMemorySaver`, `SqliteSaver` (a file), `PostgresSaver` (a connection pool on the real
server), the plain-Redis `RedisSaver` of langgraph-checkpoint-plainredis, and
`TelarSaver` on each of our stores; and a reference, `InMemorySaver/no-serde`: an
`InMemorySaver` whose serializer keeps the objects it is given instead of serializing
them, LangGraph's own cost with a saver that does next to nothing (the floor). Server-backed ones get a fresh Postgres schema or
Redis key prefix named after the run, removed by `Lab.cleanup`. Each contender knows
how to measure the bytes it keeps (`storage`).
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.serde.base import SerializerProtocol

from telar_checkpoint import TelarSaver
from telar_checkpoint.stores import FileStore, MemoryStore, Store

# A database of its own: PostgresSaver.setup runs CREATE INDEX CONCURRENTLY, which waits for every
# open transaction in its database, so a test session left idle in `test` would block it.
POSTGRES_URL = os.environ.get("TELAR_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/telar_bench")
POSTGRES_ADMIN_DB = "test"  # where to connect to create the benchmark database when it is missing
REDIS_URL = os.environ.get("TELAR_BENCH_REDIS", "redis://127.0.0.1:6379/0")

FLOOR = "InMemorySaver/no-serde"  # LangGraph's own floor: InMemorySaver with a serializer that keeps objects
OFFICIAL = ["InMemorySaver", FLOOR, "SqliteSaver", "PostgresSaver", "PlainRedisSaver"]
TELAR = ["Telar/memory", "Telar/file", "Telar/sqlite", "Telar/postgres", "Telar/redis"]
ALL = OFFICIAL + TELAR
NEEDS_POSTGRES = {"PostgresSaver", "Telar/postgres"}
NEEDS_REDIS = {"PlainRedisSaver", "Telar/redis"}


@dataclass
class Storage:
    """Bytes a contender keeps: the headline figure, and another view of them (`how` says which)."""

    bytes: int
    other: int
    how: str


@dataclass
class Contender:
    name: str
    saver: BaseCheckpointSaver[Any]
    storage: Callable[[], Storage] | None  # None: nothing serialized to weigh (the floor)
    close: Callable[[], None]
    store: Store | None = None  # TelarSaver's store, for the max_history variant

    @property
    def is_telar(self) -> bool:
        return self.store is not None

    def telar(self, max_history: int | None) -> TelarSaver:
        """A TelarSaver on the same store with another `max_history`."""
        assert self.store is not None
        return TelarSaver(self.store, max_history=max_history)


@dataclass
class Lab:
    """Where one benchmark run keeps its data: a temporary directory, a schema, a key prefix."""

    root: Path
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:10])
    postgres_url: str = POSTGRES_URL
    redis_url: str = REDIS_URL
    _cleanups: list[Callable[[], None]] = field(default_factory=list)

    @classmethod
    def create(cls, parent: str | os.PathLike[str] | None = None) -> Lab:
        return cls(Path(tempfile.mkdtemp(prefix="telar-bench-", dir=parent)))

    def on_cleanup(self, action: Callable[[], None]) -> None:
        self._cleanups.append(action)

    def cleanup(self) -> None:
        for action in reversed(self._cleanups):
            try:
                action()
            except Exception as exc:  # cleanup must go on; say what was left behind
                print(f"benchmark cleanup: {exc}")
        shutil.rmtree(self.root, ignore_errors=True)


def server_problems(names: list[str], lab: Lab) -> dict[str, str]:
    """Contender -> why it cannot run (its server is unreachable or its package missing)."""
    problems: dict[str, str] = {}
    if NEEDS_POSTGRES & set(names):
        try:
            _ensure_database(lab.postgres_url)
        except Exception as exc:
            problems.update({n: f"PostgreSQL: {exc}".strip() for n in NEEDS_POSTGRES})
    if NEEDS_REDIS & set(names):
        try:
            import redis

            client = redis.Redis.from_url(lab.redis_url, socket_connect_timeout=3)
            client.ping()
            client.close()
        except Exception as exc:
            problems.update({n: f"Redis: {exc}" for n in NEEDS_REDIS})
    try:
        import langgraph_checkpoint_plainredis  # noqa: F401
    except ImportError:
        problems.setdefault("PlainRedisSaver", "pip install langgraph-checkpoint-plainredis (or '.[bench]')")
    try:
        import langgraph.checkpoint.postgres  # noqa: F401
    except ImportError:
        problems.setdefault("PostgresSaver", "pip install langgraph-checkpoint-postgres (or '.[bench]')")
    return {n: p for n, p in problems.items() if n in names}


def _ensure_database(url: str) -> None:
    """Connect to `url`, creating its database first (from `POSTGRES_ADMIN_DB`) when it does not exist."""
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    try:
        with psycopg.connect(url, connect_timeout=3):
            return
    except psycopg.OperationalError as exc:
        if "does not exist" not in str(exc):
            raise
    name = conninfo_to_dict(url)["dbname"]
    with psycopg.connect(make_conninfo(url, dbname=POSTGRES_ADMIN_DB), connect_timeout=3, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(str(name))))


def open_contenders(names: list[str], lab: Lab) -> list[Contender]:
    return [_OPENERS[name](lab) for name in names]


# --- measuring storage ---------------------------------------------------------------


def _held_bytes(obj: Any) -> int:
    """Bytes and strings held in nested containers (what InMemorySaver keeps, serialized)."""
    if isinstance(obj, (bytes, bytearray)):
        return len(obj)
    if isinstance(obj, str):
        return len(obj.encode("utf-8", "surrogatepass"))
    if isinstance(obj, dict):
        return sum(_held_bytes(k) + _held_bytes(v) for k, v in obj.items())
    if isinstance(obj, (list, tuple)):
        return sum(_held_bytes(v) for v in obj)
    return 0


def _sqlite_storage(path: Path) -> Storage:
    raw = sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())
    vacuumed = path.with_suffix(".vacuumed")
    with sqlite3.connect(path) as conn:
        conn.execute("VACUUM INTO ?", (str(vacuumed),))
    conn.close()
    compacted = vacuumed.stat().st_size
    vacuumed.unlink()
    return Storage(compacted, raw, "file size after VACUUM (VACUUM INTO a copy); other: file + WAL as found")


def _postgres_storage(url: str, schema: str) -> Storage:
    import psycopg

    size = (
        "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind = 'r'"
    )
    with psycopg.connect(url, autocommit=True) as conn:
        raw = conn.execute(size, (schema,)).fetchone()[0]  # type: ignore[index]
        tables = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)
        ).fetchall()
        for (table,) in tables:
            conn.execute(psycopg.sql.SQL("VACUUM FULL {}").format(psycopg.sql.Identifier(schema, table)))
        compacted = conn.execute(size, (schema,)).fetchone()[0]  # type: ignore[index]
        holders = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE backend_xmin IS NOT NULL AND pid <> pg_backend_pid()"
        ).fetchone()[0]  # type: ignore[index]
    how = "pg_total_relation_size of the tables; other: after VACUUM FULL"
    if holders:
        how += f" ({holders} other session(s) held snapshots, which keep VACUUM from removing dead rows)"
    return Storage(int(raw), int(compacted), how)


def _redis_storage(url: str, prefix: str) -> Storage:
    import redis

    client = redis.Redis.from_url(url)
    try:
        pattern = "".join("\\" + c if c in "*?[]\\" else c for c in prefix) + "*"
        total = sum(client.memory_usage(key, samples=0) or 0 for key in client.scan_iter(match=pattern, count=1000))
    finally:
        client.close()
    return Storage(total, total, "sum of MEMORY USAGE (SAMPLES 0) of the keys")


def _store_text_bytes(store: Store) -> int:
    return sum(len((store.read(k) or "").encode("utf-8", "surrogatepass")) for k in store.keys())


# --- the contenders ---------------------------------------------------------------------


def _in_memory(lab: Lab) -> Contender:
    from langgraph.checkpoint.memory import InMemorySaver

    saver = InMemorySaver()
    held = lambda: _held_bytes([saver.storage, saver.writes, saver.blobs])  # noqa: E731
    return Contender(
        "InMemorySaver", saver, lambda: Storage(held(), held(), "serialized bytes held in memory"), lambda: None
    )


class _Held(tuple[str, bytes]):
    """The constant ``("held", b"")`` that `NoSerde.dumps_typed` returns, carrying the object itself."""

    obj: Any


class NoSerde(SerializerProtocol):
    """A serializer that serializes nothing: `dumps_typed` returns a constant that carries the
    object, `loads_typed` gives that same object back.

    Only a checkpoint's own dict (channel versions, versions seen) is copied when loaded:
    LangGraph updates the checkpoint it resumes from in place, and the stored one must not
    change with it. Channel values and writes are given back by identity.
    """

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        held = _Held(("held", b""))
        held.obj = obj
        return held

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        obj = data.obj  # type: ignore[attr-defined]
        if type(obj) is dict and "versions_seen" in obj:
            return {
                **obj,
                "channel_versions": dict(obj["channel_versions"]),
                "versions_seen": {node: dict(seen) for node, seen in obj["versions_seen"].items()},
            }
        return obj


def _in_memory_no_serde(lab: Lab) -> Contender:
    from langgraph.checkpoint.memory import InMemorySaver

    return Contender(FLOOR, InMemorySaver(serde=NoSerde()), None, lambda: None)


def _sqlite_saver(lab: Lab) -> Contender:
    from langgraph.checkpoint.sqlite import SqliteSaver

    path = lab.root / "sqlite-saver.db"
    conn = sqlite3.connect(path, check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.setup()
    return Contender("SqliteSaver", saver, lambda: _sqlite_storage(path), conn.close)


def _postgres_saver(lab: Lab) -> Contender:
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.rows import dict_row
    from psycopg_pool import ConnectionPool

    schema = f"bench_{lab.run_id}_lg"
    _create_schema(lab, schema)
    pool = ConnectionPool(
        lab.postgres_url,
        min_size=1,
        max_size=8,
        open=True,
        kwargs={
            "autocommit": True,
            "prepare_threshold": 0,
            "row_factory": dict_row,
            "options": f"-c search_path={schema}",
        },
    )
    saver = PostgresSaver(pool)  # type: ignore[arg-type]
    saver.setup()
    return Contender("PostgresSaver", saver, lambda: _postgres_storage(lab.postgres_url, schema), pool.close)


def _plain_redis_saver(lab: Lab) -> Contender:
    import redis
    from langgraph_checkpoint_plainredis import RedisSaver

    prefix = f"bench{lab.run_id}lg"
    client = redis.Redis.from_url(lab.redis_url)
    saver = RedisSaver(client, prefix=prefix)
    lab.on_cleanup(lambda: _drop_redis_prefix(lab.redis_url, prefix + ":"))
    return Contender("PlainRedisSaver", saver, lambda: _redis_storage(lab.redis_url, prefix + ":"), client.close)


def _telar(name: str, store: Store, storage: Callable[[], Storage]) -> Contender:
    return Contender(name, TelarSaver(store), storage, store.close, store)


def _telar_memory(lab: Lab) -> Contender:
    store = MemoryStore()
    held = lambda: _store_text_bytes(store)  # noqa: E731
    return _telar("Telar/memory", store, lambda: Storage(held(), held(), "UTF-8 bytes of the strings held"))


def _telar_file(lab: Lab) -> Contender:
    store = FileStore(lab.root / "telar-files")

    def storage() -> Storage:
        size = sum(store.path(k).stat().st_size for k in store.keys())
        return Storage(size, size, "sum of the thread files' sizes")

    return _telar("Telar/file", store, storage)


def _telar_sqlite(lab: Lab) -> Contender:
    from telar_checkpoint.stores.sqlite import SQLiteStore

    path = lab.root / "telar.db"
    return _telar("Telar/sqlite", SQLiteStore(path), lambda: _sqlite_storage(path))


def _telar_postgres(lab: Lab) -> Contender:
    from telar_checkpoint.stores.postgres import PostgresStore

    schema = f"bench_{lab.run_id}_telar"
    _create_schema(lab, schema)
    store = PostgresStore(lab.postgres_url, schema=schema)
    return _telar("Telar/postgres", store, lambda: _postgres_storage(lab.postgres_url, schema))


def _telar_redis(lab: Lab) -> Contender:
    from telar_checkpoint.stores.redis import RedisStore

    prefix = f"bench{lab.run_id}telar:"
    store = RedisStore(lab.redis_url, prefix=prefix)
    lab.on_cleanup(lambda: _drop_redis_prefix(lab.redis_url, prefix))
    return _telar("Telar/redis", store, lambda: _redis_storage(lab.redis_url, prefix))


def _create_schema(lab: Lab, schema: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(lab.postgres_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))

    def drop() -> None:
        with psycopg.connect(lab.postgres_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))

    lab.on_cleanup(drop)


def _drop_redis_prefix(url: str, prefix: str) -> None:
    import redis

    client = redis.Redis.from_url(url)
    try:
        pattern = "".join("\\" + c if c in "*?[]\\" else c for c in prefix) + "*"
        batch = list(client.scan_iter(match=pattern, count=1000))
        for i in range(0, len(batch), 500):
            client.delete(*batch[i : i + 500])
    finally:
        client.close()


_OPENERS: dict[str, Callable[[Lab], Contender]] = {
    "InMemorySaver": _in_memory,
    FLOOR: _in_memory_no_serde,
    "SqliteSaver": _sqlite_saver,
    "PostgresSaver": _postgres_saver,
    "PlainRedisSaver": _plain_redis_saver,
    "Telar/memory": _telar_memory,
    "Telar/file": _telar_file,
    "Telar/sqlite": _telar_sqlite,
    "Telar/postgres": _telar_postgres,
    "Telar/redis": _telar_redis,
}
