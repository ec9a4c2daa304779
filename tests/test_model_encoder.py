"""The compiled encoder of a pydantic model (`_encode._model_encoder`) writes exactly what the
rule says, on its quick path (no field with a default other than None set, those fields at
their defaults, no extra fields) and off it.

The rule: a field is left out when it was never set and still holds its simple default, of the
default's exact type (`_model_plan`); any other field is written as `to_jsonable` writes its
value. `reference` below is that rule written plainly; every case compares the encoder's text
with it byte for byte, and reads the value back exactly where a value can be read back exactly.
"""

from __future__ import annotations

import enum
import math
import warnings
from collections import OrderedDict, defaultdict
from datetime import datetime, timezone
from typing import Any

import orjson
import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage, SystemMessage, ToolMessage
from pydantic_core import PydanticUndefined

from telar_checkpoint import JsonSerializer
from telar_checkpoint.serializer._encode import _model_encoder, to_jsonable
from telar_checkpoint.serializer._registry import class_name
from tests.test_serializer import assert_same


class Tone(enum.Enum):
    CALM = "calm"
    LOUD = "loud"


class Defaults(pydantic.BaseModel):
    """A default of each kind the encoder tells apart."""

    model_config = pydantic.ConfigDict(extra="allow")

    text: str
    label: str = "plain"
    count: int = 0
    ratio: float = math.nan
    flag: bool = False
    pair: tuple[Any, ...] = ()
    tone: Tone = Tone.CALM
    note: Any = None
    items: list[Any] = pydantic.Field(default_factory=list)
    meta: dict[str, Any] = pydantic.Field(default_factory=dict)
    tags: set[str] = pydantic.Field(default_factory=set)


class StrSub(str):
    pass


class ListSub(list):  # type: ignore[type-arg]
    pass


def reference(obj: pydantic.BaseModel) -> Any:
    """The stored form of `obj`, by the rule, one field at a time."""
    fields = {}
    for name, field in type(obj).model_fields.items():
        value = obj.__dict__[name]
        default: Any = PydanticUndefined
        if field.default_factory is None:
            default = field.default
        elif field.default_factory in (list, dict):
            default = field.default_factory()  # type: ignore[call-arg]
        unset = name not in obj.__pydantic_fields_set__
        if default is not PydanticUndefined and unset and type(value) is type(default) and value == default:
            continue
        fields[name] = to_jsonable(value)
    for name, value in (obj.__pydantic_extra__ or {}).items():
        fields[name] = to_jsonable(value)
    return {"$model": {"class": class_name(type(obj)), "fields": fields}}


def check(obj: pydantic.BaseModel, *, reads_back: bool = True) -> dict[str, Any]:
    """The encoder's text is the rule's; the value reads back exactly (types, fields set: those
    given and those stored)."""
    got = to_jsonable(obj)
    assert orjson.dumps(got) == orjson.dumps(reference(obj))
    assert orjson.dumps(to_jsonable([obj, obj])) == orjson.dumps([reference(obj)] * 2)  # in a list
    assert orjson.dumps(to_jsonable({"m": obj})) == orjson.dumps({"m": reference(obj)})  # in a dict
    if reads_back:
        serde = JsonSerializer(allowed_classes=[Defaults])
        back = serde.loads_typed(serde.dumps_typed(obj))
        assert_same(obj, back)
        # a default edited in place is stored, and so reads back as set
        assert back.model_fields_set == obj.model_fields_set | set(got["$model"]["fields"])
    return got["$model"]["fields"]  # type: ignore[no-any-return]


def test_a_plain_message_keeps_only_what_was_given() -> None:
    assert check(AIMessage(content="hi", id="a-1")) == {"content": "hi", "id": "a-1"}
    assert check(HumanMessage(content="hi")) == {"content": "hi"}


