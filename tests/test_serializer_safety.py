"""Loading stored data never runs code the data names.

These replay the payload shapes of the published LangGraph/LangChain serializer
advisories against JsonSerializer, each with a payload that would leave a trace
(create a file, set a global, import a module) if anything ran:

- CVE-2025-64439: "json" checkpoints revived ``{"lc": 2, "type": "constructor"}``
  objects by importing the module named in ``id`` and calling it (reached when a
  lone surrogate made msgpack fail and the serializer fell back to JSON).
- GHSA-g48c-2wqr-h844 (CVE-2026-28277): msgpack extension types carrying
  ``(module, name, args)`` were imported and called on load.
- GHSA-fjqc-hq36-qh5p: a ``method`` field chose which attribute to call.
- CVE-2026-27794: a pickle fallback, loaded with ``pickle.loads``.
- CVE-2025-68664: user dicts shaped like the ``lc`` envelope were taken for one.
"""

from __future__ import annotations

import builtins
import importlib
import os
import pickle
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import ormsgpack
import pytest
from langgraph.checkpoint.serde.jsonplus import (
    EXT_CONSTRUCTOR_KW_ARGS,
    EXT_CONSTRUCTOR_POS_ARGS,
    EXT_CONSTRUCTOR_SINGLE_ARG,
    EXT_METHOD_SINGLE_ARG,
    EXT_PYDANTIC_V2,
    JsonPlusSerializer,
)

from telar_checkpoint.errors import SerializationError
from telar_checkpoint.serializer import JsonSerializer

PWNED: list[Any] = []  # a payload that ran would append here


def set_flag(value: Any = "ran") -> None:
    PWNED.append(value)


class SetsFlagWhenUnpickled:
    def __reduce__(self) -> tuple[Any, ...]:
        return (set_flag, ("pickle",))


HERE = set_flag.__module__  # this module, as a payload would name it


@pytest.fixture
def marker(tmp_path: Path) -> Iterator[Path]:
    """A file a shell payload would create; the test asserts it never appears."""
    PWNED.clear()
    path = tmp_path / "pwned"
    yield path
    assert not path.exists(), "a payload ran a shell command"
    assert PWNED == [], f"a payload called set_flag: {PWNED}"


@pytest.fixture
def evil_module(tmp_path: Path) -> Iterator[str]:
    """An importable module that leaves a trace when imported."""
    name = "telar_evil_payload_module"
    (tmp_path / f"{name}.py").write_text(
        f"import {HERE.split('.')[0]}\n"
        "from pathlib import Path\n"
        f"Path({str(tmp_path / 'imported')!r}).write_text('x')\n"
        "class Evil:\n    def __init__(self, *a, **k):\n        raise SystemExit('constructed')\n"
    )
    sys.path.insert(0, str(tmp_path))
    yield name
    sys.path.remove(str(tmp_path))
    assert name not in sys.modules, "loading imported a module named by the data"
    assert not (tmp_path / "imported").exists()


def shell(marker: Path) -> str:
    return f"touch {marker}"


# --- CVE-2025-64439 / CVE-2025-68664: the `lc` constructor envelope ---


def lc_payloads(marker: Path, module: str) -> list[dict[str, Any]]:
    return [
        {"lc": 2, "type": "constructor", "id": ["os", "system"], "args": [shell(marker)]},
        {"lc": 1, "type": "constructor", "id": ["subprocess", "Popen"], "kwargs": {"args": shell(marker), "shell": True}},
        {"lc": 2, "type": "constructor", "id": [*HERE.split("."), "set_flag"], "kwargs": {"value": "lc"}},
        {"lc": 2, "type": "constructor", "id": [module, "Evil"], "kwargs": {}},
        {"lc": 2, "type": "constructor", "id": ["builtins", "eval"], "args": ["__import__('os').system('x')"],
         "method": [None, "construct"]},
    ]  # fmt: skip


def test_lc_envelope_in_stored_json_is_only_data(marker: Path, evil_module: str) -> None:
    serde = JsonSerializer()
    for payload in lc_payloads(marker, evil_module):
        loaded = serde.loads_typed(("json", orjson.dumps({"state": payload})))
        assert loaded == {"state": payload}  # a plain dict: our format has no `lc` reviver
        assert type(loaded["state"]) is dict


def test_lc_envelope_in_user_state_round_trips_as_data(marker: Path, evil_module: str) -> None:
    serde = JsonSerializer()
    for payload in lc_payloads(marker, evil_module):
        assert serde.loads_typed(serde.dumps_typed(payload)) == payload


def test_lone_surrogate_never_falls_back_to_another_format() -> None:
    # The fallback that made CVE-2025-64439 reachable: we tag the string instead.
    type_name, data = JsonSerializer().dumps_typed({"text": "bad \ud800 surrogate"})
    assert type_name == "json"
    assert orjson.loads(data) == {"text": {"$str": ["bad ", 0xD800, " surrogate"]}}


# --- our own tags, pointed at code ---


