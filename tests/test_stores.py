"""One suite that every store passes, sync and async (the `store`/`astore` fixtures cover each kind)."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from telar_checkpoint.errors import StoreError
from telar_checkpoint.stores import FileStore, MemoryStore, Store
from telar_checkpoint.stores.sqlite import SQLiteStore
from tests.stores import (
    LOCAL_KINDS,
    append_if_lines,
    append_if_loop,
    append_lines,
    child_exit_code,
    describe,
    make_store,
    postgres_admin,
    redis_admin,
    reopen,
    unavailable,
)

SCHEMA_KINDS = ["sqlite", "postgres", "redis"]  # stores with a schema version of their own
KEYS = ["a/b", "..", "../../etc/passwd", "/abs", "nul\x00key", "new\nline", "x" * 300, "тред-é", "🧵🪡", "", " ", "%2F", "."]
VALUES = [
    "plain",
    '{"line":1}\n{"line":2}\n',
    "sep\u2028para\u2029end\n",
    '{"nul":"\\u0000"}\n',
    "non-ASCII: é ü ñ 中文 🧵\n",
    "crlf\r\nalone\rend",
    "",
]


def append(suffix: str) -> Callable[[str | None], str]:
    return lambda old: (old or "") + suffix


def fail(_old: str | None) -> str:
    raise RuntimeError("the change refused")


# --- The basic contract ---


def test_read_missing_is_none(store: Store) -> None:
    assert store.read("missing") is None
    assert list(store.keys()) == []


def test_update_creates_extends_rewrites_and_deletes(store: Store) -> None:
    assert store.update("t", lambda old: "one\n" if old is None else pytest.fail("not absent")) == "one\n"
    assert store.update("t", append("two\n")) == "one\ntwo\n"
    assert store.read("t") == "one\ntwo\n"
    assert store.update("t", lambda old: "other\n") == "other\n"
    assert store.read("t") == "other\n"
    assert store.update("t", lambda old: old) == "other\n"
    assert store.update("t", lambda old: None) is None
    assert store.read("t") is None
    assert list(store.keys()) == []
    assert store.update("never", lambda old: None) is None
    assert store.read("never") is None


def test_write_and_delete(store: Store) -> None:
    store.write("t", "v")
    assert store.read("t") == "v"
    store.delete("t")
    store.delete("t")
    assert store.read("t") is None


def test_failing_change_leaves_value_untouched(store: Store) -> None:
    store.write("t", "kept\n")
    with pytest.raises(RuntimeError, match="refused"):
        store.update("t", fail)
    with pytest.raises(RuntimeError, match="refused"):
        store.update("new", fail)
    assert store.read("t") == "kept\n"
    assert store.read("new") is None
    assert sorted(store.keys()) == ["t"]
    assert store.update("t", append("more\n")) == "kept\nmore\n"


def test_keys_and_foreign(store: Store) -> None:
    for key in ("a", "b", "c"):
        store.write(key, key)
    store.delete("b")
    assert sorted(store.keys()) == ["a", "c"]
    assert store.foreign() == []


def test_unicode_keys_round_trip_inside_the_store(store: Store, tmp_path: Path) -> None:
    for i, key in enumerate(KEYS):
        store.write(key, f"value {i}")
    assert sorted(store.keys()) == sorted(KEYS)
    assert all(store.read(key) == f"value {i}" for i, key in enumerate(KEYS))
    assert store.foreign() == []
    outside = [p for p in tmp_path.rglob("*") if not p.is_relative_to(tmp_path / "store") and p.name[:9] != "db.sqlite"]
    assert outside == []
    for key in KEYS:
        store.delete(key)
    assert list(store.keys()) == []


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_values_round_trip_exactly(store: Store, value: str) -> None:
    store.write("t", value)
    assert store.read("t") == value
    store.update("t", append(value))
    assert store.read("t") == value + value


@pytest.mark.parametrize("value", ["lone \ud800 high", "\udcc3\udca9", "\udfff"])
def test_lone_surrogates_are_stored_exactly_or_refused(store: Store, value: str) -> None:
    store.write("t", "before")
    try:
        store.write("t", value)
    except StoreError:
        assert store.read("t") == "before"
    else:
        assert store.read("t") == value


@pytest.mark.parametrize("store", SCHEMA_KINDS, indirect=True)
def test_schema_version_recorded_and_newer_refused(store: Store) -> None:
    store.write("t", "v")
    assert store.schema_version() == current_schema(store)  # type: ignore[attr-defined]
    kind, options = describe(store)
    if kind == "sqlite":
        with sqlite3.connect(options["path"]) as conn:
            conn.execute("UPDATE telar_meta SET value = '99' WHERE name = 'schema_version'")
    elif kind == "postgres":
        postgres_admin(f'UPDATE "{options["schema"]}".telar_meta SET value = \'99\'')
    else:
        redis_admin().set(options["prefix"] + "schema", 99)
    newer = reopen((kind, options))
    try:
        with pytest.raises(StoreError, match="schema version 99.*upgrade telar-checkpoint"):
            newer.update("t", append("x"))
    finally:
        newer.close()


def current_schema(store: Store) -> int:
    """The schema version the store's module writes (the one a store it opened must record)."""
    return int(sys.modules[type(store).__module__].SCHEMA_VERSION)