def test_a_default_list_or_dict_edited_in_place_is_stored_with_its_edit() -> None:
    message = AIMessage(content="hi", id="a-1")
    assert check(message) == {"content": "hi", "id": "a-1"}  # the encoder has seen it once
    message.tool_calls.append({"name": "search", "args": {"q": "x"}, "id": "call-1", "type": "tool_call"})
    assert check(message)["tool_calls"][0]["id"] == "call-1"
    message.additional_kwargs["refusal"] = None
    assert check(message)["additional_kwargs"] == {"refusal": None}
    message.response_metadata["model_name"] = "m"
    message.invalid_tool_calls.append({"name": None, "args": "{", "id": None, "error": None, "type": "invalid_tool_call"})
    fields = check(message)
    assert list(fields) == ["content", "additional_kwargs", "response_metadata", "id", "tool_calls", "invalid_tool_calls"]


@pytest.mark.parametrize(
    "value",
    [
        (1, "a"), (), b"\x00\xff", bytearray(b"ab"), datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc),
        StrSub("sub"), 2**70, -(2**64), math.nan, math.inf, "\x00", "a\ud800b", "é\x00", {"$tuple": 1},
        {1: "int key"}, OrderedDict(a=1), defaultdict(list, a=[1]), {"nested": [(1, 2), {3}]}, Tone.LOUD,
    ],
    ids=repr,
)
def test_additional_kwargs_holding_any_value_read_back_exactly(value: Any) -> None:
    reads_back = type(value) is not StrSub  # a str subclass is stored as str, as LangGraph does
    message = AIMessage(content="hi", id="a-1", additional_kwargs={"v": value})
    check(message, reads_back=reads_back)
    message = AIMessage(content="hi", id="a-1")
    message.additional_kwargs["v"] = value  # in place: the field is still unset
    check(message, reads_back=reads_back)
    check(HumanMessage(content=[{"type": "text", "text": "x", "v": value}], id="h"), reads_back=reads_back)


@pytest.mark.parametrize("content", ["\x00", "a\ud800", "ünïcode", "", ["part", {"type": "text", "text": "\x00"}]], ids=repr)
def test_content_and_id_that_need_a_tag(content: Any) -> None:
    check(AIMessage(content=content, id="a-1"))
    check(AIMessage(content="x", id=content if isinstance(content, str) else "i"))


def test_a_field_set_to_its_default_is_stored() -> None:
    assert check(AIMessage(content="hi", type="ai")) == {"content": "hi", "type": "ai"}
    assert check(AIMessage(content="hi", name=None, id=None)) == {"content": "hi", "name": None, "id": None}
    assert check(AIMessage(content="hi", tool_calls=[])) == {"content": "hi", "tool_calls": []}
    message = HumanMessage(content="hi")
    message.id = None  # an assignment sets the field, even to its default
    assert check(message) == {"content": "hi", "id": None}


def test_extra_fields_are_stored_after_the_fields() -> None:
    message = AIMessage(content="hi", id="a-1", zz=(1, 2), big=2**80)
    assert list(check(message)) == ["content", "id", "zz", "big"]
    assert list(check(Defaults(text="t", extra_one=b"x"))) == ["text", "ratio", "tags", "extra_one"]


def test_values_set_around_pydantic_are_stored_as_they_are() -> None:
    """Unset fields holding a value of another type than their default's, equal to it or not
    (model_construct with a smaller _fields_set, or __dict__ written directly)."""
    odd = AIMessage.model_construct(
        _fields_set={"content"}, content="hi", additional_kwargs=OrderedDict(), response_metadata=defaultdict(list),
        type=StrSub("ai"), name=None, id=None, tool_calls=ListSub(), invalid_tool_calls=(), usage_metadata=None,
    )  # fmt: skip
    fields = check(odd, reads_back=False)
    assert list(fields) == ["content", "additional_kwargs", "response_metadata", "type", "tool_calls", "invalid_tool_calls"]
    message = HumanMessage(content="hi", id="h")
    message.__dict__["name"] = "bypass"
    assert check(message, reads_back=False)["name"] == "bypass"
    message = HumanMessage(content="hi", id="h")
    message.__dict__["type"] = "other"
    assert check(message, reads_back=False)["type"] == "other"


