"""Every store kind, each given its own isolated space per test (a helper module, not tests).

`make_store(kind, tmp_path, request)` builds a store and registers its cleanup:
file and sqlite live under `tmp_path`, postgres gets a fresh schema (dropped
after), redis and redis-cluster a unique key prefix (its keys deleted after, on
every node). The servers, and how a test declares those it uses, are in
`tests.servers`.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import multiprocessing
import os
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from telar_checkpoint.stores import Change, FileStore, MemoryStore, Store
from telar_checkpoint.stores.sqlite import SQLiteStore
from telar_checkpoint.testing import child_exit_code as child_exit_code  # for the tests that import it from here
from tests import servers
from tests.servers import POSTGRES_URL, REDIS_URL, redis_cluster_admin, require_server, unavailable  # noqa: F401 (imported from here)

STORE_KINDS = ["memory", "file", "sqlite", "postgres", "redis", "redis-cluster"]
LOCAL_KINDS = ["memory", "file", "sqlite"]
SERVER_KINDS = ["postgres", "redis", "redis-cluster"]
SHARED_KINDS = ["file", "sqlite", "postgres", "redis", "redis-cluster"]  # several processes can open the same one
PLAIN_KINDS = ["plain", "plain-file"]  # stores of the four abstract methods alone, as a user's own may be


class PlainStore(Store):
    """A store of the four abstract methods alone, on a dict: `Store`'s defaults do the rest."""

    kind = "plain"

    def __init__(self) -> None:
        self.values: dict[str, str] = {}
        self.lock = threading.Lock()

    def read(self, key: str) -> str | None:
        return self.values.get(key)

    def update(self, key: str, change: Change) -> str | None:
        with self.lock:
            new = change(self.values.get(key))
            if new is None:
                self.values.pop(key, None)
            else:
                self.values[key] = new
            return new

    def delete(self, key: str) -> None:
        with self.lock:
            self.values.pop(key, None)

    def keys(self) -> Iterator[str]:
        return iter(list(self.values))


