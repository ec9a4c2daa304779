"""Hostile input: ids that look like paths or queries, injected filters, serializer exploits, hand-edited garbage.

Thread ids, namespaces and checkpoint ids with ``/``, ``..``, NUL, newlines, 10,000
characters or non-ASCII text round-trip exactly through the saver and stay inside the
store's directory or key space; `list(filter=...)` with SQL or Redis metacharacters matches
only what it names; payloads from LangGraph's serializer advisories execute nothing; a history
edited by hand into garbage gives a clear error for its thread and leaves the others readable.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import random
from pathlib import Path
from typing import Any

import orjson
import pytest
from langgraph.checkpoint.base import empty_checkpoint

from telar_checkpoint import FileStore, RefusedTypeError, SerializationError, StoredDataError, TelarError, TelarSaver
from telar_checkpoint.history import History
from telar_checkpoint.stores import Store

LONG_ASCII = "x" * 10_000
LONG_TEXT = "".join(  # random CJK (incompressible), with path and control characters mixed in
    rng.choice(["/", "..", "\x00", "\n", "🧵"]) if rng.random() < 0.1 else chr(rng.randrange(0x4E00, 0xA000))
    for rng in [random.Random(8)]
    for _ in range(10_000)
)
SHORT = [
    "a/b", "../../etc/passwd", "..", ".", "/abs/path", "C:\\windows\\x", "nul\x00byte", "new\nline", "cr\rlf\r\n",
    "tab\tx", "тред-é中🧵", "%2F..%2F%00", "", " ", "*", "h:*", "[a-z]?", "' OR '1'='1' --", "\"; DROP TABLE x; --",
    "\\", "\u2028\u2029", "\ufeffbom",
]  # fmt: skip
HOSTILE = [*SHORT, LONG_ASCII, LONG_TEXT]
CHECKPOINT_IDS = [i for i in HOSTILE if i]  # an empty checkpoint id means "the latest" to LangGraph
NAMESPACES = ["", "a/b:../..|c", "nul\x00ns", "new\nline:ns", "тред:中🧵", "x" * 10_000]


def put(saver: TelarSaver, thread: str, ns: str, cid: str, value: Any = None) -> dict[str, Any]:
    checkpoint = empty_checkpoint()
    checkpoint["id"] = cid
    checkpoint["channel_values"] = {"value": value if value is not None else [thread, ns, cid]}
    config = {"configurable": {"thread_id": thread, "checkpoint_ns": ns}}
    parents = {"": "root"} if ns else {}
    return saver.put(config, checkpoint, {"source": "loop", "step": 1, "parents": parents, "who": thread}, {})


def test_hostile_ids_round_trip_exactly(store: Store, tmp_path: Path) -> None:
    saver = TelarSaver(store)
    threads = SHORT
    for number, thread in enumerate(threads):
        ns = NAMESPACES[number % len(NAMESPACES)]
        cid = CHECKPOINT_IDS[(number * 7 + 3) % len(CHECKPOINT_IDS)]
        saved = put(saver, thread, ns, cid)
        assert saved["configurable"] == {"thread_id": thread, "checkpoint_ns": ns, "checkpoint_id": cid}
        saver.put_writes(saved, [("w", cid)], f"task {thread[:20]}")
        got = saver.get_tuple(saved)
        assert got is not None and got.config == saved
        assert got.checkpoint["channel_values"] == {"value": [thread, ns, cid]}
        assert got.pending_writes == [(f"task {thread[:20]}", "w", cid)]
        listed = list(saver.list({"configurable": {"thread_id": thread}}))
        assert [t.config for t in listed] == [saved]
    assert sorted(store.keys()) == sorted(threads)
    assert sorted({t.config["configurable"]["thread_id"] for t in saver.list(None)}) == sorted(threads)
    assert store.foreign() == []
    if isinstance(store, FileStore):
        assert_inside(store, tmp_path)
    if store.kind == "redis":
        assert_redis_keys_under_prefix(store, threads)
    for thread in threads:
        saver.delete_thread(thread)
        assert saver.get_tuple({"configurable": {"thread_id": thread}}) is None
    assert list(saver.list(None)) == []
    assert sorted(store.keys()) == sorted(threads)  # what is left is the record of each deletion
    assert all(History.parse(t, store.read(t)).only_deleted for t in threads)


def assert_inside(store: FileStore, tmp_path: Path) -> None:
    """Every file the store made is under its directory, named as one of ours (or a lock/temp)."""
    directory = store.directory.resolve()
    for root, _dirs, files in os.walk(tmp_path):
        for name in files:
            path = Path(root, name).resolve()
            assert path.is_relative_to(directory), f"{path} is outside {directory}"
    for thread in HOSTILE:  # long ids too: the name is inside the directory even if the OS refuses it
        assert store.path(thread).resolve().is_relative_to(directory)
        assert all(part not in ("..", ".", "") for part in store.path(thread).relative_to(store.directory).parts)


def assert_redis_keys_under_prefix(store: Store, threads: list[str]) -> None:
    from tests.stores import redis_admin

    client = redis_admin()
    try:
        for thread in threads:  # nothing written at the bare id, or at the id after "h:" without the prefix
            raw = thread.encode("utf-8", "surrogatepass")
            assert not client.exists(raw) and not client.exists(b"h:" + raw)
            assert client.exists(store.prefix.encode() + b"h:" + raw)  # type: ignore[attr-defined]
    finally:
        client.close()


@pytest.mark.parametrize("long_id", [LONG_ASCII, LONG_TEXT], ids=["10k ASCII", "10k non-ASCII"])
def test_long_thread_ids_round_trip_exactly(store: Store, long_id: str) -> None:
    saver = TelarSaver(store)
    saved = put(saver, long_id, LONG_ASCII, long_id[::-1])
    got = saver.get_tuple(saved)
    assert got is not None and got.config == saved
    assert got.checkpoint["channel_values"]["value"] == [long_id, LONG_ASCII, long_id[::-1]]
    assert list(store.keys()) == [long_id]
    saver.delete_thread(long_id)
    assert list(store.keys()) == [long_id] and History.parse(long_id, store.read(long_id)).only_deleted
    assert saver.get_tuple(saved) is None


# --- filters are data, never code ---

METACHARACTERS = [
    "' OR '1'='1", "'; DROP TABLE telar_histories; --", "\" OR \"\"=\"", "%", "_", "*", "?", "[a-z]", "\\",
    "$where", "{\"$ne\": null}", "key) OR (1=1", "EVAL return 1", "\r\nFLUSHALL\r\n",
]  # fmt: skip


def test_filters_with_metacharacters_match_only_what_they_name(store: Store) -> None:
    saver = TelarSaver(store)
    for number, meta in enumerate(METACHARACTERS):
        checkpoint = empty_checkpoint()
        metadata = {"source": "loop", "step": number, "parents": {}, meta: meta, "tag": meta}
        saver.put({"configurable": {"thread_id": f"t{number}", "checkpoint_ns": ""}}, checkpoint, metadata, {})
    for number, meta in enumerate(METACHARACTERS):
        hits = list(saver.list(None, filter={meta: meta}))
        assert [t.config["configurable"]["thread_id"] for t in hits] == [f"t{number}"]
        assert [t.metadata["tag"] for t in saver.list(None, filter={"tag": meta})] == [meta]
        assert list(saver.list(None, filter={"source": meta})) == []
        assert list(saver.list(None, filter={"tag": meta, "step": number + 1})) == []
    assert len(list(saver.list(None))) == len(METACHARACTERS)  # nothing dropped, nothing added
    assert sorted(store.keys()) == sorted(f"t{n}" for n in range(len(METACHARACTERS)))


def test_metadata_with_nul_is_stored_exactly_or_refused(store: Store) -> None:
    saver = TelarSaver(store)
    try:
        saver.put({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, empty_checkpoint(), {"tag": "a\x00b"}, {})
    except TelarError:
        return  # refused: acceptable
    assert [t.metadata["tag"] for t in saver.list(None)] == ["a\x00b"]


# --- serializer advisories: stored payloads that try to run code ---

LC_CONSTRUCTOR = {"lc": 1, "type": "constructor", "id": ["os", "system"], "kwargs": {"command": "touch PWNED"}}
LC_METHOD = {"lc": 2, "type": "constructor", "id": ["os", "system"], "method": "system", "args": ["touch PWNED"]}


def msgpack_ext(code: int, *parts: str) -> str:
    import ormsgpack

    return base64.b64encode(ormsgpack.packb(ormsgpack.Ext(code, ormsgpack.packb(parts)))).decode()


TAGGED_EXPLOITS = {
    "$model naming os.system": {"$model": {"class": ["os", "system"], "fields": {"command": "touch PWNED"}}},
    "$dataclass with a method key": {"$dataclass": {"class": ["os", "system"], "fields": {}, "method": "system"}},
    "$error naming subprocess.Popen": {"$error": {"class": ["subprocess", "Popen"], "args": [["touch", "PWNED"]]}},
    "$enum naming builtins.eval": {"$enum": {"class": ["builtins", "eval"], "value": "__import__('os')"}},
    "$serde msgpack constructor": {"$serde": ["msgpack", msgpack_ext(0, "os", "system", "touch PWNED")]},
    "$serde msgpack method": {"$serde": ["msgpack", msgpack_ext(2, "os", "system", "touch PWNED", "system")]},
    "$serde pickle": {"$serde": ["pickle", base64.b64encode(b"cos\nsystem\n(S'touch PWNED'\ntR.").decode()]},
}


def history_with(value: Any) -> str:
    """A one-checkpoint history written by the saver, whose state value is then replaced by `value`."""
    from telar_checkpoint import MemoryStore

    store = MemoryStore()
    put(TelarSaver(store), "t", "", "1f000000-0000-6000-8000-000000000001", value="placeholder")
    text = store.read("t") or ""
    assert '"placeholder"' in text
    return text.replace('"placeholder"', orjson.dumps(value).decode(), 1)


@pytest.fixture
def no_code_runs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[Any]:
    """Calls to os.system / subprocess / eval are recorded instead of run."""
    import subprocess

    calls: list[Any] = []
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(os, "system", lambda *a, **k: calls.append(("os.system", a)))
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: calls.append(("Popen", a)))
    return calls


@pytest.mark.parametrize("name", list(TAGGED_EXPLOITS))
def test_tagged_exploit_payloads_run_nothing(store: Store, name: str, no_code_runs: list[Any]) -> None:
    store.write("evil", history_with(TAGGED_EXPLOITS[name]))
    put(TelarSaver(store), "good", "", "2")
    saver = TelarSaver(store)
    try:  # refused, or loaded as inert data (an unknown exception class loads as its description)
        got = saver.get_tuple({"configurable": {"thread_id": "evil"}})
        assert got is not None and type(got.checkpoint["channel_values"]["value"]) in (str, dict, list)
    except SerializationError as exc:
        assert "stored value" in str(exc) or "serializ" in str(exc)
    assert saver.get_tuple({"configurable": {"thread_id": "good"}}) is not None
    assert no_code_runs == [] and not Path("PWNED").exists()


INERT = {
    "lc constructor": LC_CONSTRUCTOR,
    "lc method": LC_METHOD,
    "$serde json lc constructor": {"$serde": ["json", base64.b64encode(json.dumps(LC_CONSTRUCTOR).encode()).decode()]},
}


@pytest.mark.parametrize("name", list(INERT))
def test_lc_payloads_stay_inert_data(name: str, no_code_runs: list[Any]) -> None:
    """JsonSerializer gives no meaning to LangChain's "lc" objects: they load as the plain dicts they are."""
    from telar_checkpoint import MemoryStore

    store = MemoryStore()
    store.write("evil", history_with(INERT[name]))
    got = TelarSaver(store).get_tuple({"configurable": {"thread_id": "evil"}})
    assert got is not None and got.checkpoint["channel_values"]["value"] in (LC_CONSTRUCTOR, LC_METHOD)
    assert no_code_runs == [] and not Path("PWNED").exists()


