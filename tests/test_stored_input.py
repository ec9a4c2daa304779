"""Stored data as an attacker's input, round two: a checkpoint line's `extra` cannot stand in for
the line's own fields, and metadata JSON cannot hold is refused at `put`, never stored as
something else (issue "Stored data as an attacker's input, round two", items 7 and 8)."""

from __future__ import annotations

import asyncio

import orjson
import pytest
from langgraph.checkpoint.base import empty_checkpoint

from telar_checkpoint import CorruptLineError, MemoryStore, SerializationError, TelarError, TelarSaver
from telar_checkpoint.verify import verify_thread

CONFIG = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}


def stored_thread() -> tuple[MemoryStore, str]:
    store = MemoryStore()
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"count": 1}
    checkpoint["channel_versions"] = {"count": 1}
    TelarSaver(store).put(CONFIG, checkpoint, {"source": "input", "step": -1}, {"count": 1})
    return store, store.read("t") or ""


@pytest.mark.parametrize(
    "field, value",
    [("id", "someone-else"), ("channel_values", {"count": 99}), ("channel_versions", {"count": 7}), ("v", 1), ("ts", "x")],
)
def test_extra_holding_a_field_of_the_line_is_corrupt(field: str, value: object) -> None:
    store, text = stored_thread()
    doc = orjson.loads(text)
    doc["extra"] = {field: value}
    store.write("t", orjson.dumps(doc).decode() + "\n")
    with pytest.raises(CorruptLineError, match=rf"thread 't', line 1: field 'extra' holds {field!r}, a checkpoint field the line holds itself"):
        TelarSaver(store).get_tuple(CONFIG)
    assert [p.code for p in verify_thread("t", store.read("t") or "")] == ["corrupt-line"]


def test_extra_still_holds_the_checkpoint_fields_langgraph_adds() -> None:
    store, text = stored_thread()
    doc = orjson.loads(text)
    doc["extra"] = {"pending_sends": []}
    store.write("t", orjson.dumps(doc).decode() + "\n")
    got = TelarSaver(store).get_tuple(CONFIG)
    assert got is not None and got.checkpoint["pending_sends"] == [] and got.checkpoint["channel_values"] == {"count": 1}


@pytest.mark.parametrize(
    "metadata, place",
    [({"score": float("nan")}, "score"), ({"score": float("inf")}, "score"), ({"scores": [1.0, float("-inf")]}, r"scores\[1\]"),
     ({"nested": {"deep": float("nan")}}, r"nested.deep")],
)
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_metadata_json_cannot_hold_is_refused_at_put_and_nothing_is_stored(metadata: dict, place: str, mode: str) -> None:
    store, before = stored_thread()
    saver = TelarSaver(store)
    put = {"source": "loop", "step": 0, **metadata}
    with pytest.raises(SerializationError, match=rf"metadata must be JSON: '{place}' is NaN or an infinity"):
        if mode == "sync":
            saver.put(CONFIG, empty_checkpoint(), put, {})
        else:
            asyncio.run(saver.aput(CONFIG, empty_checkpoint(), put, {}))
    assert store.read("t") == before


def test_a_lone_surrogate_in_metadata_is_refused_with_our_error() -> None:
    store, before = stored_thread()
    with pytest.raises(SerializationError, match="metadata must be JSON") as raised:
        TelarSaver(store).put(CONFIG, empty_checkpoint(), {"source": "loop", "step": 0, "note": "a\ud800b"}, {})
    assert isinstance(raised.value, TelarError)
    assert store.read("t") == before