SCHEMA_1 = {"t": "one\ntwo\n", "nul\x00key": "é🧵\n", "empty": ""}


def write_schema_1(store: Store) -> None:
    """The layout of schema 1 (one value per thread, no versions), written by hand where `store` will look."""
    kind, options = describe(store)
    if kind == "sqlite":
        with sqlite3.connect(options["path"]) as conn:
            conn.execute("CREATE TABLE telar_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)")
            conn.execute("CREATE TABLE telar_histories (key BLOB PRIMARY KEY, value TEXT NOT NULL)")
            conn.execute("INSERT INTO telar_meta VALUES ('schema_version', '1')")
            for key, value in SCHEMA_1.items():
                conn.execute("INSERT INTO telar_histories VALUES (?, CAST(? AS TEXT))", (key.encode(), value.encode()))
        conn.close()
    elif kind == "postgres":
        schema = options["schema"]
        postgres_admin(f'CREATE SCHEMA "{schema}"')
        postgres_admin(f'CREATE TABLE "{schema}".telar_meta (name text PRIMARY KEY, value text NOT NULL)')
        postgres_admin(f'CREATE TABLE "{schema}".telar_histories (key bytea PRIMARY KEY, value text)')
        postgres_admin(f"INSERT INTO \"{schema}\".telar_meta VALUES ('schema_version', '1')")
        for key, value in SCHEMA_1.items():
            postgres_admin(f'INSERT INTO "{schema}".telar_histories VALUES (%s, %s)', (key.encode(), value))
    else:
        client = redis_admin()
        client.set(options["prefix"] + "schema", 1)
        for key, value in SCHEMA_1.items():
            client.set(options["prefix"].encode() + b"h:" + key.encode(), value.encode())
        client.close()


@pytest.mark.parametrize("store", SCHEMA_KINDS, indirect=True)
def test_schema_1_is_migrated(store: Store) -> None:
    write_schema_1(store)
    old = reopen(describe(store))
    try:
        old.update("t", append("three\n"))
        assert old.schema_version() == current_schema(old)  # type: ignore[attr-defined]
        assert {key: old.read(key) for key in old.keys()} == {**SCHEMA_1, "t": "one\ntwo\nthree\n"}
        assert old.foreign() == []
        for key in SCHEMA_1:
            version = old.update_versioned(key, append("more\n"))[1]
            assert version is not None and old.append_if(key, "last\n", version) == old.version(key)
            assert old.read(key) == SCHEMA_1[key] + ("three\n" if key == "t" else "") + "more\nlast\n"
    finally:
        old.close()