def test_jsonplus_serde_runs_nothing_from_a_stored_msgpack_payload(no_code_runs: list[Any]) -> None:
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    from telar_checkpoint import MemoryStore

    store = MemoryStore()
    store.write("evil", history_with(TAGGED_EXPLOITS["$serde msgpack constructor"]))
    with pytest.raises(RefusedTypeError, match="os.system") as caught:
        TelarSaver(store, serde=JsonPlusSerializer()).get_tuple({"configurable": {"thread_id": "evil"}})
    assert caught.value.refused == "os.system"
    assert no_code_runs == []


AES_KEY = b"0123456789abcdef"


class RawBytes:
    """A serializer that writes given bytes as given type: LangGraph's EncryptedSerializer encrypts them."""

    def __init__(self, type_: str, data: bytes) -> None:
        self.typed = (type_, data)

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        return self.typed

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        raise AssertionError("never read")


def msgpack_bytes(code: int, *parts: Any) -> bytes:
    import ormsgpack

    return ormsgpack.packb(ormsgpack.Ext(code, ormsgpack.packb(parts)))


def nested_in_a_message() -> bytes:
    """An allowed class (AIMessage) whose stored fields hold a constructor call of os.system."""
    import ormsgpack

    evil = ormsgpack.Ext(0, ormsgpack.packb(("os", "system", "touch PWNED")))
    fields = ormsgpack.packb(("langchain_core.messages.ai", "AIMessage", {"content": evil}, "model_validate_json"))
    return ormsgpack.packb(ormsgpack.Ext(5, fields))


