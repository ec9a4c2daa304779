"""Server stores across event loops: each `asyncio.run` of a script or test is a new loop, and
neither the loop's shutdown nor a later loop may hang, whether or not the saver was closed;
the connections of a loop that ended are closed, not leaked (issue 17)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from telar_checkpoint import TelarSaver
from telar_checkpoint.stores import Store
from tests.stores import SERVER_KINDS, make_store, postgres_admin, redis_node_admins

LOOPS = 20
BOUND = 60.0  # seconds for all the loops; a run without the hang takes a few


def run_bounded(work: Callable[[], Any], timeout: float, hung: str) -> Any:
    """`work()` in a daemon thread; the test fails with `hung` if it does not end in `timeout`
    seconds (the thread is left behind: a hung loop cannot be stopped from outside)."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = work()
        except BaseException as exc:  # handed to the test's thread
            outcome["error"] = exc

    thread = threading.Thread(target=target, daemon=True, name="event-loops")
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        pytest.fail(hung)
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


def server_connections(store: Store) -> int:
    """The connections the server holds open for this test's store (by its application or client name)."""
    tag = getattr(store, "schema", None) or store.prefix.rstrip(":")  # type: ignore[attr-defined]
    if store.kind == "postgres":
        return postgres_admin("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (tag,))[0][0]
    with redis_node_admins(store) as admins:  # a cluster: every node
        return sum(1 for admin in admins for client in admin.client_list() if client.get("name") == tag)


def sync_connections(store: Store) -> int:
    """The connections a store's sync client keeps between calls: one (a cluster's: one per node)."""
    if store.kind != "redis-cluster":
        return 1
    with redis_node_admins(store) as admins:
        return len(admins)


def settled_connections(store: Store, expected: int, within: float = 5.0) -> int:
    """`server_connections` once it is down to `expected`, or after `within` seconds: a server
    counts a connection the client closed until its backend has seen the close (PostgreSQL
    showed one for some milliseconds after, in one CI run of several)."""
    deadline = time.monotonic() + within
    count = server_connections(store)
    while count > expected and time.monotonic() < deadline:
        time.sleep(0.05)
        count = server_connections(store)
    return count


def config(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


def checkpoint(n: int) -> Any:
    made = empty_checkpoint()
    made["channel_values"] = {"n": n}
    return made


@pytest.mark.parametrize("kind", SERVER_KINDS)
def test_event_loops_one_after_another_never_hang_nor_leak(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """The user's script of issue 17, 20 times in one process: a sync put, then a loop of its own.
    It hung about 1 run in 2 (psycopg_pool's workers swallowed the loop's cancellation)."""
    store = make_store(kind, tmp_path, request)
    saver = TelarSaver(store)
    metadata = {"source": "loop", "step": 0, "parents": {}}

    async def one_loop(i: int) -> int:
        """Loop `i`: the prune alone (the issue's script), or (one in four) concurrent writes, a
        listing and the prune; one loop in five closes the store at its end, the others leave it open."""
        threads = [f"t{i}-{w}" for w in range(4)] if i % 4 == 3 else []
        await asyncio.gather(*(saver.aput(config(t), checkpoint(i), metadata, {}) for t in threads))
        listed = [item async for item in saver.alist(None)] if i % 4 == 3 else []
        await saver.aprune([*threads, f"sync-{i}"], strategy="delete_all")
        if i % 5 == 1:
            await saver.store.aclose()
        return len(listed)

    def loops() -> list[int]:
        counts = []
        for i in range(LOOPS):
            saver.put(config(f"sync-{i}"), checkpoint(i), metadata, {})
            counts.append(asyncio.run(one_loop(i)))
        return counts

    counts = run_bounded(loops, BOUND, f"{LOOPS} event loops on a {kind} store did not finish in {BOUND:.0f} s (a loop hung)")
    assert counts == [5 if i % 4 == 3 else 0 for i in range(LOOPS)]  # each loop's own threads (the others were pruned)
    # Each loop's connections closed with it: only the sync connection is left (the loops' own
    # were 12 on Redis before, kept until collected; Postgres hung first). A server counts a
    # closed connection until its backend has seen the close (`settled_connections`).
    assert settled_connections(store, sync_connections(store)) <= sync_connections(store)
    saver.store.close()


@pytest.mark.servers("postgres")
def test_a_loop_closed_by_hand_has_its_postgres_connections_closed_by_the_next(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A loop closed without asyncio.run's shutdown step (``loop.close()`` by hand) cannot close
    its connections itself: the next loop that uses the store closes them."""
    store = make_store("postgres", tmp_path, request)
    store.write("t", "v\n")
    for _ in range(5):
        loop = asyncio.new_event_loop()
        try:
            assert loop.run_until_complete(asyncio.wait_for(store.aread("t"), 10)) == "v\n"
        finally:
            loop.close()
    assert server_connections(store) <= 2  # the sync one and the last closed loop's
    assert run_bounded(lambda: asyncio.run(store.aread("t")), 20, "a loop hung") == "v\n"
    assert settled_connections(store, 1) <= 1