def test_every_kind_of_default() -> None:
    # NaN is never equal to itself, so always stored; a set factory is not a simple default
    assert check(Defaults(text="t")) == {"text": "t", "ratio": {"$float": "nan"}, "tags": {"$set": []}}
    given = Defaults(text="t", label="plain", count=0, flag=False, pair=(), tone=Tone.CALM, note=None, items=[], meta={})
    assert list(check(given)) == [name for name in Defaults.model_fields]
    edited = Defaults(text="t")
    edited.items.append(())
    edited.meta["k"] = b"v"
    assert list(check(edited)) == ["text", "ratio", "items", "meta", "tags"]
    other = Defaults.model_construct(_fields_set={"text"}, text="t", label=StrSub("plain"), count=False, flag=0, pair=[],
                                     tone="calm", note=0, items=(), meta=OrderedDict())  # fmt: skip
    assert list(check(other, reads_back=False)) == [name for name in Defaults.model_fields]


def test_other_message_classes() -> None:
    check(ToolMessage(content="42", tool_call_id="call-1", id="t-1"))
    check(ToolMessage(content="42", tool_call_id="call-1", artifact={"raw": (1, 2)}, status="error"))
    check(SystemMessage(content="be brief"))
    check(AIMessageChunk(content="par", id="c-1", tool_call_chunks=[{"name": "f", "args": "{", "id": "1", "index": 0}]))


# --- any mix of set, unset, edited and odd fields ---

ODD = st.sampled_from(
    [(), (1,), b"b", 2**70, math.nan, "\x00", "\ud800", StrSub("s"), OrderedDict(), ListSub(), 0, False, "ai"]
)
LEAF = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=5), ODD)
VALUE = st.recursive(
    LEAF,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=3), inner, max_size=3)),
    max_leaves=6,
)
FIELDS = ["additional_kwargs", "response_metadata", "type", "name", "id", "tool_calls", "invalid_tool_calls", "usage_metadata"]
# per field: leave it, set it through pydantic, edit its default in place, or write __dict__
ACTION = st.one_of(st.just(("leave", None)), st.tuples(st.sampled_from(["set", "edit", "bypass"]), VALUE))


@settings(max_examples=300, deadline=None)
@given(
    content=st.one_of(st.text(max_size=8), st.lists(st.text(max_size=3), max_size=2)),
    actions=st.lists(ACTION, min_size=len(FIELDS), max_size=len(FIELDS)),
    extra=st.booleans(),
)
def test_any_mix_is_stored_by_the_rule(content: Any, actions: list[tuple[str, Any]], extra: bool) -> None:
    message = AIMessage(content=content, id="a", **({"zz": 1} if extra else {}))
    for field, (action, value) in zip(FIELDS, actions):
        current = message.__dict__[field]
        if action == "set":
            object.__setattr__(message, "__pydantic_fields_set__", message.__pydantic_fields_set__ | {field})
            message.__dict__[field] = value
        elif action == "edit" and type(current) is list:
            current.append(value)
        elif action == "edit" and type(current) is dict:
            current["k"] = value
        elif action == "bypass":
            message.__dict__[field] = value
    assert orjson.dumps(to_jsonable(message)) == orjson.dumps(reference(message))
    assert orjson.dumps(to_jsonable([message])) == orjson.dumps([reference(message)])
    for encode in SHAPED:  # an encoder made for the fields set of another first instance
        assert orjson.dumps(encode(message)) == orjson.dumps(reference(message))


