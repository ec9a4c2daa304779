"""Several processes on one store, through TelarSaver: nothing lost, every write seen at once,
and a run paused in one process resumes in another. Every store that processes can share."""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver

from telar_checkpoint import CheckpointCodec, TelarSaver
from tests.graphs import normalize, resume, with_interrupt
from tests.stores import describe, processes, reopen

PROCESSES, PUTS = 4, 200


def _saver(description: tuple[str, dict[str, Any]]) -> TelarSaver:
    return TelarSaver(reopen(description))


def put_many(description: tuple[str, dict[str, Any]], worker: int) -> list[str]:
    """PUTS checkpoints on thread "shared", each the child of this worker's previous one."""
    saver = _saver(description)
    config: dict = {"configurable": {"thread_id": "shared", "checkpoint_ns": ""}}
    acknowledged = []
    for step in range(PUTS):
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"worker": worker, "step": step, "log": [f"w{worker}"] * (step % 5 + 1)}
        config = saver.put(config, checkpoint, {"source": "loop", "step": step, "parents": {}, "worker": worker}, {})
        acknowledged.append(config["configurable"]["checkpoint_id"])
    saver.store.close()
    return acknowledged


def pause(description: tuple[str, dict[str, Any]]) -> str:
    graph = with_interrupt().compile(checkpointer=_saver(description))
    out = graph.invoke({"request": "deploy", "log": []}, {"configurable": {"thread_id": "paused"}})
    return repr(normalize(out))


def put_one(description: tuple[str, dict[str, Any]]) -> str:
    saver = _saver(description)
    checkpoint = empty_checkpoint()
    saver.put({"configurable": {"thread_id": "seen", "checkpoint_ns": ""}}, checkpoint, {"source": "loop", "step": 1, "parents": {}}, {})
    return checkpoint["id"]


@pytest.fixture
def store(shared_store):
    return shared_store


@pytest.fixture
def shared(shared_store) -> tuple[str, dict[str, Any]]:
    return describe(shared_store)


def spawn() -> Any:
    return processes()  # a process of its own, started without the ~1 s of imports (see tests.stores)


def test_processes_writing_one_thread_lose_nothing_and_match_the_codec(store, shared) -> None:
    with spawn().Pool(PROCESSES) as pool:
        acknowledged = pool.starmap(put_many, [(shared, w) for w in range(PROCESSES)])
    stored = store.read("shared")
    codec = CheckpointCodec()
    records = codec.decode_history("shared", stored)
    assert len(records) == PROCESSES * PUTS
    assert {r.id for r in records} == {cid for ids in acknowledged for cid in ids}
    # The history is what the codec gives for the same puts, in the order the store took them.
    # Each put goes on the history the previous one returned (as the saver does), not on a parse of
    # the whole string so far (quadratic: 8 s of this test); the last one goes through the public
    # `append`, which parses all the others.
    replay, history = None, None
    for record in records[:-1]:
        replay, history = codec.edit(replay, codec.put_of(record), history=history)
    replay = codec.append(replay, records[-1])
    assert replay == stored
    for worker, ids in enumerate(acknowledged):
        mine = [r for r in records if r.metadata["worker"] == worker]
        assert [r.id for r in mine] == ids and all(r.checkpoint["channel_values"]["worker"] == worker for r in mine)


def test_a_write_in_another_process_is_seen_as_soon_as_it_is_acknowledged(store, shared) -> None:
    saver = TelarSaver(store)
    config = {"configurable": {"thread_id": "seen"}}
    assert saver.get_tuple(config) is None
    for _ in range(3):
        with spawn().Pool(1) as pool:
            cid = pool.apply(put_one, (shared,))
        assert saver.get_tuple(config).config["configurable"]["checkpoint_id"] == cid


def test_a_run_paused_in_one_process_resumes_in_another(store, shared) -> None:
    with spawn().Pool(1) as pool:
        paused = pool.apply(pause, (shared,))
    graph = with_interrupt().compile(checkpointer=TelarSaver(store))
    config = {"configurable": {"thread_id": "paused"}}
    assert graph.get_state(config).next == ("ask",)
    done = normalize(graph.invoke(resume("yes"), config))

    reference = with_interrupt().compile(checkpointer=InMemorySaver())
    assert paused == repr(normalize(reference.invoke({"request": "deploy", "log": []}, config)))
    assert done == normalize(reference.invoke(resume("yes"), config))