LC2_SYSTEM = {"lc": 2, "type": "constructor", "id": ["os", "system"], "args": ["touch PWNED"]}
# name -> (stored type, stored bytes, what the refusal names)
FOREIGN_EXPLOITS = {
    "constructor": ("msgpack", msgpack_bytes(0, "os", "system", "touch PWNED"), "os.system"),
    "positional": ("msgpack", msgpack_bytes(1, "os", "system", ["touch PWNED"]), "os.system"),
    "keywords": ("msgpack", msgpack_bytes(2, "subprocess", "Popen", {"args": ["touch", "PWNED"]}), "subprocess.Popen"),
    "pydantic": ("msgpack", msgpack_bytes(5, "os", "system", {"command": "touch PWNED"}, "x"), "os.system"),
    "method": ("msgpack", msgpack_bytes(3, "os", "system", "touch PWNED", "system"), "os.system.system"),
    "nested in a message": ("msgpack", nested_in_a_message(), "os.system"),
    "unknown extension": ("msgpack", msgpack_bytes(42, "os", "system"), "msgpack extension type 42"),
    "pickle": ("pickle", b"cos\nsystem\n(S'touch PWNED'\ntR.", "pickle"),
    "json lc 2": ("json", json.dumps(LC2_SYSTEM).encode(), "os.system (a LangChain constructor)"),
    "json lc secret": ("json", b'{"lc": 1, "type": "secret", "id": ["HOME"]}', "HOME (a LangChain secret)"),
}


