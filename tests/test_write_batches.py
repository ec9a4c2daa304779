"""Pending writes that linger are appended by the next writer of their thread, in one store write.

LangGraph puts a step's checkpoint right after its tasks' `put_writes`; a `put_writes` that
lingers leaves its lines with the thread's turns (`writer_locks.Batch`) and returns once the
writer that carried them made them durable, or once it wrote them itself.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from telar_checkpoint import CheckpointCodec, CheckpointRecord, MemoryStore, StoreError, TelarSaver
from telar_checkpoint.history import History
from telar_checkpoint.stores.group_commit import DeferredAppends
from tests.stores import child_exit_code


def config(**extra) -> dict:
    return {"configurable": {"thread_id": "t", "checkpoint_ns": "", **extra}}


def meta(step: int) -> dict:
    return {"source": "loop", "step": step, "parents": {}}


def lingering(saver: TelarSaver, seconds: float) -> None:
    """Make every put_writes of `saver` linger `seconds` (the real linger is learned)."""
    saver._writer.lingers.wrote = lambda thread_id, *, writes: seconds if writes else 0.0  # type: ignore[method-assign]


def started(saver: TelarSaver, checkpoint_id: str, task: str, value: object = 1) -> threading.Thread:
    """A put_writes in a thread of its own, once its lines wait in the thread's batch."""
    turns = saver._writer.locks.sync("t")
    before = len(turns.batches["t"].changes) if "t" in turns.batches else 0
    writer = threading.Thread(target=saver.put_writes, args=(config(checkpoint_id=checkpoint_id), [("ch", value)], task))
    writer.start()
    deadline = time.monotonic() + 5
    while (len(turns.batches["t"].changes) if "t" in turns.batches else 0) == before and time.monotonic() < deadline:
        time.sleep(0.0005)
    assert "t" in turns.batches, "the put_writes did not wait in a batch"
    return writer


def counted(store, name: str) -> list[str]:
    """Record the suffixes the saver appends through `store.<name>`."""
    calls: list[str] = []
    method = getattr(store, name)

    def wrapper(key, suffix, version, **kw):
        calls.append(suffix)
        return method(key, suffix, version, **kw)

    setattr(store, name, wrapper)
    return calls


def first_checkpoint(saver: TelarSaver) -> dict:
    checkpoint = empty_checkpoint()
    saver.put(config(), checkpoint, meta(-1), {})
    saver.get_tuple(config())  # the history is kept: later writes take the fast path
    return checkpoint


def test_lingering_writes_are_appended_with_the_next_put_in_one_store_write(store) -> None:
    saver = TelarSaver(store)
    first = first_checkpoint(saver)
    lingering(saver, 30.0)
    appends = counted(store, "append_if_deferred" if isinstance(store, DeferredAppends) else "append_if")
    writers = [started(saver, first["id"], f"task-{i}", i) for i in range(3)]
    assert "task-0" not in (store.read("t") or ""), "nothing is written before the carrier comes"
    began = time.monotonic()
    second = empty_checkpoint()
    saver.put(config(checkpoint_id=first["id"]), second, meta(0), {})
    for writer in writers:
        writer.join(10)
    assert time.monotonic() - began < 10 and not any(w.is_alive() for w in writers)
    assert len(appends) == 1 and appends[0].count("\n") == 4  # three writes lines and the put's
    stored = saver.get_tuple(config(checkpoint_id=first["id"]))
    assert sorted(stored.pending_writes) == [(f"task-{i}", "ch", i) for i in range(3)]
    codec = CheckpointCodec()
    expected = codec.append(None, CheckpointRecord(first, meta(-1), "", None))
    for i in range(3):
        expected = codec.add_writes(expected, "", first["id"], f"task-{i}", [(0, "ch", i)])
    expected = codec.append(expected, CheckpointRecord(second, meta(0), "", first["id"]))
    assert store.read("t") == expected