# --- Concurrency ---


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts open descriptors in /proc")
def test_short_lived_threads_leave_no_open_handles(store: Store) -> None:
    """LangGraph writes from executor threads made for each run: a store that tied a
    connection or a descriptor to each thread would leak one per run."""

    def one_write(i: int) -> None:
        store.update("t", append(f"{i}\n"))
        store.version("t")
        store.read("t")

    def run_in_new_thread(i: int) -> None:
        worker = threading.Thread(target=one_write, args=(i,))
        worker.start()
        worker.join()

    run_in_new_thread(0)
    before = len(os.listdir("/proc/self/fd"))
    for i in range(1, 80):
        run_in_new_thread(i)
    assert len(os.listdir("/proc/self/fd")) - before <= 12
    assert store.read("t") == "".join(f"{i}\n" for i in range(80))


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts open descriptors in /proc")
def test_a_file_store_keeps_a_bounded_number_of_files_open(tmp_path: Path) -> None:
    from telar_checkpoint.stores.file import FILES_KEPT

    store = FileStore(tmp_path / "store", fsync=False)
    before = len(os.listdir("/proc/self/fd"))
    for i in range(3 * FILES_KEPT):
        store.update(f"thread-{i}", append("a\n"))
        store.update(f"thread-{i}", append("b\n"))  # an append: the history file stays open
    assert len(os.listdir("/proc/self/fd")) - before <= FILES_KEPT + 8
    assert all(store.read(f"thread-{i}") == "a\nb\n" for i in range(3 * FILES_KEPT))
    store.close()
    assert len(os.listdir("/proc/self/fd")) - before <= 8


@pytest.mark.skipif(not hasattr(os, "fork"), reason="forks")
def test_a_child_forked_mid_write_takes_its_own_turn(shared_store: Store) -> None:
    """A process forked while a thread of its parent is mid-write (gunicorn's --preload, a
    multiprocessing pool) neither inherits the parent's turn nor deadlocks on it: its write
    waits for the parent's, then lands, and neither is lost. SQLite cannot write from such a
    child (its copy of SQLite holds the parent's lock for ever): the child's write fails at once
    with a StoreError saying so (found: it waited `timeout` seconds, 30 by default, every time)."""
    store = shared_store
    store.update("t", append("before\n"))
    inside, release = threading.Event(), threading.Event()

    def slow(old: str | None) -> str:
        inside.set()
        assert release.wait(10)
        return (old or "") + "parent\n"

    parent = threading.Thread(target=store.update, args=("t", slow))
    parent.start()
    assert inside.wait(10)
    pid = os.fork()
    if pid == 0:  # the child: write once, then leave without running the parent's teardown
        code = 1
        try:
            started = time.monotonic()
            store.update("t", append("child\n"))
            code = 0
        except StoreError as exc:
            refused = "forked while its parent was writing" in str(exc) and time.monotonic() - started < 1
            code = 3 if refused else 2
        finally:
            os._exit(code)
    time.sleep(0.3)
    release.set()
    parent.join(10)
    code = child_exit_code(pid, "the forked child's write never finished (it waited on a lock it inherited)")
    if store.kind == "sqlite":
        assert code == 3, "the SQLite child's write was not refused at once with a clear StoreError"
        assert store.read("t") == "before\nparent\n"
    else:
        assert code == 0
        assert sorted(store.read("t").splitlines()) == ["before", "child", "parent"]  # type: ignore[union-attr]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="forks")
def test_a_sqlite_child_forked_while_its_parent_syncs_does_not_inherit_the_locks(tmp_path: Path) -> None:
    """The parent was committing and syncing (its commit lock and fsync lock held) when it
    forked: the child's store starts with locks of its own and writes."""
    store = SQLiteStore(tmp_path / "db.sqlite")
    store.update("t", append("before\n"))
    store._commit_lock.acquire()
    store._commits.sync_lock.acquire()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            version = store.update_versioned("t", append("child\n"))[1]
            store.append_if_deferred("t", "again\n", version, batch=True)
            store.flush("t")
            code = 0
        finally:
            os._exit(code)
    store._commit_lock.release()
    store._commits.sync_lock.release()
    assert child_exit_code(pid, "the forked child waited on a lock its parent held at the fork") == 0
    assert store.read("t") == "before\nchild\nagain\n"
    store.close()