def foreign_serde(kind: str) -> Any:
    from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    if kind == "jsonplus":
        return JsonPlusSerializer()
    return EncryptedSerializer.from_pycryptodome_aes(key=AES_KEY)  # around JsonPlusSerializer()


def stored_serde_value(kind: str, type_: str, data: bytes) -> dict[str, Any]:
    """`data` of `type_` as the saver stores it for serializer `kind` (encrypted by LangGraph's own API)."""
    from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

    if kind == "encrypted":
        type_, data = EncryptedSerializer.from_pycryptodome_aes(RawBytes(type_, data), key=AES_KEY).dumps_typed(None)
    return {"$serde": [type_, base64.b64encode(data).decode()]}


@pytest.mark.parametrize("kind", ["jsonplus", "encrypted"])
@pytest.mark.parametrize("name", list(FOREIGN_EXPLOITS))
def test_langgraph_serializers_are_handed_no_stored_type_off_the_allowlist(
    store: Store, kind: str, name: str, no_code_runs: list[Any]
) -> None:
    """Whatever LangGraph serializer reads the thread, a stored value naming a type that is not
    allowed is refused with our error, naming it, before the serializer sees it; other threads read."""
    type_, data, refused = FOREIGN_EXPLOITS[name]
    store.write("evil", history_with(stored_serde_value(kind, type_, data)))
    saver = TelarSaver(store, serde=foreign_serde(kind))
    put(saver, "good", "", "2", value={"fine": [1, 2]})
    with pytest.raises(RefusedTypeError) as caught:
        saver.get_tuple({"configurable": {"thread_id": "evil"}})
    assert caught.value.refused == refused and refused in str(caught.value)
    with pytest.raises(RefusedTypeError):  # the thread index reads values too: also refused
        list(saver.list({"configurable": {"thread_id": "evil"}}))
    assert saver.get_tuple({"configurable": {"thread_id": "good"}}).checkpoint["channel_values"]["value"] == {"fine": [1, 2]}  # type: ignore[union-attr]
    assert no_code_runs == [] and not Path("PWNED").exists()