def test_a_lingering_write_that_no_writer_follows_writes_itself() -> None:
    store = MemoryStore()
    saver = TelarSaver(store)
    first = first_checkpoint(saver)
    lingering(saver, 0.05)
    began = time.monotonic()
    saver.put_writes(config(checkpoint_id=first["id"]), [("ch", 7)], "task")
    assert time.monotonic() - began >= 0.04  # it waited out its linger first
    assert saver.get_tuple(config()).pending_writes == [("task", "ch", 7)]
    assert "t" not in saver._writer.locks.sync("t").batches


def test_a_failed_carrier_fails_the_writes_it_carried() -> None:
    """The put's store write carried the pending writes: their callers see its error too."""
    store = MemoryStore()
    saver = TelarSaver(store)
    first = first_checkpoint(saver)
    lingering(saver, 30.0)
    failures: list[BaseException] = []

    def put_writes() -> None:
        try:
            saver.put_writes(config(checkpoint_id=first["id"]), [("ch", 1)], "task")
        except StoreError as exc:
            failures.append(exc)

    writer = threading.Thread(target=put_writes)
    turns = saver._writer.locks.sync("t")
    writer.start()
    deadline = time.monotonic() + 5
    while "t" not in turns.batches and time.monotonic() < deadline:
        time.sleep(0.0005)

    def refuse(*args, **kw):
        raise StoreError("disk on fire")

    store.append_if = refuse  # type: ignore[method-assign]
    with pytest.raises(StoreError, match="disk on fire"):
        saver.put(config(checkpoint_id=first["id"]), empty_checkpoint(), meta(0), {})
    writer.join(10)
    assert [str(f) for f in failures] == ["disk on fire"]
    assert "task" not in store.read("t")


def test_a_put_that_cannot_be_encoded_leaves_the_batch_to_its_writers() -> None:
    store = MemoryStore()
    saver = TelarSaver(store)
    first = first_checkpoint(saver)
    lingering(saver, 0.2)
    writer = started(saver, first["id"], "task", 5)
    bad = empty_checkpoint()
    bad["channel_values"] = {"ch": object()}
    with pytest.raises(Exception, match="object"):
        saver.put(config(checkpoint_id=first["id"]), bad, meta(0), {})
    writer.join(10)
    assert saver.get_tuple(config()).pending_writes == [("task", "ch", 5)]
    assert bad["id"] not in store.read("t")


def test_a_batch_whose_thread_another_saver_moved_is_written_whole(store) -> None:
    """Another saver (another process, say) wrote meanwhile: the carrier's append finds the store
    moved on and applies the batch's changes and its own to what is there."""
    saver, other = TelarSaver(store), TelarSaver(store)
    first = first_checkpoint(saver)
    lingering(saver, 30.0)
    writer = started(saver, first["id"], "mine", 1)
    other.put_writes(config(checkpoint_id=first["id"]), [("ch", 2)], "theirs")
    saver.put(config(checkpoint_id=first["id"]), empty_checkpoint(), meta(0), {})
    writer.join(10)
    text = store.read("t")
    assert sorted(TelarSaver(store).get_tuple(config(checkpoint_id=first["id"])).pending_writes) == [
        ("mine", "ch", 1),
        ("theirs", "ch", 2),
    ]
    assert History.parse("t", text).torn is None


async def test_async_lingering_writes_ride_with_the_next_put(astore) -> None:
    saver = TelarSaver(astore)
    first = empty_checkpoint()
    await saver.aput(config(), first, meta(-1), {})
    await saver.aget_tuple(config())
    lingering(saver, 30.0)
    appends = counted(astore, "aappend_if_deferred" if isinstance(astore, DeferredAppends) else "aappend_if")
    writer = asyncio.create_task(saver.aput_writes(config(checkpoint_id=first["id"]), [("ch", 1)], "task"))
    turns = saver._writer.locks.async_("t")
    deadline = time.monotonic() + 5
    while "t" not in turns.batches and time.monotonic() < deadline:
        await asyncio.sleep(0)
    assert "t" in turns.batches, "the aput_writes did not wait in a batch"
    await saver.aput(config(checkpoint_id=first["id"]), empty_checkpoint(), meta(0), {})
    await asyncio.wait_for(writer, 10)
    assert len(appends) == 1 and appends[0].count("\n") == 2
    assert (await saver.aget_tuple(config(checkpoint_id=first["id"]))).pending_writes == [("task", "ch", 1)]


