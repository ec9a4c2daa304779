"""JsonSerializer round-trips: a table of hand-written cases, then Hypothesis.

Every case checks the value comes back of the same type and equal, all the way
down, and that the stored form is plain JSON (no NaN, no big ints, no NUL or
lone surrogates, no bare ``{"$serde": ...}`` made from user data).
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import logging
import math
import pathlib
import re
import uuid
from collections import Counter, OrderedDict, defaultdict, deque
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Annotated, Any, NamedTuple, TypedDict
from zoneinfo import ZoneInfo

import orjson
import pydantic
import pydantic.v1
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.agents import AgentAction, AgentFinish
from langchain_core.documents import Document
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    ChatMessage,
    FunctionMessage,
    FunctionMessageChunk,
    HumanMessage,
    HumanMessageChunk,
    RemoveMessage,
    SystemMessage,
    SystemMessageChunk,
    ToolMessage,
    ToolMessageChunk,
)
from langchain_core.prompt_values import ChatPromptValue
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.types import _DeltaSnapshot
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, Interrupt, Overwrite, Send, interrupt

from telar_checkpoint.errors import SerializationError
from telar_checkpoint.serializer import JsonSerializer

SEND_TIMEOUT = "timeout" in inspect.signature(Send).parameters  # langgraph>=1.2

# --- user types, as a graph's state schema would define them ---


class Color(enum.Enum):
    RED = "red"
    BLUE = (0, 0, 255)


class Outer:
    class Size(enum.IntEnum):
        SMALL = 1
        LARGE = 2


class Flags(enum.Flag):
    A = 1
    B = 2


@dataclasses.dataclass
class Point:
    x: float
    y: float = 0.0


@dataclasses.dataclass(frozen=True)
class Frozen:
    name: str
    tags: tuple[str, ...] = ()


@dataclasses.dataclass
class WithLater:
    a: int
    b: list[Point]
    total: int = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.total = self.a * 10


@dataclasses.dataclass(slots=True)
class Slotted:
    when: datetime
    inner: Frozen


class Pair(NamedTuple):
    left: Any
    right: Any = None


class Profile(pydantic.BaseModel):
    name: str
    when: datetime | None = None
    color: Color = Color.RED
    history: list[HumanMessage] = []
    extra: dict[str, Any] = {}


class LooseModel(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="allow")
    a: int


class OldModel(pydantic.v1.BaseModel):
    name: str
    count: int = 0


class Person(TypedDict):
    name: str
    age: int


class MyError(Exception):
    pass


USER_CLASSES = [Color, Outer.Size, Flags, Point, Frozen, WithLater, Slotted, Pair, Profile,
                LooseModel, OldModel, MyError]  # fmt: skip


def serializer() -> JsonSerializer:
    return JsonSerializer(allowed_classes=USER_CLASSES)


# --- deep equality: same type and equal value, all the way down ---


def assert_same(expected: Any, actual: Any, path: str = "value") -> None:
    if isinstance(expected, BaseException):  # as LangGraph's serializer: its repr text
        assert actual == repr(expected), f"{path}: {actual!r} is not {expected!r}'s repr"
        return
    assert type(actual) is type(expected), f"{path}: {type(actual)} is not {type(expected)}"
    if isinstance(expected, float) and math.isnan(expected):
        assert math.isnan(actual), path
    elif isinstance(expected, dict):
        assert list(map(type, actual)) == list(map(type, expected)), f"{path}: key types"
        assert list(actual) == list(expected), f"{path}: keys"
        for key in expected:
            assert_same(expected[key], actual[key], f"{path}[{key!r}]")
        if isinstance(expected, defaultdict):
            assert actual.default_factory is expected.default_factory, path
    elif isinstance(expected, (list, tuple, deque)):
        assert len(actual) == len(expected), f"{path}: length"
        for i, (want, got) in enumerate(zip(expected, actual)):
            assert_same(want, got, f"{path}[{i}]")
        if isinstance(expected, deque):
            assert actual.maxlen == expected.maxlen, f"{path}: maxlen"
    elif dataclasses.is_dataclass(expected):
        for field in dataclasses.fields(expected):
            name = field.name
            assert_same(getattr(expected, name), getattr(actual, name), f"{path}.{name}")
    elif isinstance(expected, pydantic.BaseModel):
        for name in type(expected).model_fields:
            assert_same(getattr(expected, name), getattr(actual, name), f"{path}.{name}")
        assert_same(expected.__pydantic_extra__ or {}, actual.__pydantic_extra__ or {}, path)
    elif isinstance(expected, Send):
        expected_fields = (expected.node, expected.arg, getattr(expected, "timeout", None))  # timeout: langgraph>=1.2
        assert_same(expected_fields, (actual.node, actual.arg, getattr(actual, "timeout", None)), path)
    else:
        assert actual == expected, f"{path}: {actual!r} != {expected!r}"


TAGS = {"$dict", "$map", "$str", "$int", "$float", "$tuple", "$set", "$frozenset", "$bytes",
        "$bytearray", "$deque", "$odict", "$counter", "$defaultdict", "$datetime", "$date",
        "$time", "$timedelta", "$timezone", "$zoneinfo", "$uuid", "$decimal", "$path", "$regex",
        "$model", "$model_v1", "$dataclass", "$namedtuple", "$enum", "$error", "$send"}  # fmt: skip


def assert_plain_json(data: Any, path: str = "value", literal_keys: bool = False) -> None:
    """Only JSON types; a one-key `$` object is always one of our tags (so never
    `$serde`, the codec's tag for other serializers), except the literal keys
    held by a `$dict` escape."""
    t = type(data)
    if t is dict:
        if len(data) == 1 and next(iter(data)).startswith("$") and not literal_keys:
            tag = next(iter(data))
            assert tag in TAGS, f"{path}: {tag} is not one of our tags"
            assert_plain_json(data[tag], f"{path}.{tag}", literal_keys=tag == "$dict")
            return
        for key, value in data.items():
            assert type(key) is str, path
            assert_plain_json(key, f"{path} key")
            assert_plain_json(value, f"{path}[{key!r}]")
    elif t is list:
        for i, item in enumerate(data):
            assert_plain_json(item, f"{path}[{i}]")
    elif t is str:
        assert not re.search("[\x00\ud800-\udfff]", data), f"{path}: NUL or surrogate"
    elif t is int:
        assert -(2**63) <= data < 2**63, path
    elif t is float:
        assert math.isfinite(data), path
    else:
        assert data is None or t is bool, f"{path}: {t}"


def round_trip(value: Any, serde: JsonSerializer | None = None) -> Any:
    serde = serde or serializer()
    data = serde.to_jsonable(value)
    assert_plain_json(data)
    out = serde.from_jsonable(orjson.loads(orjson.dumps(data)))
    assert_same(value, out)
    typed = serde.loads_typed(serde.dumps_typed(value))
    assert_same(value, typed)
    return data


# --- the table ---

AI = AIMessage(
    content="Let me look that up.",
    id="ai-1",
    tool_calls=[{"name": "search", "args": {"q": "weather", "n": 3}, "id": "call-1"}],
    usage_metadata={"input_tokens": 12, "output_tokens": 7, "total_tokens": 19},
    response_metadata={"model_name": "m", "finish_reason": "tool_calls"},
)
TZ = timezone(timedelta(hours=5, minutes=30))

CASES: dict[str, Any] = {
    "none": None, "true": True, "int": 42, "neg int": -(2**63), "float": 1.5, "neg zero": -0.0,
    "text": "héllo ✓ 🎉", "empty": "", "list": [1, "a", None],
    "nested": {"a": [{"b": {"c": [1, 2.5, False]}}]},
    "big int": 2**64, "huge negative": -(10**5000), "nan": math.nan, "inf": math.inf,
    "-inf": -math.inf, "nan in list": [math.nan, 1.0],
    "nul": "a\x00b", "surrogate": "x\ud800y\udfff", "only surrogate": "\udc80",
    "surrogate key": {"k\ud801": 1}, "nul key": {"\x00": 2},
    "int keys": {1: "a", 2: "b"}, "mixed keys": {"a": 1, 2: "b", None: 3, (1, 2): 4},
    "frozenset key": {frozenset({1}): "x"},
    "dollar key": {"$serde": ["json", "abc"]}, "dollar tag": {"$datetime": "2024-01-01"},
    "dollar keys": {"$a": 1, "$b": 2}, "escaped escape": {"$dict": {"$dict": 1}},
    "dollar only": {"$": None}, "lc shape": {"lc": 1, "type": "constructor", "id": ["os", "system"]},
    "tuple": (1, (2, 3), ()), "set": {1, 2, 3}, "str set": {"b", "a"}, "mixed set": {1, "a", None},
    "frozenset": frozenset({"x", (1, 2)}), "bytes": b"\x00\xffraw", "bytearray": bytearray(b"ab"),
    "deque": deque([1, 2]), "deque maxlen": deque([1, 2, 3], maxlen=3),
    "defaultdict": defaultdict(list, {"a": [1]}), "defaultdict none": defaultdict(None, {1: 2}),
    "counter": Counter("hello"), "odict": OrderedDict([("b", 1), ("a", 2)]),
    "odict int keys": OrderedDict([(2, 1), (1, 2)]), "odict dollar": OrderedDict([("$x", 1)]),
    "datetime naive": datetime(2024, 1, 2, 3, 4, 5, 678901),
    "datetime utc": datetime(2024, 1, 1, tzinfo=timezone.utc),
    "datetime offset": datetime(2024, 6, 1, 12, tzinfo=TZ),
    "datetime named tz": datetime(2024, 6, 1, tzinfo=timezone(timedelta(hours=-3), "BRT")),
    "datetime zoneinfo": datetime(2024, 11, 3, 1, 30, tzinfo=ZoneInfo("America/New_York")),
    "datetime fold": datetime(2024, 11, 3, 1, 30, fold=1, tzinfo=ZoneInfo("America/New_York")),
    "date": date(1999, 12, 31), "time": time(23, 59, 59, 1), "time tz": time(1, 2, tzinfo=TZ),
    "time zoneinfo": time(1, 2, tzinfo=ZoneInfo("Europe/Paris")),
    "datetime odd offset": datetime(2000, 1, 1, tzinfo=timezone(timedelta(microseconds=1))),
    "timedelta": timedelta(days=-2, seconds=5, microseconds=7), "timezone": TZ,
    "timezone named": timezone(timedelta(hours=1), "CET"), "utc": timezone.utc,
    "zoneinfo": ZoneInfo("Asia/Tokyo"), "uuid": uuid.UUID("12345678-1234-5678-1234-567812345678"),
    "decimal": Decimal("3.14159265358979323846264338327950288"), "decimal inf": Decimal("-Infinity"),
    "path": pathlib.Path("/tmp/some file.txt"), "relative path": pathlib.Path("a/b"),
    "regex": re.compile(r"^a+\d$", re.I | re.M), "bytes regex": re.compile(rb"\x00+"),
    "human": HumanMessage("hi there", id="h1", name="ann"),
    "human blocks": HumanMessage(content=[{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "data:"}}]),
    "ai": AI, "ai empty": AIMessage(""), "tool": ToolMessage("42", tool_call_id="call-1", artifact={"raw": [1]}),
    "tool error": ToolMessage("boom", tool_call_id="c", status="error"),
    "system": SystemMessage("be brief"), "function": FunctionMessage("res", name="fn"),
    "chat": ChatMessage("x", role="critic"), "remove": RemoveMessage(id="h1"),
    "ai chunk": AIMessageChunk(content="par", tool_call_chunks=[{"name": "f", "args": '{"a"', "id": "c", "index": 0}]),
    "human chunk": HumanMessageChunk("h"), "system chunk": SystemMessageChunk("s"),
    "tool chunk": ToolMessageChunk("t", tool_call_id="c"), "function chunk": FunctionMessageChunk("f", name="n"),
    "ai extra kwargs": AIMessage("x", additional_kwargs={"refusal": None, "$x": 1}, custom_field=[1, 2]),
    "document": Document(page_content="text", metadata={"source": "a.txt", "page": 3}, id="d1"),
    "agent action": AgentAction("search", {"q": 1}, "log"), "agent finish": AgentFinish({"out": 1}, "done"),
    "prompt value": ChatPromptValue(messages=[AI]),
    "enum": Color.BLUE, "nested enum": Outer.Size.LARGE, "flag": Flags.A | Flags.B,
    "dataclass": Point(1.0, -2.5), "frozen": Frozen("f", ("a", "b")),
    "init false": WithLater(2, [Point(1, 2)]), "slots": Slotted(datetime(2020, 1, 1), Frozen("z")),
    "namedtuple": Pair(1, Pair("a")), "typeddict": Person(name="ann", age=3),
    "pydantic": Profile(name="p", when=datetime(2024, 1, 1), color=Color.BLUE, history=[HumanMessage("q")], extra={"$k": {1: 2}}),
    "pydantic extra": LooseModel(a=1, b=(1, 2)), "pydantic v1": OldModel(name="o", count=3),
    "exception": ValueError("bad", 3), "user exception": MyError({"a": 1}),
    "send": Send("node", {"x": 1}), **({"send timeout": Send("node", [AI], timeout=5.0)} if SEND_TIMEOUT else {}),
    "interrupt": Interrupt(value={"question": "ok?"}, id="i1"),
    "command": Command(resume={"i1": "yes"}, goto=[Send("a", 1), "b"], update={"k": (1,)}),
    "command parent": Command(graph=Command.PARENT, goto="x"),
    "overwrite": Overwrite(value=[1, 2]), "delta snapshot": _DeltaSnapshot([AI, HumanMessage("q")]),
    "state": {"messages": [HumanMessage("q"), AI], "count": 1, "seen": {"a"}, "when": date(2024, 1, 1)},
}  # fmt: skip


@pytest.mark.parametrize("name", list(CASES))
def test_round_trip_table(name: str) -> None:
    round_trip(CASES[name])


def test_it_is_a_serializer_protocol() -> None:
    assert isinstance(JsonSerializer(), SerializerProtocol)
    assert JsonSerializer().dumps_typed({"a": 1}) == ("json", b'{"a":1}')


def test_message_content_is_plain_text() -> None:
    text = orjson.dumps(serializer().to_jsonable({"messages": [AI, HumanMessage("What's up?")]}))
    assert b'"content":"Let me look that up."' in text
    assert b'"content":"What\'s up?"' in text
    assert b'"tool_calls":[{"name":"search","args":{"q":"weather","n":3}' in text


def test_tags_as_documented() -> None:
    encode = serializer().to_jsonable
    assert encode(datetime(2024, 1, 1, tzinfo=timezone.utc)) == {"$datetime": "2024-01-01T00:00:00+00:00"}
    assert encode({"$serde": 1}) == {"$dict": {"$serde": 1}}
    assert encode({"$a": 1, "b": 2}) == {"$a": 1, "b": 2}  # two keys: not a tag
    assert encode((1,)) == {"$tuple": [1]}
    assert encode({1: 2}) == {"$map": [[1, 2]]}
    assert encode("a\x00") == {"$str": ["a", 0]}
    assert encode(2**64) == {"$int": "18446744073709551616"}
    assert encode(math.nan) == {"$float": "nan"}
    assert encode(Color.RED) == {"$enum": {"class": f"{__name__}:Color", "value": "red"}}
    assert encode(Outer.Size.SMALL)["$enum"]["class"] == f"{__name__}:Outer.Size"
    assert encode(HumanMessage("hi")) == {"$model": {"class": "HumanMessage", "fields": {"content": "hi"}}}
    assert encode(deque([1], maxlen=2)) == {"$deque": {"items": [1], "maxlen": 2}}


def test_set_text_is_stable() -> None:
    encode = serializer().to_jsonable
    assert encode({"b", "c", "a"}) == {"$set": ["a", "b", "c"]}


def test_unencodable_value_names_its_type() -> None:
    class Opaque:
        pass

    with pytest.raises(SerializationError, match=r"test_serializer\..*Opaque"):
        serializer().dumps_typed({"x": [Opaque()]})
    with pytest.raises(SerializationError, match="function"):
        serializer().dumps_typed(lambda: 1)
    with pytest.raises(SerializationError, match="default_factory"):
        serializer().dumps_typed(defaultdict(lambda: 1))


def test_self_containing_value_is_refused() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(SerializationError, match="contains itself"):
        serializer().dumps_typed(loop)


def test_unlisted_class_of_an_imported_module_loads_with_a_warning(caplog) -> None:
    """Not strict (LangGraph's default): a data class whose module is imported loads, as
    InMemorySaver loads it, with one warning per class; a listed class loads silently."""
    data = serializer().dumps_typed(Point(1, 2))
    with caplog.at_level(logging.WARNING, "telar_checkpoint.serializer"):
        assert JsonSerializer(strict=False).loads_typed(data) == Point(1, 2)
        assert JsonSerializer(strict=False).loads_typed(data) == Point(1, 2)
        assert JsonSerializer(allowed_classes=[Point], strict=True).loads_typed(data) == Point(1, 2)
    warned = [r.getMessage() for r in caplog.records if f"{__name__}:Point" in r.getMessage()]
    assert len(warned) <= 1  # once per class per process (an earlier test may have seen it)
    assert all("not on the allowlist" in message for message in warned)


def test_strict_mode_gives_unlisted_classes_as_plain_data() -> None:
    """LANGGRAPH_STRICT_MSGPACK=true: only listed classes are rebuilt, the rest is plain data, never an error."""
    strict = JsonSerializer(strict=True)
    stored = serializer().dumps_typed([Point(1, 2), Color.BLUE, Pair(1, "a"), Profile(name="p"), OldModel(name="o")])
    assert strict.loads_typed(stored) == [
        {"x": 1, "y": 2}, (0, 0, 255), {"left": 1, "right": "a"},
        {"name": "p"}, {"name": "o", "count": 0},
    ]  # fmt: skip


def test_with_msgpack_allowlist_takes_langgraph_pairs() -> None:
    # LangGraph names classes by (module, __name__); a nested class is found too.
    base = JsonSerializer(strict=True)
    values = [Point(1, 2), Outer.Size.SMALL, Profile(name="x")]
    stored = [base.dumps_typed(v) for v in values]
    assert [base.loads_typed(data) for data in stored] == [{"x": 1, "y": 2}, 1, {"name": "x"}]
    keys = {(cls.__module__, cls.__name__) for cls in (Point, Outer.Size, Profile, Color)}
    clone = base.with_msgpack_allowlist(keys)
    assert clone is not base
    assert [clone.loads_typed(data) for data in stored] == values
    assert base.loads_typed(stored[0]) == {"x": 1, "y": 2}  # the original is unchanged
    via_init = JsonSerializer(allowlist=keys, strict=True)
    assert [via_init.loads_typed(data) for data in stored] == values


def test_allowlist_pair_for_module_imported_later() -> None:
    serde = JsonSerializer(allowlist=[("telar_test_late_module", "Late")])
    import sys
    import types

    module = types.ModuleType("telar_test_late_module")
    exec("import enum\nclass Late(enum.Enum):\n    X = 1\n", module.__dict__)
    sys.modules[module.__name__] = module
    try:
        value = module.Late.X
        assert serde.loads_typed(serde.dumps_typed(value)) is value
    finally:
        del sys.modules[module.__name__]


# --- Hypothesis: nested combinations of every supported type ---


def make(build: Any, *parts: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.tuples(*parts).map(lambda args: build(*args))


SPECIAL_CHARS = "\x00\ud800\udbff\udc00\udfff$é✓🎉"
texts = st.one_of(
    st.text(max_size=20),
    st.text(st.sampled_from(SPECIAL_CHARS + "ab"), max_size=8),
    st.text(st.characters(exclude_categories=()), max_size=8),  # surrogates included
    st.sampled_from(["$serde", "$dict", "$datetime", "$", "lc", "$model"]),
)
ints = st.one_of(st.integers(-(2**63), 2**63 - 1), st.integers(), st.integers(-(2**200), 2**200))
hashables = st.recursive(
    st.one_of(st.none(), st.booleans(), ints, texts, st.binary(max_size=8), st.uuids(), st.dates()),
    lambda inner: st.one_of(st.tuples(inner, inner), st.frozensets(inner, max_size=3)),
    max_leaves=4,
)
timezones = st.one_of(
    st.timezones(),
    make(timezone, st.timedeltas(timedelta(hours=-23), timedelta(hours=23))),
    make(timezone, st.timedeltas(timedelta(hours=-23), timedelta(hours=23)), st.text(min_size=1, max_size=5)),
)
datetimes = st.one_of(st.datetimes(), st.datetimes(timezones=timezones, allow_imaginary=False))
times = st.one_of(st.times(), st.times(timezones=st.just(timezone.utc)))
messages = st.one_of(
    make(lambda c, i: HumanMessage(c, id=i), texts, st.none() | texts),
    texts.map(SystemMessage),
    make(lambda c, i: ToolMessage(c, tool_call_id=i), texts, texts),
    make(
        lambda c, calls: AIMessage(c, tool_calls=calls),
        texts,
        st.lists(
            st.fixed_dictionaries(
                {"name": texts, "args": st.dictionaries(texts, ints, max_size=2), "id": texts}
            ),
            max_size=2,
        ),
    ),
    texts.map(lambda i: RemoveMessage(id=i)),
)
leaves = st.one_of(
    st.none(), st.booleans(), ints, st.floats(), texts, st.binary(max_size=8),
    make(bytearray, st.binary(max_size=8)), datetimes, st.dates(), times, st.timedeltas(),
    timezones, st.uuids(), st.decimals(allow_nan=False), st.sampled_from(list(Color)),
    st.sampled_from(list(Outer.Size)), st.sampled_from([Flags.A, Flags.B, Flags.A | Flags.B]),
    make(pathlib.Path, st.text(st.characters(exclude_characters="\x00"), max_size=10)),
    make(re.compile, st.sampled_from(["a+", r"\d{2}", "x|y"]), st.sampled_from([0, re.I, re.S])),
    make(Point, st.floats(allow_nan=False), st.floats(allow_nan=False)),
    make(Frozen, texts, st.lists(texts, max_size=2).map(tuple)),
    make(lambda n, w, c: Profile(name=n, when=w, color=c), texts, st.none() | st.datetimes(), st.sampled_from(list(Color))),
    make(lambda n, c: OldModel(name=n, count=c), texts, st.integers(-100, 100)),
    messages,
    make(lambda c, m: Document(page_content=c, metadata=m), texts, st.dictionaries(texts, ints, max_size=2)),
)  # fmt: skip


def _containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(texts, inner, max_size=4),
        st.dictionaries(hashables, inner, max_size=3),
        st.tuples(inner, inner),
        st.sets(hashables, max_size=3),
        st.frozensets(hashables, max_size=3),
        make(deque, st.lists(inner, max_size=3), st.none() | st.integers(3, 5)),
        st.dictionaries(texts, inner, max_size=3).map(OrderedDict),
        st.dictionaries(hashables, st.integers(-5, 5), max_size=3).map(Counter),
        st.dictionaries(texts, inner, max_size=3).map(lambda d: defaultdict(list, d)),
        make(WithLater, st.integers(-9, 9), st.lists(make(Point, st.integers(0, 5)), max_size=2)),
        make(Slotted, st.datetimes(), make(Frozen, texts)),
        make(Pair, inner, inner),
        make(Send, texts, inner),
        make(lambda v, i: Interrupt(value=v, id=i), inner, texts),
        make(lambda u, r: Command(update=u, resume=r), st.none() | st.dictionaries(texts, inner, max_size=2), inner),
        inner.map(lambda v: Overwrite(value=v)),
        make(_DeltaSnapshot, inner),
        make(lambda a, m: LooseModel(a=a, more=m), st.integers(0, 9), inner),
        make(MyError, inner),
    )


values = st.recursive(leaves, _containers, max_leaves=25)


@given(values)
@settings(max_examples=400, deadline=None)
def test_round_trip_property(value: Any) -> None:
    round_trip(value)


@given(st.dictionaries(texts, values, max_size=4))
@settings(max_examples=150, deadline=None)
def test_state_dict_property(state: dict[str, Any]) -> None:
    # The codec embeds each channel value on its own: none may read as its $serde tag.
    serde = serializer()
    for value in state.values():
        data = serde.to_jsonable(value)
        assert not (isinstance(data, dict) and set(data) == {"$serde"})
    round_trip(state)


# --- standalone use with LangGraph's own InMemorySaver ---


class State(TypedDict):
    messages: Annotated[list, add_messages]
    when: datetime
    tags: set[str]
    color: Color


def test_graph_runs_and_resumes_with_in_memory_saver() -> None:
    def ask(state: State) -> dict[str, Any]:
        answer = interrupt({"question": "Proceed?", "at": state["when"]})
        return {
            "messages": [AIMessage(f"You said {answer}", tool_calls=[{"name": "t", "args": {}, "id": "c1"}])],
            "tags": state["tags"] | {"asked"},
        }

    def tool(state: State) -> dict[str, Any]:
        return {"messages": [ToolMessage("done\x00", tool_call_id="c1")], "color": Color.BLUE}

    builder = StateGraph(State)
    builder.add_node("ask", ask)
    builder.add_node("tool", tool)
    builder.add_edge(START, "ask")
    builder.add_edge("ask", "tool")
    saver = InMemorySaver(serde=JsonSerializer(allowed_classes=[Color]))
    graph = builder.compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "t1"}}
    start = {"messages": [HumanMessage("hi")], "when": datetime(2024, 1, 1, tzinfo=timezone.utc),
             "tags": {"new"}, "color": Color.RED}  # fmt: skip

    first = graph.invoke(start, config)
    assert first["__interrupt__"][0].value == {"question": "Proceed?", "at": start["when"]}
    snapshot = graph.get_state(config)
    assert snapshot.next == ("ask",)
    assert snapshot.tasks[0].interrupts[0].value["question"] == "Proceed?"

    final = graph.invoke(Command(resume="yes"), config)
    assert [type(m) for m in final["messages"]] == [HumanMessage, AIMessage, ToolMessage]
    assert final["messages"][1].content == "You said yes"
    assert final["messages"][2].content == "done\x00"
    assert final["tags"] == {"new", "asked"} and final["color"] is Color.BLUE
    history = list(graph.get_state_history(config))
    assert len(history) >= 4
    # every stored blob is readable JSON
    for blob in saver.blobs.values():
        if blob[0] != "empty":
            assert blob[0] == "json"
            orjson.loads(blob[1])


def test_loaded_messages_behave_like_the_originals() -> None:
    serde = serializer()
    originals = [AI, HumanMessage("hi", id="1"), RemoveMessage(id="x"), CASES["ai extra kwargs"], CASES["ai chunk"]]
    for original in originals:
        loaded = serde.loads_typed(serde.dumps_typed(original))
        assert loaded.model_dump() == original.model_dump()
        assert loaded.__pydantic_extra__ == original.__pydantic_extra__
        assert loaded.model_fields_set == original.model_fields_set
        assert loaded.model_copy(update={"id": "new"}).id == "new"
        assert type(original).model_validate(loaded.model_dump()) == original
    assert (serde.loads_typed(serde.dumps_typed(CASES["ai chunk"])) + AIMessageChunk("tail")).content == "partail"


def test_builtin_model_with_unknown_or_missing_fields_is_refused() -> None:
    serde = serializer()
    with pytest.raises(SerializationError, match="needs field 'content'"):
        serde.from_jsonable({"$model": {"class": "HumanMessage", "fields": {}}})
    with pytest.raises(SerializationError, match="has no fields"):
        serde.from_jsonable({"$model": {"class": "Document", "fields": {"page_content": "x", "evil": 1}}})


def test_package_docs_list_every_tag() -> None:
    import telar_checkpoint.serializer as package
    from telar_checkpoint.serializer._classes import CLASS_TAGS
    from telar_checkpoint.serializer._decode import TAGS as LOADED_TAGS

    documented = set(re.findall(r"^``(\$\w+)``", package.__doc__ or "", re.M))
    assert documented == set(LOADED_TAGS) | set(CLASS_TAGS) == TAGS


def test_works_inside_langgraph_encrypted_serializer() -> None:
    from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

    class XorCipher:  # a stand-in cipher: the wrapping, not the cryptography, is tested
        def encrypt(self, plaintext: bytes) -> tuple[str, bytes]:
            return "xor", bytes(b ^ 0x5A for b in plaintext)

        def decrypt(self, ciphername: str, ciphertext: bytes) -> bytes:
            assert ciphername == "xor"
            return bytes(b ^ 0x5A for b in ciphertext)

    serde = EncryptedSerializer(XorCipher(), serializer())
    value = CASES["state"]
    typed = serde.dumps_typed(value)
    assert typed[0] == "json+xor"
    assert_same(value, serde.loads_typed(typed))


def test_a_class_checked_once_still_refuses_bad_payloads() -> None:
    """The decoder remembers a checked class name; later payloads are still checked."""
    serde = serializer()
    stored = serde.to_jsonable(HumanMessage("hi", id="1"))
    assert serde.from_jsonable(stored) == HumanMessage("hi", id="1")  # the name is now known
    cases = {
        "missing keys": {"$model": {"class": "HumanMessage"}},
        "unexpected keys": {"$model": {"class": "HumanMessage", "fields": {}, "method": "x"}},
        "expected dict": {"$model": {"class": "HumanMessage", "fields": ["content"]}},
        "needs field 'content'": {"$model": {"class": "HumanMessage", "fields": {"id": "1"}}},
        "has no fields": {"$model": {"class": "Document", "fields": {"page_content": "x", "evil": 1}}},
        "not text": {"$model": {"class": ["HumanMessage"], "fields": {"content": "x"}}},
        "unknown tag": {"$model": {"class": "HumanMessage", "fields": {"content": {"$nope": 1}}}},
    }
    for _ in range(2):  # before and after Document is known
        for message, payload in cases.items():
            with pytest.raises(SerializationError, match=re.escape(message)):
                serde.from_jsonable(payload)
    serde.from_jsonable(serde.to_jsonable(Document(page_content="x")))
    partial = {"$model": {"class": "AIMessage", "fields": {"content": "x", "zz": [1]}}}
    for _ in range(2):
        loaded = serde.from_jsonable(partial)
        assert loaded == AIMessage("x", zz=[1])
        assert loaded.model_fields_set == {"content", "zz"}
        assert loaded.__pydantic_extra__ == {"zz": [1]}
        assert list(loaded.__dict__) == list(AIMessage.model_fields)
        assert loaded.tool_calls == [] and loaded.tool_calls is not serde.from_jsonable(partial).tool_calls


def test_a_remembered_class_name_follows_the_allowlist() -> None:
    class Model(pydantic.BaseModel):
        x: int

    class Other(pydantic.BaseModel):
        y: int = 0

    Other.__qualname__ = Model.__qualname__  # the same stored name, bound to another class
    serde = JsonSerializer(allowed_classes=[Model])
    stored = serde.to_jsonable(Model(x=1))
    assert type(serde.from_jsonable(stored)) is Model
    serde._allowlist.add_class(Other)
    assert type(serde.from_jsonable(stored)) is Other


def test_subclasses_of_builtin_types_are_stored_as_the_base_type() -> None:
    """As LangGraph's serializer: `message.text` (a TextAccessor) and other subclasses of
    str, int, float, list and dict read back as the base type, with the base type's
    value (the subclass's own __str__ or __iter__ is not what is stored)."""

    class Shout(str):
        def __str__(self) -> str:
            return "OVERRIDDEN"

    class Count(int):
        def __int__(self) -> int:
            return 99

    class Score(float): ...

    class Items(list):
        def __iter__(self) -> Any:
            return iter(["OVERRIDDEN"])

    class Fields(dict):
        def items(self) -> Any:
            return [("OVERRIDDEN", 1)]

    text = AIMessage("hello").text
    value = {"text": text, "shout": Shout("a\x00b"), "n": Count(2**70), "score": Score(0.5),
             "items": Items([Shout("x"), 1]), "fields": Fields(k=Count(3))}  # fmt: skip
    expected = {"text": "hello", "shout": "a\x00b", "n": 2**70, "score": 0.5, "items": ["x", 1], "fields": {"k": 3}}
    serde = JsonSerializer()
    assert_plain_json(serde.to_jsonable(value))
    loaded = serde.loads_typed(serde.dumps_typed(value))
    assert_same(expected, loaded)


def test_a_changed_class_gives_what_langgraph_gives() -> None:
    """A program's class that refuses its stored fields (it changed since they were
    stored): a pydantic model is built without validation, as LangGraph's serializer
    does; a dataclass, NamedTuple or Enum gives the plain data. Never an error."""
    serde = JsonSerializer(allowed_classes=[Profile, Point, Pair, Color])
    model = serde.from_jsonable({"$model": {"class": f"{__name__}:Profile", "fields": {"nick": "x"}}})
    assert type(model) is Profile and "name" not in model.__dict__  # as Profile.model_construct(nick="x")
    assert model.__dict__ == Profile.model_construct(nick="x").__dict__
    stored = [
        {"$dataclass": {"class": f"{__name__}:Point", "fields": {"x": 1, "z": 2}}},
        {"$namedtuple": {"class": f"{__name__}:Pair", "fields": {"middle": 1}}},
        {"$enum": {"class": f"{__name__}:Color", "value": "purple"}},
    ]
    assert [serde.from_jsonable(data) for data in stored] == [{"x": 1, "z": 2}, {"middle": 1}, "purple"]
