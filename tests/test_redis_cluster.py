"""RedisStore's key layout: on a Redis Cluster, a thread's keys in one hash slot, ids with braces
apart, app servers in several processes sharing the cluster; on a single server, a prefix written
by the release before the index (schema 2) read as it is, its index built when rebuilt.

The shared suites (StoreTests in tests/test_store_contract.py, the savers' tests) run on the
cluster too, as the "redis-cluster" store kind."""

from __future__ import annotations

import asyncio
import zlib
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from telar_checkpoint import TelarSaver
from telar_checkpoint.errors import StoreError, UsageError
from telar_checkpoint.stores import Store, open_store
from telar_checkpoint.stores.url import cluster_nodes
from tests.graphs import history_summary, multi_step
from tests.servers import REDIS_CLUSTER_URL, uses_servers
from tests.stores import describe, make_store, processes, redis_admin, redis_cluster_admin, reopen

BRACED = ["{a}", "{a}b", "a{", "}", "{}", "{", "{{a}}", "x{a}y", "", "nul\x00{", "тред{🧵}", "{00000000}"]


@pytest.fixture
@uses_servers("redis-cluster")
def cluster_store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    return make_store("redis-cluster", tmp_path, request)


def keys_under(prefix: str) -> list[bytes]:
    admin = redis_cluster_admin()
    try:
        return list(admin.scan_iter(match=prefix.encode() + b"*", count=1000))
    finally:
        admin.close()


def test_a_threads_keys_share_one_hash_slot(cluster_store: Store) -> None:
    """Every key of a thread (value, token, terms) is in one slot, as the server computes it
    (CLUSTER KEYSLOT), whatever braces its id holds; the threads spread over the slots."""
    store = cluster_store
    for key in BRACED:
        store.write(key, f"value of {key}\n")
        store.index(key, ["run:1"])
    prefix = store.prefix.encode()  # type: ignore[attr-defined]
    by_thread: dict[bytes, list[bytes]] = defaultdict(list)
    for raw in keys_under(store.prefix):  # type: ignore[attr-defined]
        if raw[len(prefix) : len(prefix) + 2] in (b"h:", b"v:", b"t:"):
            by_thread[raw[len(prefix) + 2 :]].append(raw)
    assert sorted(part[10:].decode("utf-8", "surrogatepass") for part in by_thread) == sorted(BRACED)
    admin = redis_cluster_admin()
    try:
        slots = {}
        for part, raws in by_thread.items():
            assert len(raws) == 3
            found = {admin.execute_command("CLUSTER KEYSLOT", raw) for raw in raws}
            assert len(found) == 1, f"the keys of thread {part!r} are in slots {found}"
            slots[part] = found.pop()
    finally:
        admin.close()
    assert len(set(slots.values())) > 1


def test_ids_with_braces_do_not_collide(cluster_store: Store) -> None:
    store = cluster_store
    versions = {}
    for i, key in enumerate(BRACED):
        versions[key] = store.update_versioned(key, lambda old, i=i: f"{i}\n")[1]
    assert sorted(store.keys()) == sorted(BRACED) == store.sorted_keys()
    assert [store.read(key) for key in BRACED] == [f"{i}\n" for i in range(len(BRACED))]
    assert store.append_if("{a}", "more\n", versions["{a}"]) is not None
    assert store.append_if("{a}b", "stale\n", versions["{a}"]) is None
    store.delete("{}")
    assert store.read("{}") is None and store.read("{") == f"{BRACED.index('{')}\n"
    assert store.read("{a}") == f"{BRACED.index('{a}')}\nmore\n" and store.read("{a}b") == f"{BRACED.index('{a}b')}\n"
    assert sorted(store.keys()) == sorted(set(BRACED) - {"{}"}) == store.sorted_keys()
    assert store.foreign() == []