def test_threads_lose_no_append(store: Store) -> None:
    def work(worker: int) -> None:
        for i in range(50):
            store.update("shared", append(f"{worker}:{i}\n"))

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(work, range(8)))
    assert_all_lines(store.read("shared"), workers=8, count=50)


def test_processes_lose_no_append(shared_store: Store) -> None:
    store = shared_store
    store.write("shared", "")
    spawn = multiprocessing.get_context("spawn")
    workers = [spawn.Process(target=append_lines, args=(describe(store), w, 200)) for w in range(4)]
    for process in workers:
        process.start()
    for process in workers:
        process.join(timeout=240)
    assert [process.exitcode for process in workers] == [0] * 4
    assert_all_lines(store.read("shared"), workers=4, count=200)


def assert_all_lines(value: str | None, *, workers: int, count: int) -> None:
    lines = (value or "").splitlines()
    assert len(lines) == workers * count
    for worker in range(workers):
        assert [line for line in lines if line.startswith(f"{worker}:")] == [f"{worker}:{i}" for i in range(count)]


# --- Versions: what the saver's fast path relies on ---


def test_version_changes_with_every_write(store: Store) -> None:
    assert store.version("t") is None
    seen = []
    for change in (lambda old: "one\n", append("two\n"), lambda old: "other\n", lambda old: ""):
        new, version = store.update_versioned("t", change)
        assert new == store.read("t") and version is not None and version == store.version("t")
        seen.append(version)
    seen.append(store.append_if("t", "x\n", seen[-1]))
    assert seen[-1] == store.version("t") and store.read("t") == "x\n"
    store.delete("t")
    assert store.version("t") is None
    store.write("t", "x\n")  # the same value again, after a delete: still a new version
    seen.append(store.version("t"))
    assert None not in seen and len(set(seen)) == len(seen)


def test_a_no_op_update_reports_the_version_too(store: Store) -> None:
    store.update_versioned("t", lambda old: "v\n")
    new, version = store.update_versioned("t", lambda old: old)
    assert new == "v\n" and version is not None and store.version("t") == version
    assert store.update_versioned("t", lambda old: None) == (None, None) and store.version("t") is None
    assert store.update_versioned("never", lambda old: None) == (None, None) and list(store.keys()) == []


def test_append_if_refuses_a_stale_version_and_writes_nothing(store: Store) -> None:
    assert store.append_if("absent", "x", None) is None
    _new, first = store.update_versioned("t", lambda old: "one\n")
    second = store.append_if("t", "two\n", first)
    assert second is not None and second != first and second == store.version("t")
    assert store.append_if("t", "stale\n", first) is None
    assert store.append_if("t", "garbage\n", ("not", "a", "version")) is None
    assert store.read("t") == "one\ntwo\n" and store.version("t") == second
    store.delete("t")
    assert store.append_if("t", "after delete\n", second) is None
    assert store.read("t") is None and list(store.keys()) == []
    store.write("t", "one\ntwo\n")
    assert store.append_if("t", "recreated\n", second) is None
    assert store.read("t") == "one\ntwo\n"


def test_another_store_object_sees_every_write(shared_store: Store) -> None:
    store = shared_store
    other = reopen(describe(store))
    try:
        _new, version = store.update_versioned("t", lambda old: "one\n")
        assert other.version("t") == version
        moved = other.append_if("t", "two\n", version)
        assert store.version("t") == moved != version
        assert store.append_if("t", "lost\n", version) is None
        assert store.read("t") == other.read("t") == "one\ntwo\n"
        other.write("t", "rewritten\n")
        assert store.version("t") not in (version, moved) and store.read("t") == "rewritten\n"
    finally:
        other.close()


@pytest.mark.parametrize("value", VALUES + ["lone \ud800 high", "nul \x00 char"], ids=range(len(VALUES) + 2))
def test_append_if_stores_exactly_or_refuses(store: Store, value: str) -> None:
    _new, version = store.update_versioned("t", lambda old: "head\n")
    try:
        moved = store.append_if("t", value, version)
    except StoreError:
        assert store.read("t") == "head\n" and store.version("t") == version
    else:
        assert moved == store.version("t") and store.read("t") == "head\n" + value


