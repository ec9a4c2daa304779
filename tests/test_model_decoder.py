"""The compiled builders of a built-in model (`_classes._quick_constructor`) rebuild exactly what
the general builder does: same class, same field values (types, order), same fields set, extras
and private state, and no container shared with the stored data.

A quick way is compiled for each stored form (the names stored, in their order) of the first
`_MAX_FORMS` that name fields only, every required one among them; any other form goes the
general way. `reference` below is the rebuilt state written plainly (pydantic's own
`model_construct` with the stored names as the fields set).
"""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pydantic
import pytest
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage, SystemMessage, ToolMessage

from telar_checkpoint import JsonSerializer
from telar_checkpoint.errors import SerializationError
from telar_checkpoint.serializer import _classes
from telar_checkpoint.serializer._decode import make_decoder
from telar_checkpoint.serializer._encode import to_jsonable
from telar_checkpoint.serializer._registry import Allowlist
from tests.test_model_encoder import ODD_VALUES, StrSub, full_messages
from tests.test_serializer import assert_same


def state(obj: pydantic.BaseModel) -> tuple[Any, ...]:
    return (
        type(obj), list(obj.__dict__), obj.__pydantic_fields_set__, obj.__pydantic_extra__,
        obj.__pydantic_private__,
    )  # fmt: skip


def reference(stored: Any) -> pydantic.BaseModel:
    """`stored` (one `$model`) rebuilt by pydantic's `model_construct`, fields decoded alone."""
    dec = make_decoder(Allowlist(strict=False))
    record = stored["$model"]
    cls = type(dec(stored))
    fields = {name: dec(value) for name, value in record["fields"].items()}
    return cls.model_construct(set(fields), **fields)


def check(stored: Any) -> pydantic.BaseModel:
    """Decoding `stored` gives `reference`'s model, twice (the builder is kept after the first),
    reordered (the general way), and leaves `stored` as it was."""
    text = orjson.dumps(stored)
    want = reference(copy.deepcopy(stored))
    serde = JsonSerializer(strict=False)
    reordered = {"$model": {**stored["$model"], "fields": dict(reversed(stored["$model"]["fields"].items()))}}
    for data in (stored, stored, reordered, stored):
        got = serde.from_jsonable(data)
        assert state(got) == state(want)
        assert_same(want, got)
        assert got == want
        for name, value in got.__dict__.items():  # nothing shared with the stored data
            if isinstance(value, (dict, list)):
                assert value is not data["$model"]["fields"].get(name)
                value.clear()
        assert orjson.dumps(stored) == text
    return got


@pytest.mark.parametrize("value", ODD_VALUES, ids=repr)
def test_messages_with_every_field_set_holding_any_value(value: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_classes, "_FORMS", {})  # no forms of other tests (at most `_MAX_FORMS` a class)
    if type(value) is StrSub or (type(value) is dict and any(type(k) is StrSub for k in value)):
        return  # a str subclass is stored as text
    for message in full_messages(value):
        stored = to_jsonable(message)
        assert list(stored["$model"]["fields"]) == list(type(message).model_fields)  # the quick way's form
        check(stored)
        way = _classes._FORMS[(type(message), "$model")][tuple(stored["$model"]["fields"])]
        assert way.__qualname__ == "make.<locals>.build"  # the form's compiled way


@pytest.mark.parametrize(
    "message",
    [
        HumanMessage("hi"), HumanMessage("hi", id="h", name="n"), AIMessage("", tool_calls=[]),
        SystemMessage([{"type": "text", "text": "x"}], additional_kwargs={"a": [1, {"b": {}}]}),
        ToolMessage("42", tool_call_id="c", artifact=[[], {}]), RemoveMessage(id="r"),
        HumanMessage("hi", extra_field={"x": []}),
    ],
    ids=repr,
)
def test_messages_with_some_fields_set_or_extras(message: pydantic.BaseModel) -> None:
    check(to_jsonable(message))


def test_every_form_of_stored_fields_is_rebuilt_as_the_general_way_does() -> None:
    full = to_jsonable(full_messages(1)[0])["$model"]["fields"]
    names = list(full)
    forms = [
        {**full, "extra": [1]},  # one more: an extra field
        {name: full[name] for name in names if name != "usage_metadata"},  # one less
        {name: full[name] for name in names if name != "usage_metadata"} | {"extra": 1},  # one not a field
        {**full, "content": {"$tuple": [1, 2]}},  # a tagged value
        {**full, "content": [], "tool_calls": [{}], "response_metadata": {"k": {}}},
    ]
    for fields in forms:
        check({"$model": {"class": "AIMessage", "fields": fields}})


@pytest.mark.parametrize(
    "fields",
    [
        {"content": {"$nope": 1}},  # an unknown tag in a field
        {"additional_kwargs": {"$model": {"class": "os:system", "fields": {}}}},  # a class not allowed
    ],
    ids=repr,
)
def test_hostile_fields_are_refused_on_the_quick_way_as_on_the_general_way(fields: dict[str, Any]) -> None:
    full = to_jsonable(full_messages(1)[3])["$model"]["fields"]
    in_order = {"$model": {"class": "HumanMessage", "fields": {**full, **fields}}}
    reordered = {"$model": {"class": "HumanMessage", "fields": dict(reversed({**full, **fields}.items()))}}
    outcomes = []
    for data in (in_order, reordered):
        serde = JsonSerializer(strict=True)
        serde.from_jsonable(to_jsonable(HumanMessage("x")))  # the builder is kept
        try:
            outcomes.append(repr(serde.from_jsonable(data)))
        except Exception as exc:
            outcomes.append(f"{type(exc).__name__}: {exc}")
    assert outcomes[0] == outcomes[1]


def test_forms_past_the_last_quick_way_and_forms_that_cannot_have_one_go_the_general_way(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_classes, "_FORMS", {})
    full = to_jsonable(full_messages(1)[0])["$model"]["fields"]  # an AIMessage, every field stored
    names = list(full)
    forms = [{name: full[name] for name in names[:size]} for size in range(1, len(names) + 1)]
    forms += [dict(reversed(list(form.items()))) for form in forms]  # as many again, reordered
    for fields in forms:
        check({"$model": {"class": "AIMessage", "fields": fields}})
    ways = _classes._FORMS[(AIMessage, "$model")]
    assert len(ways) == _classes._MAX_FORMS
    seen = dict.fromkeys(each for form in forms for each in (tuple(form), tuple(reversed(form))))  # as `check` decodes
    assert list(ways) == list(seen)[: _classes._MAX_FORMS]  # the first seen, and no more
    tool = to_jsonable(ToolMessage("42", tool_call_id="c"))["$model"]["fields"]
    without_required = {k: v for k, v in tool.items() if k != "tool_call_id"}
    serde = JsonSerializer(strict=False)
    with pytest.raises(SerializationError, match="tool_call_id"):
        serde.from_jsonable({"$model": {"class": "ToolMessage", "fields": without_required}})
    assert tuple(without_required) not in _classes._FORMS[(ToolMessage, "$model")]