def test_a_delete_racing_a_write_of_the_same_thread_keeps_what_the_write_indexed(cluster_store: Store) -> None:
    """On a cluster the key set and the terms' sets are cleaned up after a delete, by separate
    commands: a write (with its terms) landing between the delete and that cleanup keeps its
    entries, which the cleanup restores when it looks again."""
    store = cluster_store
    store.index("t", ["run:old"])
    store.write("t", "old\n")
    steps = store._delete_steps("t")  # type: ignore[attr-defined]
    step = next(steps)
    reply = store._eval(*step)  # type: ignore[attr-defined]  # the delete itself: value, token and own terms
    store.index("t", ["run:old", "run:new"])  # a write racing the cleanup
    store.write("t", "new\n")
    with pytest.raises(StopIteration):
        while True:
            step = steps.send(reply)
            reply = store._eval(*step) if type(step).__name__ == "_Eval" else store._command(*step)  # type: ignore[attr-defined]
    assert store.read("t") == "new\n"
    assert store.sorted_keys() == ["t"]
    assert store.indexed("run:old") == ["t"] == store.indexed("run:new")
    store.delete("t")
    assert store.sorted_keys() == [] and store.indexed("run:old") == [] and store.indexed("run:new") == []
    assert keys_under(store.prefix) != [] and all(  # type: ignore[attr-defined]
        raw.endswith((b"schema", b"index")) for raw in keys_under(store.prefix)  # type: ignore[attr-defined]
    )


def test_cluster_urls(cluster_store: Store) -> None:
    assert cluster_nodes("rediss+cluster://user:p%40ss@a:7000,b,[::1]:7002/0") == (
        [("a", 7000), ("b", 6379), ("::1", 7002)],
        {"ssl": True, "username": "user", "password": "p@ss"},
    )
    for bad in ("redis+cluster://a:7000/1", "redis+cluster://a:7000?x=1", "redis+cluster://a:x", "redis+cluster://a:7000,,b"):
        with pytest.raises(UsageError, match="store URL"):
            cluster_nodes(bad)
    store = open_store(REDIS_CLUSTER_URL, prefix=cluster_store.prefix, connect_timeout=2).store  # type: ignore[attr-defined]
    try:
        cluster_store.write("t", "v\n")
        assert store.kind == "redis-cluster" and store.read("t") == "v\n"
    finally:
        store.close()
    with pytest.raises(UsageError, match="cannot hold '{'"):
        open_store(REDIS_CLUSTER_URL, prefix="app{1}:")


def test_an_unreachable_cluster_is_a_store_error_naming_it() -> None:
    store = open_store("redis+cluster://127.0.0.1:1,127.0.0.1:2", connect_timeout=1).store
    try:
        with pytest.raises(StoreError, match=r"Redis cluster at 127\.0\.0\.1:1,127\.0\.0\.1:2"):
            store.read("t")
        with pytest.raises(StoreError, match="Redis cluster at 127.0.0.1:1"):
            asyncio.run(store.aread("t"))
    finally:
        store.close()


def test_a_single_redis_prefix_is_refused_on_a_cluster(cluster_store: Store) -> None:
    """Keys of the single-server layout (schema 2) copied into a cluster are not read as nothing."""
    admin = redis_cluster_admin()
    try:
        admin.set(cluster_store.prefix + "schema", 2)  # type: ignore[attr-defined]
    finally:
        admin.close()
    with pytest.raises(StoreError, match="schema version 2, written for a single Redis server.*migrate"):
        cluster_store.write("t", "v\n")


# --- App servers: processes running real graphs on the cluster ---

PROCESSES, INVOKES = 4, 3


def app_server(description: tuple[str, dict[str, Any]], worker: int, shared_turn: Any) -> list[str]:
    """A stand-in for an app server (run in a child process): INVOKES runs of a real graph on a
    thread of its own and on the shared thread (taking its turn there, as a server queues the
    runs of one thread), half of the servers through the async API; the checkpoint ids it saw."""
    saver = TelarSaver(reopen(description))
    graph = multi_step().compile(checkpointer=saver)
    seen = []
    for n in range(INVOKES):
        for thread in (f"own-{worker}", "shared"):
            config = {"configurable": {"thread_id": thread}}
            with shared_turn if thread == "shared" else _nothing():
                if worker % 2:
                    asyncio.run(graph.ainvoke({"log": [f"w{worker}n{n}"]}, config))
                else:
                    graph.invoke({"log": [f"w{worker}n{n}"]}, config)
                seen.append(graph.get_state(config).config["configurable"]["checkpoint_id"])
    saver.store.close()
    return seen


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def linear(graph: Any, config: dict[str, Any]) -> list[str]:
    """The thread's checkpoint ids, newest first, checked to form one chain (nothing forked)."""
    history = list(graph.get_state_history(config))
    ids = [s.config["configurable"]["checkpoint_id"] for s in history]
    parents = [s.parent_config["configurable"]["checkpoint_id"] if s.parent_config else None for s in history]
    assert parents == [*ids[1:], None], "the thread's history forked"
    return ids