def test_threads_racing_append_if_one_winner_per_version(store: Store) -> None:
    store.write("shared", "")
    with ThreadPoolExecutor(6) as pool:
        list(pool.map(lambda worker: append_if_loop(store, worker, 30), range(6)))
    assert_one_winner_per_version(store.read("shared"), workers=6, count=30)


def test_processes_racing_append_if_one_winner_per_version(shared_store: Store) -> None:
    store = shared_store
    store.write("shared", "")
    spawn = multiprocessing.get_context("spawn")
    workers = [spawn.Process(target=append_if_lines, args=(describe(store), w, 50)) for w in range(4)]
    for process in workers:
        process.start()
    for process in workers:
        process.join(timeout=240)
    assert [process.exitcode for process in workers] == [0] * 4
    assert_one_winner_per_version(store.read("shared"), workers=4, count=50)


def assert_one_winner_per_version(value: str | None, *, workers: int, count: int) -> None:
    """Every worker's lines are there once, in order, and no two appended at the same version."""
    lines = (value or "").splitlines()
    assert_all_lines("".join(line.rsplit(":", 1)[0] + "\n" for line in lines), workers=workers, count=count)
    versions = [line.split(":", 2)[2] for line in lines]
    assert len(set(versions)) == len(versions)


async def test_async_versions(astore: Store) -> None:
    assert await astore.aversion("t") is None
    new, version = await astore.aupdate_versioned("t", lambda old: "one\n")
    assert new == "one\n" and version is not None and version == await astore.aversion("t")
    assert version == astore.version("t")
    moved = await astore.aappend_if("t", "two\n", version)
    assert moved is not None and moved != version and moved == await astore.aversion("t")
    assert await astore.aappend_if("t", "stale\n", version) is None
    assert await astore.aread("t") == "one\ntwo\n"
    assert await astore.aupdate_versioned("t", lambda old: None) == (None, None)
    assert await astore.aversion("t") is None and await astore.aappend_if("t", "x", moved) is None


async def test_async_racing_append_if_one_winner(astore: Store) -> None:
    _new, version = await astore.aupdate_versioned("t", lambda old: "")
    for round_ in range(5):
        results = await asyncio.gather(*(astore.aappend_if("t", f"{round_}:{w}\n", version) for w in range(6)))
        winners = [result for result in results if result is not None]
        assert len(winners) == 1 and winners[0] == await astore.aversion("t")
        version = winners[0]
    assert len((await astore.aread("t") or "").splitlines()) == 5


def test_sqlite_lone_appends_commit_synced_and_batches_share_one_fsync(tmp_path: Path) -> None:
    """A lone append syncs the WAL in its own commit (synchronous=FULL): no separate fsync.
    Appends that come together commit unsynced, and one flush of the WAL serves them all."""
    store = SQLiteStore(tmp_path / "db.sqlite")
    syncs: list[int] = []
    sync_wal = store._sync_wal
    store._sync_wal = lambda: syncs.append(store._commits.written) or sync_wal()  # type: ignore[method-assign]
    version = store.update_versioned("t", lambda old: "a\n")[1]
    assert len(syncs) == 1  # an update: a NORMAL commit, then the WAL's fsync
    version = store.append_if_deferred("t", "b\n", version)
    with store._connection() as conn:
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    store.flush("t")
    assert len(syncs) == 1 and not store._commits.pending
    version = store.append_if_deferred("t", "c\n", version, batch=True)
    version = store.append_if_deferred("t", "d\n", version)  # one is pending before it: unsynced too
    assert store._commits.pending
    store.flush("t")
    assert len(syncs) == 2 and not store._commits.pending
    assert store.read("t") == "a\nb\nc\nd\n"
    store.close()


# --- Async twins ---