async def test_async_lingering_write_writes_itself() -> None:
    saver = TelarSaver(MemoryStore())
    first = empty_checkpoint()
    await saver.aput(config(), first, meta(-1), {})
    await saver.aget_tuple(config())
    lingering(saver, 0.05)
    await asyncio.wait_for(saver.aput_writes(config(checkpoint_id=first["id"]), [("ch", 3)], "task"), 10)
    assert (await saver.aget_tuple(config())).pending_writes == [("task", "ch", 3)]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="forks")
def test_a_forked_child_neither_waits_on_nor_carries_its_parents_writers(tmp_path) -> None:
    """Forked while a parent's writer held its turn and a put_writes waited in a batch, the
    child writes on turns of its own, and leaves the parent's batch to the parent."""
    from telar_checkpoint import FileStore

    saver = TelarSaver(FileStore(tmp_path))
    first = first_checkpoint(saver)
    lingering(saver, 30.0)
    writer = started(saver, first["id"], "parent-task", 1)
    turns = saver._writer.locks.sync("t")
    turns.lock.acquire()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            saver.put(config(checkpoint_id=first["id"]), empty_checkpoint(), meta(0), {})
            text = saver.store.read("t") or ""
            code = 0 if "parent-task" not in text else 2
        finally:
            os._exit(code)
    try:
        code = child_exit_code(pid, "the forked child waited on a turn its parent held at the fork")
    finally:
        turns.lock.release()
    assert code == 0, "the child carried its parent's pending writes"
    saver.put(config(checkpoint_id=first["id"]), empty_checkpoint(), meta(0), {})
    writer.join(10)
    assert saver.get_tuple(config(checkpoint_id=first["id"])).pending_writes == [("parent-task", "ch", 1)]


def test_a_rewrite_carries_the_waiting_writes_and_keeps_its_error_to_itself() -> None:
    """Every change goes through the one write path: a rewrite (a trim, a repair, a migration)
    takes its turn after the writes waiting in the batch, stores them with its own change in
    one update, and a failing change fails the rewrite alone: the writes are stored."""
    store = MemoryStore()
    saver = TelarSaver(store)
    first = first_checkpoint(saver)
    lingering(saver, 30.0)
    writer = started(saver, first["id"], "task-0", 0)

    def refuse(old: str | None) -> str | None:
        assert old is not None and "task-0" in old, "the change sees the carried writes"
        raise ValueError("changed meanwhile")

    with pytest.raises(ValueError, match="changed meanwhile"):
        saver.rewrite("t", refuse)
    writer.join(10)
    assert not writer.is_alive()
    assert saver.get_tuple(config()).pending_writes == [("task-0", "ch", 0)]
    writer = started(saver, first["id"], "task-1", 1)
    marked = saver.rewrite("t", lambda old: old + "")
    writer.join(10)
    assert marked == store.read("t") and "task-1" in marked
    assert sorted(saver.get_tuple(config()).pending_writes) == [("task-0", "ch", 0), ("task-1", "ch", 1)]


async def test_async_rewrite_returns_the_new_history_or_raises_its_error(astore) -> None:
    saver = TelarSaver(astore)
    checkpoint = empty_checkpoint()
    await saver.aput(config(), checkpoint, meta(-1), {})
    before = await astore.aread("t")
    with pytest.raises(KeyError):
        await saver.arewrite("t", lambda old: {}["missing"])
    assert await astore.aread("t") == before
    assert await saver.arewrite("t", lambda old: None) is None
    assert await astore.aread("t") is None and await saver.aget_tuple(config()) is None