# The first instance of a class the encoder sees gives the fields set of its quickest path.
SHAPES = [{"content"}, {"content", "id"}, {"content", "id", "name"}, {"content", "tool_calls", "id"}, set(), {"zz"}]
SHAPED = [_model_encoder(AIMessage, shape) for shape in SHAPES]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda shape: ",".join(sorted(shape)) or "none")
def test_the_quickest_path_is_for_the_fields_set_of_the_first_instance(shape: set[str]) -> None:
    encode = _model_encoder(AIMessage, shape)
    messages = [
        AIMessage(content="hi"), AIMessage(content="hi", id="a"), AIMessage(content="hi", id="a", name="n"),
        AIMessage(content="hi", id=None), AIMessage(content="\x00", id="\ud800"), AIMessage(content=["x", {"k": (1,)}], id="a"),
        AIMessage(content="hi", id="a", tool_calls=[]), AIMessage(content="hi", id="a", zz=1),
    ]  # fmt: skip
    edited = AIMessage(content="hi", id="a")
    edited.tool_calls.append({"name": "f", "args": {}, "id": "1", "type": "tool_call"})
    bypassed = AIMessage(content="hi", id="a")
    bypassed.__dict__["name"] = "n"
    bypassed.__dict__["usage_metadata"] = {"input_tokens": 1}
    typed = AIMessage(content="hi", id="a")
    typed.__dict__["response_metadata"] = OrderedDict()
    extra = AIMessage(content="hi", id="a")
    extra.__pydantic_extra__["zz"] = (1,)  # type: ignore[index]  # an extra field, not in the fields set
    for message in [*messages, edited, bypassed, typed, extra]:
        assert orjson.dumps(encode(message)) == orjson.dumps(reference(message))


with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # pydantic warns of the shadowed attribute, and allows it

    class Shadowing(pydantic.BaseModel):
        """A field named like a BaseModel attribute."""

        text: str = "x"
        json: str | None = None  # type: ignore[assignment]


class Overridden(pydantic.BaseModel):
    """Reading an attribute gives its default, whatever the stored value."""

    text: str = "x"
    tags: list[str] = pydantic.Field(default_factory=list)

    def __getattribute__(self, name: str) -> Any:
        if name == "text":
            return "x"
        if name == "tags":
            return []
        return super().__getattribute__(name)


def test_fields_are_read_from_the_instance_dict_whatever_the_class_does() -> None:
    assert check(Shadowing(text="t", json="j"), reads_back=False) == {"text": "t", "json": "j"}
    assert check(Shadowing(), reads_back=False) == {}
    shadowing = Shadowing()
    shadowing.__dict__["json"] = "edited"
    assert check(shadowing, reads_back=False) == {"json": "edited"}
    overridden = Overridden()
    overridden.__dict__["tags"].append("a")
    overridden.__dict__["text"] = "t"
    assert check(overridden, reads_back=False) == {"text": "t", "tags": ["a"]}


def test_a_model_missing_a_field_is_refused_as_before() -> None:
    with pytest.raises(KeyError):
        to_jsonable(HumanMessage.model_construct(id="h"))  # no content
    with pytest.raises(KeyError):
        to_jsonable(Defaults.model_construct(label="x"))  # no text


# --- messages as a real agent run leaves them: every field set (`add_messages` sets them) ---

ODD_VALUES = [
    (1, "a"), b"\x00\xff", datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc), StrSub("sub"), 2**70, -(2**64),
    math.nan, math.inf, "\x00", "a\ud800b", "é\x00", "ünï", {"$x": 1}, {"$tuple": [1]}, {1: "int key"},
    {StrSub("k"): 1}, {"\x00": 1}, OrderedDict(a=1), defaultdict(list, a=[1]), [(1,), {2}], Tone.LOUD, 1.5, True, None,
]  # fmt: skip


def full_ai(args: dict[str, Any], **fields: Any) -> AIMessage:
    given: dict[str, Any] = dict(
        content="", additional_kwargs={}, response_metadata={}, type="ai", name=None, id="a-1",
        tool_calls=[{"name": "weather", "args": args, "id": "call-1", "type": "tool_call"}],
        invalid_tool_calls=[], usage_metadata=None,
    )  # fmt: skip
    given.update(fields)
    return AIMessage(**given)