async def test_async_twins(astore: Store) -> None:
    assert await astore.aread("t") is None
    assert await astore.aupdate("t", append("one\n")) == "one\n"
    assert await astore.aupdate("t", append("two\n")) == "one\ntwo\n"
    await astore.awrite("u", "ü\u2028")
    assert await astore.aread("u") == "ü\u2028"
    assert sorted(await astore.akeys()) == ["t", "u"]
    with pytest.raises(RuntimeError):
        await astore.aupdate("t", fail)
    assert await astore.aread("t") == "one\ntwo\n"
    await astore.adelete("t")
    assert await astore.aupdate("u", lambda old: None) is None
    assert await astore.akeys() == []


async def test_async_concurrent_updates_lose_nothing(astore: Store) -> None:
    async def work(worker: int) -> None:
        for i in range(25):
            await astore.aupdate("shared", append(f"{worker}:{i}\n"))

    await asyncio.gather(*(work(w) for w in range(4)))
    assert_all_lines(await astore.aread("shared"), workers=4, count=25)
    assert astore.read("shared") == await astore.aread("shared")


# --- A state machine against a plain dict (local stores: fast) ---


class StoreMachine(RuleBasedStateMachine):
    """Random updates, deletes, failing changes and reads agree with a dict."""

    kind = "memory"
    keys = st.sampled_from(["a", "b/..", "nul\x00", "é🧵", ""])
    texts = st.text(max_size=12)

    def __init__(self) -> None:
        super().__init__()
        self.directory = tempfile.mkdtemp(prefix="telar-machine-")
        self.store: Store = {
            "memory": lambda: MemoryStore(),
            "file": lambda: FileStore(Path(self.directory, "store"), fsync=False),
            "sqlite": lambda: SQLiteStore(Path(self.directory, "db.sqlite"), fsync=False),
        }[self.kind]()
        self.model: dict[str, str] = {}

    @rule(key=keys, value=texts)
    def write(self, key: str, value: str) -> None:
        assert self.store.update(key, lambda _old: value) == value
        self.model[key] = value

    @rule(key=keys, suffix=texts)
    def extend(self, key: str, suffix: str) -> None:
        expected = self.model.get(key, "") + suffix
        assert self.store.update(key, lambda old: (old or "") + suffix) == expected
        self.model[key] = expected

    @rule(key=keys, by_update=st.booleans())
    def delete(self, key: str, by_update: bool) -> None:
        if by_update:
            self.store.update(key, lambda _old: None)
        else:
            self.store.delete(key)
        self.model.pop(key, None)

    @rule(key=keys)
    def failing_change(self, key: str) -> None:
        with pytest.raises(RuntimeError):
            self.store.update(key, fail)

    @invariant()
    def agrees_with_dict(self) -> None:
        assert sorted(self.store.keys()) == sorted(self.model)
        for key, value in self.model.items():
            assert self.store.read(key) == value

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.directory, ignore_errors=True)


@pytest.mark.parametrize("kind", LOCAL_KINDS)
def test_state_machine_against_dict(kind: str) -> None:
    machine = type(f"StoreMachine_{kind}", (StoreMachine,), {"kind": kind})
    run_state_machine_as_test(machine, settings=settings(max_examples=30, stateful_step_count=15, deadline=None))


# --- Server faults: a dropped connection fails one call, changes nothing, and the next call works ---


def drop_connections(store: Store) -> None:
    """End the server connections of `store` (and only of it: other test runs share the servers)."""
    kind, options = describe(store)
    if kind == "postgres":
        postgres_admin(
            "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE application_name = %s",
            (options["schema"],),
        )
    else:
        admin = redis_admin()
        for client in admin.client_list(_type="normal"):
            if client["name"] == options["prefix"].rstrip(":"):
                admin.client_kill_filter(_id=client["id"])
        admin.close()


def dropping(store: Store, suffix: str) -> Callable[[str | None], str]:
    """A change that drops the store's connections mid-update (once), then appends `suffix`."""
    dropped: list[bool] = []

    def change(old: str | None) -> str:
        if not dropped:
            drop_connections(store)
            dropped.append(True)
        return (old or "") + suffix

    return change


@pytest.fixture(params=["postgres", "redis"])
def server_store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    return make_store(request.param, tmp_path, request)