class PlainFileStore(Store):
    """A store of the four abstract methods alone, on a directory that several processes may open:
    a file per key, named by the key's hash and holding ``[key, value]`` as JSON, replaced through
    a temporary file under an exclusive lock of the file "lock" (taken by each update)."""

    kind = "plain-file"

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        return self.directory / (hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest() + ".json")

    def read(self, key: str) -> str | None:
        try:
            text = self._path(key).read_text(encoding="ascii")
        except FileNotFoundError:
            return None
        value: str = json.loads(text)[1]
        return value

    def update(self, key: str, change: Change) -> str | None:
        path = self._path(key)
        with open(self.directory / "lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            new = change(self.read(key))
            if new is None:
                path.unlink(missing_ok=True)
            else:
                temp = path.with_suffix(".tmp")
                temp.write_text(json.dumps([key, new]), encoding="ascii")
                os.replace(temp, path)
            return new

    def delete(self, key: str) -> None:
        self.update(key, lambda _old: None)

    def keys(self) -> Iterator[str]:
        for path in sorted(self.directory.glob("*.json")):
            try:
                yield json.loads(path.read_text(encoding="ascii"))[0]
            except FileNotFoundError:  # deleted since listed
                pass



def make_store(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Store:
    """A new store of `kind` in a space of its own, closed and cleaned up after the test."""
    tag = f"telar_test_{uuid.uuid4().hex[:12]}"
    require_server(kind)
    store: Store
    if kind == "memory":
        store = MemoryStore()
    elif kind == "plain":
        store = PlainStore()
    elif kind == "plain-file":
        store = PlainFileStore(tmp_path / "plain")
    elif kind == "file":
        store = FileStore(tmp_path / "store")
    elif kind == "sqlite":
        store = SQLiteStore(tmp_path / "db.sqlite")
    elif kind == "postgres":
        from telar_checkpoint.stores.postgres import PostgresStore

        store = PostgresStore(POSTGRES_URL, schema=tag, connect_timeout=2, application_name=tag)
        request.addfinalizer(lambda: postgres_admin(f'DROP SCHEMA IF EXISTS "{tag}" CASCADE'))
    elif kind == "redis":
        from telar_checkpoint.stores.redis import RedisStore

        store = RedisStore(REDIS_URL, prefix=f"{tag}:", connect_timeout=2, client_name=tag)
        request.addfinalizer(lambda: redis_delete_prefix(f"{tag}:"))
    elif kind == "redis-cluster":
        from telar_checkpoint.stores.redis import RedisStore

        store = RedisStore(servers.REDIS_CLUSTER_URL, prefix=f"{tag}:", connect_timeout=2, client_name=tag)
        request.addfinalizer(lambda: redis_delete_prefix(f"{tag}:", cluster=True))
    else:
        raise ValueError(f"unknown store kind {kind!r}")
    request.addfinalizer(store.close)
    return store


def describe(store: Store) -> tuple[str, dict[str, Any]]:
    """What another process needs to open the same store (see `reopen`)."""
    if isinstance(store, FileStore):
        return "file", {"directory": str(store.directory)}
    if isinstance(store, SQLiteStore):
        return "sqlite", {"path": str(store.path)}
    if isinstance(store, PlainFileStore):
        return "plain-file", {"directory": str(store.directory)}
    if store.kind == "postgres":
        return "postgres", {"conninfo": store.conninfo, "schema": store.schema}  # type: ignore[attr-defined]
    if store.kind in ("redis", "redis-cluster"):
        return store.kind, {"url": store.url, "prefix": store.prefix}  # type: ignore[attr-defined]
    raise ValueError(f"a {store.kind} store cannot be shared between processes")


def reopen(description: tuple[str, dict[str, Any]]) -> Store:
    """A new store object on the space that `describe` described."""
    kind, options = description
    if kind == "file":
        return FileStore(**options)
    if kind == "sqlite":
        return SQLiteStore(**options)
    if kind == "plain-file":
        return PlainFileStore(**options)
    if kind == "postgres":
        from telar_checkpoint.stores.postgres import PostgresStore

        return PostgresStore(**options)
    from telar_checkpoint.stores.redis import RedisStore

    return RedisStore(**options)


# What a process started by `processes()` has imported before it starts: the library, each store's
# driver and LangGraph (about 1 s of CPU per process when a spawned one imports them itself).
PRELOAD = [
    "telar_checkpoint",
    "telar_checkpoint.stores.sqlite",
    "telar_checkpoint.stores.postgres",
    "telar_checkpoint.stores.redis",
    "langgraph.graph",
    "tests.stores",
    "tests.graphs",
    "tests.agent_graph",
]


def processes() -> Any:
    """A multiprocessing context for tests that run work in other processes: "forkserver" where
    there is one (each process forked from a server process that imported `PRELOAD`, not from
    the test's process: nothing of the test's state, connections or locks, is inherited), else
    "spawn". (A module that cannot be imported is skipped by the server: the process imports it
    itself, as a spawned one does.)"""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)  # read when this test process starts its server, once
    return context


def postgres_admin(statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Run `statement` on the test server outside any store (setup, cleanup, fault injection)."""
    import psycopg

    with psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=2) as conn:
        cursor = conn.execute(statement, params)
        return cursor.fetchall() if cursor.description else []


def redis_admin() -> Any:
    import redis

    return redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2)


@contextmanager
def redis_node_admins(store: Store) -> Iterator[list[Any]]:
    """A client of each server that `store` (redis or redis-cluster) talks to: the server, or every
    primary of the cluster, outside the store; closed after."""
    import redis

    if store.kind == "redis-cluster":
        cluster = redis_cluster_admin()
        try:
            addresses = [(node.host, node.port) for node in cluster.get_primaries()]
        finally:
            cluster.close()
        admins = [redis.Redis(host=host, port=port, socket_connect_timeout=2) for host, port in addresses]
    else:
        admins = [redis_admin()]
    try:
        yield admins
    finally:
        for admin in admins:
            admin.close()


def redis_delete_prefix(prefix: str, *, cluster: bool = False) -> None:
    """Delete every key under `prefix` (on every node of the test cluster, with `cluster`)."""
    client = redis_cluster_admin() if cluster else redis_admin()
    try:
        for key in client.scan_iter(match=prefix.encode() + b"*", count=1000):
            client.delete(key)
    finally:
        client.close()