def full_messages(value: Any) -> list[pydantic.BaseModel]:
    return [
        full_ai({"city": "c", "v": value}),
        full_ai({"v": value}, additional_kwargs={"v": value}, response_metadata={"model_name": "m", "v": value}),
        full_ai({}, usage_metadata={"input_tokens": 1, "output_tokens": 2, "total_tokens": 3},
                content=[{"type": "text", "text": "t", "v": value}]),
        HumanMessage(content="hi", additional_kwargs={"v": value}, response_metadata={}, type="human", name=None, id="h-1"),
        ToolMessage(content="42", additional_kwargs={}, response_metadata={}, type="tool", name="weather", id="t-1",
                    tool_call_id="call-1", artifact={"v": value}, status="success"),
    ]  # fmt: skip


@pytest.mark.parametrize("value", ODD_VALUES, ids=repr)
def test_messages_with_every_field_set_holding_any_value(value: Any) -> None:
    reads_back = type(value) is not StrSub and not (type(value) is dict and any(type(k) is StrSub for k in value))
    for message in full_messages(value):
        check(message, reads_back=reads_back)
        check(message, reads_back=reads_back)  # its class's quick encoder for this fields set is made now


def test_messages_with_every_field_set_edited_in_place_are_stored_with_their_edit() -> None:
    message = full_ai({"city": "c"})
    check(message)
    message.tool_calls[0]["args"]["city"] = "\ud800"
    message.tool_calls[0]["args"][2] = "int key"  # type: ignore[index]  # a key of another type, in place
    message.tool_calls.append({"name": "f", "args": {"$x": (1,)}, "id": "2", "type": "tool_call"})
    message.additional_kwargs["refusal"] = b"x"
    message.response_metadata["$only"] = 1
    fields = check(message, reads_back=False)
    assert fields["tool_calls"][0]["args"] == {"$map": [["city", {"$str": [0xD800]}], [2, "int key"]]}
    assert fields["tool_calls"][1]["args"] == {"$dict": {"$x": {"$tuple": [1]}}}
    del message.response_metadata["$only"]
    message.response_metadata["$one"] = 1
    message.response_metadata["two"] = 2
    assert check(message, reads_back=False)["response_metadata"] == {"$one": 1, "two": 2}


def test_messages_with_every_field_set_holding_values_set_around_pydantic() -> None:
    message = full_ai({"city": "c"})
    check(message)
    for field, value in [
        ("additional_kwargs", OrderedDict(a=1)), ("response_metadata", defaultdict(list)), ("type", StrSub("ai")),
        ("tool_calls", ListSub([{"a": 1}])), ("invalid_tool_calls", ()), ("usage_metadata", {"input_tokens": 2**70}),
        ("name", "\x00"), ("id", StrSub("i")), ("content", ["x", ("y",)]), ("additional_kwargs", {}), ("tool_calls", []),
    ]:  # fmt: skip
        message.__dict__[field] = value
        check(message, reads_back=False)


@pytest.mark.parametrize("drop", [*FIELDS, "content"])
def test_every_fields_set_of_one_field_less(drop: str) -> None:
    """Fields sets of the same size as another already compiled, each field left unset in turn:
    held at its default, edited in place, or bypassed."""
    for action in ["leave", "edit", "bypass"]:
        message = full_ai({"city": "c"})
        object.__setattr__(message, "__pydantic_fields_set__", message.__pydantic_fields_set__ - {drop})
        current = message.__dict__[drop]
        if action == "edit" and type(current) is list:
            current.append({"k": 1})
        elif action == "edit" and type(current) is dict:
            current["k"] = 1
        elif action == "bypass":
            message.__dict__[drop] = "other"
        for _ in range(2):
            assert orjson.dumps(to_jsonable(message)) == orjson.dumps(reference(message))
            assert orjson.dumps(to_jsonable([message])) == orjson.dumps([reference(message)])
            for encode in SHAPED:
                assert orjson.dumps(encode(message)) == orjson.dumps(reference(message))


def test_a_fields_set_naming_no_field() -> None:
    message = full_ai({"city": "c"})
    object.__setattr__(message, "__pydantic_fields_set__", message.__pydantic_fields_set__ | {"zz"})
    for _ in range(2):
        assert orjson.dumps(to_jsonable(message)) == orjson.dumps(reference(message))


