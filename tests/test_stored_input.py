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
    message = rf"thread 't', line 1: field 'extra' holds {field!r}, a checkpoint field the line holds itself"
    with pytest.raises(CorruptLineError, match=message):
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


# --- item 1: the file store's own index follows no symbolic link -------------------------------


@pytest.mark.parametrize("target", ["another store's index", "any file", "dangling"])
@pytest.mark.parametrize("name", ["index.sqlite3", "index.sqlite3-wal", "index.sqlite3-journal"])
def test_a_symlinked_index_database_changes_nothing_outside_the_store(tmp_path, target: str, name: str) -> None:
    import os

    from langgraph.graph import START, StateGraph
    from typing_extensions import TypedDict

    from telar_checkpoint import FileStore

    class State(TypedDict):
        n: int

    builder = StateGraph(State)
    builder.add_node("inc", lambda s: {"n": s["n"] + 1})
    builder.add_edge(START, "inc")
    other = tmp_path / "other"
    with TelarSaver(FileStore(other)) as saver:  # closed: its index holds all it will
        saver.put(CONFIG, empty_checkpoint(), {"source": "input", "step": -1, "run_id": "x"}, {})
    outside = {"another store's index": other / ".index" / "index.sqlite3", "any file": tmp_path / "notes.txt",
               "dangling": tmp_path / "nowhere" / "made.db"}[target]
    if target == "any file":
        outside.write_text("keep me\n")
    before = outside.read_bytes() if outside.exists() else None
    store_dir = tmp_path / "store"
    store = FileStore(store_dir)
    graph = builder.compile(checkpointer=TelarSaver(store))
    graph.invoke({"n": 0}, {"configurable": {"thread_id": "a"}, "metadata": {"run_id": "r1"}})
    store.close()
    link = store_dir / ".index" / name
    for existing in (store_dir / ".index").iterdir():
        existing.unlink()
    os.symlink(outside, link)
    store = FileStore(store_dir)
    saver = TelarSaver(store)
    graph = builder.compile(checkpointer=saver)
    graph.invoke({"n": 5}, {"configurable": {"thread_id": "b"}, "metadata": {"run_id": "r2"}})
    assert {t.config["configurable"]["thread_id"] for t in saver.list(None, filter={"run_id": "r1"})} == {"a"}
    saver.delete_for_runs(["r2"])
    assert saver.get_tuple({"configurable": {"thread_id": "b"}}) is None
    store.close()
    assert (outside.read_bytes() if outside.exists() else None) == before
    assert not link.is_symlink()


# --- item 9: a value nested deeper than JSON writers go, in every command -------------------------


@pytest.mark.parametrize("argv", [["show"], ["show", "--json"], ["diff"], ["history"], ["verify"]])
def test_a_deeply_nested_stored_write_is_printed_or_refused_in_one_line(tmp_path, capsys, argv: list[str]) -> None:
    from telar_checkpoint import FileStore
    from telar_checkpoint.cli import main

    store = FileStore(tmp_path)
    saver = TelarSaver(store)
    first = saver.put(CONFIG, empty_checkpoint(), {"source": "input", "step": -1}, {})
    second = saver.put(first, empty_checkpoint(), {"source": "loop", "step": 0}, {})
    cid = second["configurable"]["checkpoint_id"]
    deep = "[" * 600 + "1" + "]" * 600  # orjson reads 1,024 levels and writes 255
    line = f'{{"format":1,"kind":"writes","checkpoint":"{cid}","task":"t","path":"","writes":[[0,"x",{deep}]]}}\n'
    store.write("t", (store.read("t") or "") + line)
    try:  # it reads, or (where Python recurses less deeply) is refused in our words
        TelarSaver(store).get_tuple(CONFIG)
    except TelarError:
        pass
    command, *options = argv
    args = [command, str(tmp_path), "t"]
    if command == "diff":
        args += [first["configurable"]["checkpoint_id"], cid]
    code = main(args + options)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert code in (0, 4)
    if code == 4:
        assert err.count("\n") == 1 and "nested more than 255 levels deep" in err