def test_app_servers_in_processes_share_the_cluster(cluster_store: Store) -> None:
    store = cluster_store
    context = processes()
    with context.Manager() as manager, context.Pool(PROCESSES) as pool:
        turn = manager.Lock()
        seen = pool.starmap(app_server, [(describe(store), w, turn) for w in range(PROCESSES)], chunksize=1)
    graph = multi_step().compile(checkpointer=TelarSaver(store))
    reference = multi_step().compile(checkpointer=InMemorySaver())
    for worker in range(PROCESSES):
        config = {"configurable": {"thread_id": f"own-{worker}"}}
        ids = linear(graph, config)
        assert set(seen[worker][::2]) <= set(ids)
        for n in range(INVOKES):
            reference.invoke({"log": [f"w{worker}n{n}"]}, config)
        assert history_summary(graph, config) == history_summary(reference, config)
    shared = {"configurable": {"thread_id": "shared"}}
    ids = linear(graph, shared)
    assert {cid for worker in seen for cid in worker[1::2]} <= set(ids)
    assert len(ids) == len(linear(reference, {"configurable": {"thread_id": "own-0"}})) * PROCESSES
    values = graph.get_state(shared).values
    assert values["count"] == 3 * PROCESSES * INVOKES  # every run's three steps, none lost
    runs = [entry for entry in values["log"] if entry[0] == "w"]
    assert sorted(runs) == sorted(f"w{w}n{n}" for w in range(PROCESSES) for n in range(INVOKES))
    assert sorted(store.sorted_keys()) == sorted(["shared", *(f"own-{w}" for w in range(PROCESSES))])


# --- Single server: a prefix of the release before the index (schema 2) ---

SCHEMA_2 = {"t": "one\ntwo\n", "nul\x00key": "é🧵\n", "{braced}": "x\n"}


@pytest.mark.servers("redis")
def test_a_schema_2_prefix_is_read_as_it_is_and_its_index_built_when_rebuilt(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """What the release before the index wrote: values and version tokens at the same keys, the
    schema at 2, no key set. It is read and appended to as it is; it records schema 3 (so that the
    release before refuses to write there) with its index not ready, until `set_index_ready`,
    which builds the key set."""
    store = make_store("redis", tmp_path, request)
    prefix = store.prefix.encode()  # type: ignore[attr-defined]
    admin = redis_admin()
    try:
        admin.set(prefix + b"schema", 2)
        for key, value in SCHEMA_2.items():
            raw = key.encode("utf-8", "surrogatepass")
            admin.set(prefix + b"h:" + raw, value.encode())
            admin.set(prefix + b"v:" + raw, b"0123456789abcdef")
    finally:
        admin.close()
    assert {key: store.read(key) for key in store.keys()} == SCHEMA_2
    version = store.version("t")
    assert version == (b"0123456789abcdef", len("one\ntwo\n"))
    assert store.append_if("t", "three\n", version) is not None and store.read("t") == "one\ntwo\nthree\n"
    assert not store.index_ready()
    store.write("new", "v\n")
    assert store.schema_version() == 3  # type: ignore[attr-defined]
    assert not store.index_ready() and store.sorted_keys() == ["new"]
    store.set_index_ready()
    assert store.index_ready() and store.sorted_keys() == sorted([*SCHEMA_2, "new"])
    other = reopen(describe(store))
    try:
        assert other.index_ready() and other.foreign() == []
    finally:
        other.close()


def test_the_cluster_tag_is_the_ids_crc32(cluster_store: Store) -> None:
    """The layout the module's docs give, so that a dump can be read without this code."""
    cluster_store.write("a}b", "v\n")
    raw = "a}b".encode()
    assert cluster_store.prefix.encode() + b"h:{%08x}a}b" % zlib.crc32(raw) in keys_under(cluster_store.prefix)  # type: ignore[attr-defined]