class Wide(pydantic.BaseModel):
    """More fields than the quick ways a class keeps (`_MAX_SHAPES`)."""

    f0: str = "a"
    f1: int = 0
    f2: Any = None
    f3: list[Any] = pydantic.Field(default_factory=list)
    f4: dict[str, Any] = pydantic.Field(default_factory=dict)
    f5: str | None = None
    f6: str = "b"
    f7: Any = None
    f8: list[Any] = pydantic.Field(default_factory=list)
    f9: dict[Any, Any] = pydantic.Field(default_factory=dict)
    f10: Any = None


def wide(size: int, offset: int = 0) -> Wide:
    names = list(Wide.model_fields)
    chosen = [names[(offset + i) % len(names)] for i in range(size)]
    values = {"f0": "x", "f1": 1, "f2": (1,), "f3": [b"x"], "f4": {"$k": 1}, "f5": "\x00", "f6": "b", "f7": None,
              "f8": [], "f9": {1: 2}, "f10": 2**70}  # fmt: skip
    return Wide(**{name: values[name] for name in chosen})


def test_fields_sets_of_every_size_and_more_than_the_ways_kept() -> None:
    held = _model_encoder(Wide, {"f0"})  # an encoder made before the others: it hands new sizes on
    for offset in range(3):
        for size in [*range(len(Wide.model_fields) + 1), 5, 0, 11]:
            obj = wide(size, offset)
            for _ in range(2):
                assert orjson.dumps(to_jsonable(obj)) == orjson.dumps(reference(obj))
                assert orjson.dumps(to_jsonable([obj, {"m": obj}])) == orjson.dumps([reference(obj), {"m": reference(obj)}])
                assert orjson.dumps(held(obj)) == orjson.dumps(reference(obj))
    check(Wide(f3=[1]), reads_back=False)


def test_fields_sets_learnt_from_threads() -> None:
    import threading

    class Threaded(Wide):
        pass

    objects = [Threaded(**wide(size, offset).model_dump(exclude_unset=True)) for size in range(12) for offset in range(3)]
    failures: list[Any] = []

    def run(start: int) -> None:
        for obj in objects[start:] + objects[:start]:
            if orjson.dumps(to_jsonable(obj)) != orjson.dumps(reference(obj)):
                failures.append(obj)

    threads = [threading.Thread(target=run, args=(start,)) for start in range(0, len(objects), 5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures


def test_dict_keys_seen_before_as_plain_keys() -> None:
    """A key's text seen plain does not make an equal key of another type, or an unsafe one, plain."""
    from telar_checkpoint.serializer import _encode

    for key in ["k", "é", "$k", "x" * 65]:
        assert to_jsonable({key: 1, "other": {key: "v", "w": 1}}) == {key: 1, "other": {key: "v", "w": 1}}
    assert "k" in _encode._PLAIN_KEYS and "x" * 65 not in _encode._PLAIN_KEYS
    assert to_jsonable({StrSub("k"): 1}) == {"$map": [["k", 1]]}
    assert to_jsonable({"a": 1, StrSub("k"): (1,)}) == {"$map": [["a", 1], ["k", {"$tuple": [1]}]]}
    assert to_jsonable({"k\x00": 1}) == {"$map": [[{"$str": ["k", 0]}, 1]]}
    assert to_jsonable({"\ud800": 1}) == {"$map": [[{"$str": [0xD800]}, 1]]}
    assert to_jsonable({"$k": 1}) == {"$dict": {"$k": 1}}
    assert to_jsonable({"$k": {"$k": {}}}) == {"$dict": {"$k": {"$dict": {"$k": {}}}}}
    for i in range(5000):  # bounded
        to_jsonable({f"key-{i}": i})
    assert len(_encode._PLAIN_KEYS) <= 4096
    assert to_jsonable({"key-4999": 1, "k": [{"k": 2**64}]}) == {"key-4999": 1, "k": [{"k": {"$int": str(2**64)}}]}