def tag_payloads(marker: Path, module: str) -> list[dict[str, Any]]:
    fields = {"args": shell(marker), "shell": True}
    return [
        {"$model": {"class": "os:system", "fields": {"command": shell(marker)}}},
        {"$model": {"class": "subprocess:Popen", "fields": fields}},
        {"$dataclass": {"class": f"{HERE}:set_flag", "fields": {"value": "dc"}}},
        {"$namedtuple": {"class": "builtins:eval", "fields": {"source": "1"}}},
        {"$enum": {"class": "os:system", "value": shell(marker)}},
        {"$model_v1": {"class": f"{module}:Evil", "fields": {}}},
        {"$model": {"class": ["os", "system"], "fields": {}}},
        {"$exec": "import os"},
        {"$pickle": "gASVAAAAAAAAAAB9lC4="},
        {"$lc": {"id": ["os", "system"]}},
    ]


def test_tag_naming_a_class_that_is_not_a_loaded_data_class_gives_plain_data(marker: Path, evil_module: str) -> None:
    """A read never fails because of a value's type: a stored object naming a function,
    a class that is not a data class, or a module not imported gives its plain data;
    nothing named is imported or called. An unknown tag is not data of ours: an error."""
    for serde in (JsonSerializer(strict=False), JsonSerializer(strict=True)):
        for payload in tag_payloads(marker, evil_module):
            tag, body = next(iter(payload.items()))
            if not isinstance(body, dict) or "class" not in body:
                with pytest.raises(SerializationError, match="unknown tag") as info:
                    serde.from_jsonable({"messages": [payload]})
                assert repr(tag) in str(info.value)
            elif not isinstance(body["class"], str):
                with pytest.raises(SerializationError, match="not text"):
                    serde.from_jsonable({"messages": [payload]})
            else:
                plain = body["value"] if tag == "$enum" else body["fields"]
                assert serde.from_jsonable({"messages": [payload]}) == {"messages": [plain]}