def test_connections_dropped_mid_update(server_store: Store) -> None:
    """Postgres holds its connection through the change, so the update fails and rolls back;
    Redis holds none between its commands (compare-and-set), so it either reconnects and applies
    the change exactly once, or fails before the write: never half, never twice."""
    store = server_store
    store.write("t", "before\n")
    try:
        result = store.update("t", dropping(store, "once\n"))
    except StoreError as exc:
        assert f"server at {store.server}" in str(exc)  # type: ignore[attr-defined]
        assert store.read("t") == "before\n"
    else:
        assert store.kind == "redis" and result == "before\nonce\n" == store.read("t")
    drop_connections(store)  # idle pooled connections, dropped between calls, are replaced silently
    before = store.read("t")
    assert store.update("t", append("after\n")) == f"{before}after\n" == store.read("t")


async def test_connections_dropped_mid_update_async(server_store: Store) -> None:
    store = server_store
    try:
        await store.awrite("t", "before\n")
        try:
            result = await store.aupdate("t", dropping(store, "once\n"))
        except StoreError as exc:
            assert f"server at {store.server}" in str(exc)  # type: ignore[attr-defined]
            assert await store.aread("t") == "before\n"
        else:
            assert store.kind == "redis" and result == "before\nonce\n" == await store.aread("t")
        drop_connections(store)
        await asyncio.sleep(0.1)  # let the loop see the closed sockets
        before = await store.aread("t")
        assert await store.aupdate("t", append("after\n")) == f"{before}after\n" == await store.aread("t")
    finally:
        await store.aclose()


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[Callable[[], None]]:
    """A redis-server of our own on a free port (AOF, fsync always), and a function that restarts it."""
    if shutil.which("redis-server") is None:
        unavailable("redis-server is not installed")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(tmp_path)]
    command += ["--appendonly", "yes", "--appendfsync", "always", "--save", ""]
    server: list[subprocess.Popen[bytes]] = []

    def start() -> None:
        server.append(subprocess.Popen(command, stdout=subprocess.DEVNULL))
        client = redis_admin().from_url(f"redis://127.0.0.1:{port}")
        for _ in range(100):
            try:
                client.ping()
                break
            except Exception:
                time.sleep(0.05)
        client.close()

    start()
    yield port, start, server
    for process in server:
        process.kill()
        process.wait()


def test_redis_scripts_flushed(private_redis: Any) -> None:
    """Scripts run by EVALSHA; a server that lost them (SCRIPT FLUSH, a restart) gets them again by EVAL."""
    from telar_checkpoint.stores.redis import RedisStore

    port, _start, _server = private_redis
    store = RedisStore(f"redis://127.0.0.1:{port}", connect_timeout=2)
    admin = redis_admin().from_url(f"redis://127.0.0.1:{port}")
    try:
        store.write("t", "a\n")
        admin.script_flush()
        version = store.version("t")
        admin.script_flush()
        assert store.append_if("t", "b\n", version) is not None

        async def both() -> None:
            admin.script_flush()
            version = await store.aversion("t")
            admin.script_flush()
            assert await store.aappend_if("t", "c\n", version) is not None
            admin.script_flush()
            assert await store.aupdate("t", append("d\n")) == "a\nb\nc\nd\n"
            await store.aclose()

        asyncio.run(both())
        assert store.read("t") == "a\nb\nc\nd\n"
    finally:
        admin.close()
        store.close()


def test_redis_server_down_then_back(private_redis: Any) -> None:
    from telar_checkpoint.stores.redis import RedisStore

    port, start, server = private_redis
    store = RedisStore(f"redis://127.0.0.1:{port}", connect_timeout=2)
    try:
        store.write("t", "before\n")
        server[-1].kill()
        server[-1].wait()
        for call in (lambda: store.read("t"), lambda: store.update("t", append("lost\n"))):
            with pytest.raises(StoreError, match=f"Redis server at 127.0.0.1:{port}"):
                call()
        start()
        assert store.read("t") == "before\n"
        assert store.update("t", append("after\n")) == "before\nafter\n"
    finally:
        store.close()
