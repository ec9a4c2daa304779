"""The writers of a thread take turns: each builds on the history the one before it kept.

LangGraph writes a step's checkpoint and its tasks' pending writes from several threads at
once. Each write takes the thread's turn (`writing.Turns`), edits the history kept for the
store's version, appends, and leaves the turn before it waits for the disk; another saver (or
process) that moved the thread meanwhile makes the append find a new version, and the change
is then applied to what the store holds.
"""

from __future__ import annotations

import os
import threading

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from telar_checkpoint import MemoryStore, TelarSaver
from telar_checkpoint.history import History
from tests.stores import child_exit_code


def config(**extra) -> dict:
    return {"configurable": {"thread_id": "t", "checkpoint_ns": "", **extra}}


def meta(step: int) -> dict:
    return {"source": "loop", "step": step, "parents": {}}


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


def test_writers_of_a_thread_at_once_each_append_their_own_lines(store) -> None:
    """Eight threads' pending writes and the step's put, at once: each is one append built on
    the history the writer before it kept (none falls back to a whole update), and all are stored."""
    saver = TelarSaver(store)
    first = first_checkpoint(saver)
    appends = counted(store, "append_if_deferred" if store.defers_appends else "append_if")
    updates: list[str] = []
    update = store.update_versioned
    store.update_versioned = lambda key, change: updates.append(key) or update(key, change)  # type: ignore[method-assign]
    gate = threading.Barrier(9)

    def task(i: int) -> None:
        gate.wait()
        saver.put_writes(config(checkpoint_id=first["id"]), [("ch", i)], f"task-{i}")

    threads = [threading.Thread(target=task, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    gate.wait()
    saver.put(config(checkpoint_id=first["id"]), empty_checkpoint(), meta(0), {})
    for thread in threads:
        thread.join(10)
    assert updates == [] and len(appends) == 9
    assert sorted(TelarSaver(store).get_tuple(config(checkpoint_id=first["id"])).pending_writes) == [
        (f"task-{i}", "ch", i) for i in range(8)
    ]


def test_a_put_that_cannot_be_encoded_stores_nothing_and_leaves_the_thread_usable() -> None:
    store = MemoryStore()
    saver = TelarSaver(store)
    first = first_checkpoint(saver)
    saver.put_writes(config(checkpoint_id=first["id"]), [("ch", 5)], "task")
    bad = empty_checkpoint()
    bad["channel_values"] = {"ch": object()}
    with pytest.raises(Exception, match="object"):
        saver.put(config(checkpoint_id=first["id"]), bad, meta(0), {})
    assert saver.get_tuple(config()).pending_writes == [("task", "ch", 5)]
    assert bad["id"] not in store.read("t")
    saver.put(config(checkpoint_id=first["id"]), empty_checkpoint(), meta(0), {})
    assert len(History.parse("t", store.read("t")).entries) == 2


def test_a_write_whose_thread_another_saver_moved_is_applied_to_what_is_stored(store) -> None:
    """Another saver (another process, say) wrote meanwhile: the append finds the store moved on,
    and the change is applied to what is there."""
    saver, other = TelarSaver(store), TelarSaver(store)
    first = first_checkpoint(saver)
    other.put_writes(config(checkpoint_id=first["id"]), [("ch", 2)], "theirs")
    saver.put_writes(config(checkpoint_id=first["id"]), [("ch", 1)], "mine")
    saver.put(config(checkpoint_id=first["id"]), empty_checkpoint(), meta(0), {})
    text = store.read("t")
    assert sorted(TelarSaver(store).get_tuple(config(checkpoint_id=first["id"])).pending_writes) == [
        ("mine", "ch", 1),
        ("theirs", "ch", 2),
    ]
    assert History.parse("t", text).torn is None


@pytest.mark.skipif(not hasattr(os, "fork"), reason="forks")
def test_a_forked_child_does_not_wait_on_a_turn_its_parent_held(tmp_path) -> None:
    """Forked while a parent's writer held the thread's turn, the child writes on turns of its own."""
    from telar_checkpoint import FileStore

    saver = TelarSaver(FileStore(tmp_path))
    first = first_checkpoint(saver)
    lock = saver._writer.turns.sync("t")
    lock.acquire()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            saver.put(config(checkpoint_id=first["id"]), empty_checkpoint(), meta(0), {})
            code = 0
        finally:
            os._exit(code)
    try:
        code = child_exit_code(pid, "the forked child waited on a turn its parent held at the fork")
    finally:
        lock.release()
    assert code == 0
    saver.put_writes(config(checkpoint_id=first["id"]), [("ch", 1)], "parent-task")
    assert saver.get_tuple(config(checkpoint_id=first["id"])).pending_writes == [("parent-task", "ch", 1)]


def test_a_rewrite_keeps_its_error_to_itself() -> None:
    """Every change goes through the one write path: a rewrite (a trim, a repair, a migration)
    takes its turn like any write; a failing change fails the rewrite alone, the writes before
    it stay stored, and the next rewrite returns the history it stored."""
    store = MemoryStore()
    saver = TelarSaver(store)
    first = first_checkpoint(saver)
    saver.put_writes(config(checkpoint_id=first["id"]), [("ch", 0)], "task-0")

    def refuse(old: str | None) -> str | None:
        assert old is not None and "task-0" in old, "the change sees the writes before it"
        raise ValueError("changed meanwhile")

    with pytest.raises(ValueError, match="changed meanwhile"):
        saver.rewrite("t", refuse)
    assert saver.get_tuple(config()).pending_writes == [("task-0", "ch", 0)]
    saver.put_writes(config(checkpoint_id=first["id"]), [("ch", 1)], "task-1")
    marked = saver.rewrite("t", lambda old: old + "")
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