@pytest.mark.parametrize("kind", ["jsonplus", "encrypted"])
@pytest.mark.parametrize("damage", ["not msgpack", "truncated extension"])
def test_a_damaged_foreign_value_is_our_error(kind: str, damage: str) -> None:
    from telar_checkpoint import MemoryStore

    data = b"\xc1\xc1" if damage == "not msgpack" else msgpack_bytes(0, "uuid")
    store = MemoryStore()
    store.write("bad", history_with(stored_serde_value(kind, "msgpack", data)))
    with pytest.raises(SerializationError, match=r"\$serde"):
        TelarSaver(store, serde=foreign_serde(kind)).get_tuple({"configurable": {"thread_id": "bad"}})


# --- a history edited by hand into garbage ---

GARBAGE = [
    "not json at all\n",
    '{"format":1,"kind":"checkpoint"}\n',
    '{"format":99,"kind":"checkpoint"}\n',
    "[1,2,3]\n",
    '{"no":"format"}\n{"format":1}\n',
]


RAW_BYTES_KINDS = ["file", "sqlite", "redis"]  # memory holds str; PostgreSQL text is always valid UTF-8


def raw_garbage(store: Store, key: str) -> None:
    """Writes invalid UTF-8 bytes as the stored value, below the store API."""
    data = b'{"format":1,"kind":"checkpoint","id":"\xff\xfe\xc3"}\n'
    if isinstance(store, FileStore):
        store.path(key).write_bytes(data)
    elif store.kind == "sqlite":
        import sqlite3

        with contextlib.closing(sqlite3.connect(store.path)) as conn, conn:  # type: ignore[attr-defined]
            conn.execute("DELETE FROM telar_chunks WHERE key = ?", (key.encode(),))
            conn.execute("INSERT INTO telar_chunks (key, value) VALUES (?, CAST(? AS TEXT))", (key.encode(), data))
    elif store.kind == "redis":
        store._client.set(store._raw_key(key), data)  # type: ignore[attr-defined]
    else:
        raise AssertionError(f"a {store.kind} store cannot hold bytes that are not UTF-8")


def test_hand_edited_garbage_is_a_clear_error_for_that_thread_only(store: Store) -> None:
    saver = TelarSaver(store)
    for n in range(3):
        put(saver, f"good-{n}", "", f"1f00000{n}")
    bad = [f"bad-{n}" for n in range(len(GARBAGE) + 1)]
    for key, garbage in zip(bad, GARBAGE):
        put(saver, key, "", "1")
        store.write(key, garbage)
    store.write(bad[-1], "\x01\x02 binary-ish \x7f\n")
    for key in bad:
        with pytest.raises(StoredDataError) as caught:
            saver.get_tuple({"configurable": {"thread_id": key}})
        assert f"thread {key!r}" in str(caught.value)
        with pytest.raises(StoredDataError):
            list(saver.list({"configurable": {"thread_id": key}}))
    for n in range(3):  # every other thread is readable
        config = {"configurable": {"thread_id": f"good-{n}"}}
        assert saver.get_tuple(config).checkpoint["id"] == f"1f00000{n}"  # type: ignore[union-attr]
        assert len(list(saver.list(config))) == 1
    with pytest.raises(StoredDataError, match="thread 'bad-"):  # listing every thread names the bad one
        list(saver.list(None))
    for key in bad:  # and a bad thread can be deleted
        saver.delete_thread(key)
    assert len(list(saver.list(None))) == 3


@pytest.mark.parametrize("store", RAW_BYTES_KINDS, indirect=True)
def test_hand_edited_invalid_utf8_is_a_clear_error(store: Store) -> None:
    """Bytes that are not UTF-8, written below the store API, read as a StoredDataError naming the thread."""
    saver = TelarSaver(store)
    put(saver, "good", "", "1")
    put(saver, "bad", "", "1")
    raw_garbage(store, "bad")
    with pytest.raises(StoredDataError, match="thread 'bad'"):
        saver.get_tuple({"configurable": {"thread_id": "bad"}})
    assert saver.get_tuple({"configurable": {"thread_id": "good"}}) is not None