def test_a_class_is_found_only_through_namespace_dicts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Finding a class by name runs no module __getattr__ (which may import), takes no
    alias bound to another class, and never builds a LangChain runnable (code, not data)."""
    import types

    import pydantic
    from langchain_core.language_models.fake_chat_models import FakeListChatModel

    calls: list[str] = []
    module = types.ModuleType("telar_lazy_module")
    module.__getattr__ = lambda name: calls.append(name) or pydantic.BaseModel  # type: ignore[attr-defined]

    class Real(pydantic.BaseModel):
        x: int = 0

    module.Alias = Real  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    serde = JsonSerializer(strict=False)
    for name in ("telar_lazy_module:Lazy", "telar_lazy_module:Alias"):
        assert serde.from_jsonable({"$model": {"class": name, "fields": {"x": 1}}}) == {"x": 1}
    assert calls == []
    chat = {"$model": {"class": "langchain_core.language_models.fake_chat_models:FakeListChatModel",
                       "fields": {"responses": ["hi"]}}}  # fmt: skip
    assert FakeListChatModel.__module__ + ":FakeListChatModel" == chat["$model"]["class"]
    assert serde.from_jsonable(chat) == {"responses": ["hi"]}


def test_tags_in_user_dicts_are_escaped(marker: Path, evil_module: str) -> None:
    serde = JsonSerializer()
    for payload in tag_payloads(marker, evil_module):
        stored = serde.to_jsonable(payload)
        assert set(stored) == {"$dict"}
        assert serde.from_jsonable(orjson.loads(orjson.dumps(stored))) == payload


def test_no_import_while_loading(monkeypatch: pytest.MonkeyPatch, marker: Path, evil_module: str) -> None:
    imported: list[str] = []
    real_import = builtins.__import__

    def spy_import(name: str, *args: Any, **kwargs: Any) -> Any:
        imported.append(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", spy_import)
    monkeypatch.setattr(importlib, "import_module", lambda name, package=None: imported.append(name))
    serde = JsonSerializer()
    payloads = tag_payloads(marker, evil_module) + lc_payloads(marker, evil_module)
    imported.clear()  # monkeypatch itself imports lazily
    for payload in payloads:
        try:
            serde.from_jsonable(payload)
        except SerializationError:
            pass
    assert imported == []


def test_method_field_is_refused(marker: Path) -> None:
    # GHSA-fjqc-hq36-qh5p: a `method` beside the fields picked what to call.
    serde = JsonSerializer()
    for tag in ("$model", "$dataclass", "$namedtuple"):
        payload = {tag: {"class": "HumanMessage", "fields": {"content": "x"}, "method": "model_validate_json"}}
        with pytest.raises(SerializationError, match=r"unexpected keys \['method'\]"):
            serde.from_jsonable(payload)
    with pytest.raises(SerializationError, match="unexpected keys"):
        serde.from_jsonable({"$datetime": {"local": "2024-01-01T00:00:00", "tz": None, "fold": 0,
                                           "method": ["os", "system"]}})  # fmt: skip


def test_a_stored_exception_comes_back_as_text(marker: Path, evil_module: str) -> None:
    """An exception is stored as its repr text, as LangGraph's serializer stores it; one
    stored by an earlier release as class and args reads back as that text too, and its
    class is never imported or built."""
    serde = JsonSerializer()
    assert serde.to_jsonable(ValueError("x")) == "ValueError('x')"
    out = serde.from_jsonable({"$error": {"class": f"{evil_module}:Evil", "args": ["boom", 3]}})
    assert out == "Evil('boom', 3)"
    assert not marker.exists()
    assert serde.from_jsonable({"$error": {"class": "ValueError", "args": ["x"]}}) == "ValueError('x')"
    assert serde.from_jsonable({"$error": {"class": "asyncio.CancelledError", "args": []}}) == "CancelledError()"


def test_allowed_class_of_the_wrong_kind_is_refused() -> None:
    serde = JsonSerializer()
    cases = [
        {"$model": {"class": "ValueError", "fields": {}}},
        {"$dataclass": {"class": "AIMessage", "fields": {"content": "x"}}},
        {"$enum": {"class": "Send", "value": 1}},
        {"$namedtuple": {"class": "Interrupt", "fields": {}}},
    ]
    for payload in cases:
        with pytest.raises(SerializationError, match="is not a"):
            serde.from_jsonable(payload)


def test_fixed_tables_refuse_names_outside_them() -> None:
    serde = JsonSerializer()
    bad = [
        {"$defaultdict": {"factory": "os.system", "items": {}}},
        {"$defaultdict": {"factory": "eval", "items": {}}},
        {"$zoneinfo": "../../../../etc/passwd"},
        {"$zoneinfo": "/etc/passwd"},
        {"$float": "1e999"},
        {"$map": [[[1], 2]]},  # unhashable key
        {"$set": [[1]]},
        {"$bytes": "not base64!"},
        {"$datetime": {"local": "x", "tz": {"$model": {"class": "os:system", "fields": {}}}, "fold": 0}},
    ]
    for payload in bad:
        with pytest.raises(SerializationError):
            serde.from_jsonable(payload)


# --- GHSA-g48c-2wqr-h844: msgpack extension types naming callables ---


def msgpack_ext(code: int, body: tuple[Any, ...]) -> bytes:
    return ormsgpack.packb({"v": ormsgpack.Ext(code, ormsgpack.packb(body))})


def msgpack_payloads(marker: Path) -> list[bytes]:
    return [
        msgpack_ext(EXT_CONSTRUCTOR_SINGLE_ARG, ("os", "system", shell(marker))),
        msgpack_ext(EXT_CONSTRUCTOR_POS_ARGS, ("subprocess", "call", ([shell(marker)],))),
        msgpack_ext(EXT_CONSTRUCTOR_KW_ARGS, (HERE, "set_flag", {"value": "msgpack"})),
        msgpack_ext(EXT_METHOD_SINGLE_ARG, ("os", "system", shell(marker), "__call__")),
        msgpack_ext(EXT_PYDANTIC_V2, (HERE, "set_flag", {"value": "pydantic"}, "model_validate_json")),
    ]


def test_msgpack_payloads_are_live() -> None:
    # Positive control: LangGraph's permissive mode does call what the payload names.
    PWNED.clear()
    JsonPlusSerializer(allowed_msgpack_modules=True).loads_typed(
        ("msgpack", msgpack_ext(EXT_CONSTRUCTOR_KW_ARGS, (HERE, "set_flag", {"value": "control"})))
    )
    assert PWNED == ["control"]
    PWNED.clear()


def test_msgpack_payloads_are_refused(marker: Path) -> None:
    serde = JsonSerializer()
    for data in msgpack_payloads(marker):
        with pytest.raises(SerializationError, match="'msgpack'"):
            serde.loads_typed(("msgpack", data))
        with pytest.raises(SerializationError, match="not valid JSON"):
            serde.loads_typed(("json", data))


# --- CVE-2026-27794: pickle ---


def test_pickle_is_never_loaded_or_written(marker: Path) -> None:
    serde = JsonSerializer()
    with pytest.raises(SerializationError, match="'pickle'"):
        serde.loads_typed(("pickle", pickle.dumps(SetsFlagWhenUnpickled())))
    with pytest.raises(SerializationError, match="SetsFlagWhenUnpickled"):
        serde.dumps_typed(SetsFlagWhenUnpickled())  # refused, not pickled


def test_allowlisted_class_is_built_only_through_its_class(marker: Path) -> None:
    # An allowed class is rebuilt with the stored fields; nothing else is reachable.
    serde = JsonSerializer()
    payload = {"$model": {"class": "HumanMessage", "fields": {"content": "hi", "__class__": "os:system"}}}
    loaded = serde.from_jsonable(payload)
    assert type(loaded).__name__ == "HumanMessage" and loaded.content == "hi"
    assert os.system.__module__ in ("posix", "nt")  # untouched
