"""Python values to JSON values: plain where JSON has the type, a one-key tag where not.

`to_jsonable` dispatches on the exact type: the JSON types first, inline, then a
dict from type to encoder, filled on first sight of a new class. A value is
written as LangGraph's serializer reads it back where that differs from the value
(an exception as its repr text, a `str` subclass as a `str`); one we cannot write
raises SerializationError naming its type.
"""

from __future__ import annotations

import base64
import dataclasses
import keyword
import pathlib
import re
import threading
from collections import Counter, OrderedDict, defaultdict, deque
from collections.abc import Callable
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from enum import Enum
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

import pydantic
import pydantic.v1
from pydantic_core import PydanticUndefined

from telar_checkpoint.errors import SerializationError
from telar_checkpoint.serializer._payload import REGEX_FLAGS, is_zone_key
from telar_checkpoint.serializer._registry import BUILTIN_CLASSES, class_name

INT_MIN = -(1 << 63)
INT_MAX = (1 << 63) - 1
# Characters JSON text cannot carry safely: NUL (Postgres jsonb refuses it) and
# lone surrogates (not valid UTF-8, orjson refuses them).
UNSAFE_CHARS = re.compile("[\x00\ud800-\udfff]")
# defaultdict factories we can name; any other factory is code we will not store.
DEFAULT_FACTORIES: dict[Any, str | None] = {
    None: None, list: "list", dict: "dict", set: "set", frozenset: "frozenset", tuple: "tuple",
    int: "int", float: "float", str: "str", bool: "bool", bytes: "bytes",
    Counter: "Counter", OrderedDict: "OrderedDict", deque: "deque",
}  # fmt: skip

_Send: type | None = BUILTIN_CLASSES.get("Send")
_NO_DEFAULT = object()


def to_jsonable(obj: Any) -> Any:
    """`obj` as dicts (str keys), lists, str, 64-bit ints, finite floats, bools and None;
    SerializationError if a part cannot be stored or is nested too deeply (or contains itself)."""
    try:  # every call guards (free since Python 3.11): the one the recursion fails in answers
        t = type(obj)
        if t is str:
            if obj.isascii():
                if "\x00" not in obj:
                    return obj
            elif UNSAFE_CHARS.search(obj) is None:
                return obj
            return _encode_unsafe_str(obj)
        if t is dict:
            return _encode_dict(obj)
        if t is list:
            return _encode_list(obj)
        if t is int:
            return obj if INT_MIN <= obj <= INT_MAX else _encode_big_int(obj)
        if t is float:
            return obj if obj - obj == 0.0 else {"$float": repr(obj)}
        if obj is None or t is bool:
            return obj
        encode = _encoder_of(t)
        if encode is None:
            encode = _encoder_for_class(t, obj)
        return encode(obj)
    except RecursionError:
        raise SerializationError("cannot store a value nested this deeply (or one that contains itself)") from None


def _plain_key(key: Any) -> bool:
    if type(key) is not str:
        return False
    if key.isascii():
        return "\x00" not in key
    return UNSAFE_CHARS.search(key) is None


# Keys seen plain (exact str, no NUL or lone surrogate), by their text: a state's dicts have
# few keys, and the same ones again; bounded, short keys only.
_PLAIN_KEYS: set[str] = set()


def _encode_dict(obj: dict[Any, Any]) -> Any:
    out = {}
    for key, value in obj.items():
        if not (type(key) is str and key in _PLAIN_KEYS):
            if not _plain_key(key):
                return {"$map": [[to_jsonable(k), to_jsonable(v)] for k, v in obj.items()]}
            if len(key) <= 64 and len(_PLAIN_KEYS) < 4096:
                _PLAIN_KEYS.add(key)
        # ASCII strings and small ints inline: most leaves of a state are these
        t = type(value)
        if t is str and value.isascii() and "\x00" not in value:
            out[key] = value
        elif (t is int and INT_MIN <= value <= INT_MAX) or value is None or t is bool:
            out[key] = value
        elif t is dict:  # as `to_jsonable` does, without its tests on the way
            out[key] = _encode_dict(value)
        else:
            out[key] = to_jsonable(value)
    if len(out) == 1 and key[:1] == "$":
        return {"$dict": out}  # a user dict that would read as a tag
    return out


def _encode_list(obj: list[Any]) -> list[Any]:
    # An item's encoder straight from ENCODERS (a model's, a dict's, a str's...), without
    # `to_jsonable`'s tests on the way: a class seen for the first time goes through it.
    return [
        item if (t := type(item)) is str and item.isascii() and "\x00" not in item
        else to_jsonable(item) if (encode := _encoder_of(t)) is None else encode(item)
        for item in obj
    ]  # fmt: skip


def _encode_unsafe_str(obj: str) -> Any:
    runs: list[str | int] = []
    start = 0
    for match in UNSAFE_CHARS.finditer(obj):
        if match.start() > start:
            runs.append(obj[start : match.start()])
        runs.append(ord(match.group()))
        start = match.end()
    if start < len(obj):
        runs.append(obj[start:])
    return {"$str": runs}


def _encode_big_int(obj: int) -> Any:
    try:
        return {"$int": str(obj)}
    except ValueError:  # beyond int-to-str digit limit: hex has none
        return {"$int": hex(obj)}


def _items(obj: Any) -> list[Any]:
    """Set members in a stable order when they sort, so equal sets store equal text."""
    try:
        members = sorted(obj)
    except TypeError:
        members = list(obj)
    return [to_jsonable(item) for item in members]


def _timedelta(obj: timedelta) -> list[int]:
    return [obj.days, obj.seconds, obj.microseconds]


def _iso_tz(tz: Any) -> bool:
    """Whether isoformat() text brings `tz` back exactly (none, or an unnamed offset)."""
    if tz is None:
        return True
    if type(tz) is not timezone:
        return False
    args = tz.__getinitargs__()  # type: ignore[attr-defined]  # (C method, not in typeshed); fromisoformat drops sub-second offsets
    return len(args) == 1 and args[0].microseconds == 0


def _encode_datetime(obj: datetime) -> Any:
    if obj.fold == 0 and _iso_tz(obj.tzinfo):
        return {"$datetime": obj.isoformat()}
    local = obj.replace(tzinfo=None, fold=0).isoformat()
    return {"$datetime": {"local": local, "tz": to_jsonable(obj.tzinfo), "fold": obj.fold}}


def _encode_time(obj: time) -> Any:
    if obj.fold == 0 and _iso_tz(obj.tzinfo):
        return {"$time": obj.isoformat()}
    local = obj.replace(tzinfo=None, fold=0).isoformat()
    return {"$time": {"local": local, "tz": to_jsonable(obj.tzinfo), "fold": obj.fold}}


def _encode_timezone(obj: timezone) -> Any:
    args = obj.__getinitargs__()  # type: ignore[attr-defined]  # (C method, not in typeshed)
    name = args[1] if len(args) > 1 else None
    return {"$timezone": {"offset": _timedelta(args[0]), "name": to_jsonable(name)}}


def _encode_zoneinfo(obj: ZoneInfo) -> Any:
    if obj.key is None:
        raise SerializationError("cannot store a ZoneInfo loaded from a file (it has no key)")
    if not is_zone_key(obj.key):  # loading refuses it: it reads only keys of the tz database
        raise SerializationError(f"cannot store ZoneInfo {obj.key!r:.80}: it is not a key of the tz database")
    return {"$zoneinfo": obj.key}


def _encode_defaultdict(obj: defaultdict[Any, Any]) -> Any:
    factory = obj.default_factory
    try:
        name = DEFAULT_FACTORIES[factory]
    except (KeyError, TypeError):
        raise SerializationError(
            f"cannot store a defaultdict whose default_factory is {factory!r}; "
            f"use one of: {', '.join(str(n) for n in DEFAULT_FACTORIES.values())}"
        ) from None
    return {"$defaultdict": {"factory": name, "items": _encode_dict(dict(obj))}}


def _encode_regex(obj: re.Pattern[Any]) -> Any:
    # Without re.DEBUG, which only prints the pattern when it is compiled (loading refuses it).
    return {"$regex": {"pattern": to_jsonable(obj.pattern), "flags": obj.flags & REGEX_FLAGS}}


def _encode_str(obj: str) -> Any:
    if obj.isascii():
        if "\x00" not in obj:
            return obj
    elif UNSAFE_CHARS.search(obj) is None:
        return obj
    return _encode_unsafe_str(obj)


def _same(obj: Any) -> Any:
    return obj


ENCODERS: dict[type, Callable[[Any], Any]] = {
    # the JSON types, as `to_jsonable` writes them inline (for `_encode_list` and `_encode_dict`)
    str: _encode_str,
    dict: _encode_dict,
    list: _encode_list,
    int: lambda obj: obj if INT_MIN <= obj <= INT_MAX else _encode_big_int(obj),
    float: lambda obj: obj if obj - obj == 0.0 else {"$float": repr(obj)},
    bool: _same,
    type(None): _same,
    # the other types
    tuple: lambda obj: {"$tuple": [to_jsonable(item) for item in obj]},
    set: lambda obj: {"$set": _items(obj)},
    frozenset: lambda obj: {"$frozenset": _items(obj)},
    bytes: lambda obj: {"$bytes": base64.b64encode(obj).decode("ascii")},
    bytearray: lambda obj: {"$bytearray": base64.b64encode(obj).decode("ascii")},
    deque: lambda obj: {
        "$deque": {"items": [to_jsonable(item) for item in obj], "maxlen": obj.maxlen}
    },
    OrderedDict: lambda obj: {"$odict": _encode_dict(dict(obj))},
    Counter: lambda obj: {"$counter": _encode_dict(dict(obj))},
    defaultdict: _encode_defaultdict,
    datetime: _encode_datetime,
    date: lambda obj: {"$date": obj.isoformat()},
    time: _encode_time,
    timedelta: lambda obj: {"$timedelta": _timedelta(obj)},
    timezone: _encode_timezone,
    UUID: lambda obj: {"$uuid": str(obj)},
    Decimal: lambda obj: {"$decimal": str(obj)},
    re.Pattern: _encode_regex,
}
_encoder_of = ENCODERS.get  # bound once: ENCODERS is only ever added to (or a model's encoder replaced)


# --- classes: encoders built once per class and kept in ENCODERS ---


def _model_plan(cls: type[pydantic.BaseModel]) -> list[tuple[str, Any]]:
    """(field, default) pairs: a field never set and still at a simple default is left
    out of the JSON (loading fills it in), so a stored message shows what was given."""
    plan = []
    for name, field in cls.model_fields.items():
        default: Any = _NO_DEFAULT
        if field.default_factory is None:
            if field.default is not PydanticUndefined:
                default = field.default
        elif field.default_factory in (list, dict):
            default = field.default_factory()  # type: ignore[call-arg]
        plan.append((name, default))
    return plan


def _model_encoder(cls: type[pydantic.BaseModel], shape: Any = None) -> Callable[[Any], Any]:
    """The encoder of one pydantic model class, written out field by field and compiled once
    (a loop over the fields cost a fifth more: 400 agent messages 1.26 ms, against 1.05).

    A field is left out when never set and still at its simple default (`_model_plan`). The
    encoder first tries a quick encoder compiled for the instance's fields set, one per size of
    fields set, the first seen of each size, inline (`_shaped_encoder`; `shape`, a message's content and
    id say, is the first): each other field at its default (None too) and no extra fields, then
    those fields in one display. A real agent's messages have every field set (`add_messages`
    sets them): 240 of them 0.61 ms on the way below, 0.40 ms so. Then the common case: no
    field with a default other than None set, each such field at its default, no extra fields;
    then only the other fields are looked at (a None default: written when not None, or when
    set). Otherwise, field by field:
    left out when unset and at its default, told as cheaply as can be done exactly (``is
    None``; an exact, empty `dict` or `list`; else the default's exact type and ``==``). The
    common leaves inline, as `to_jsonable` would write them; the rest through their encoders.

    The names, defaults and helpers are the arguments of a function that returns the encoder
    (read from its closure, as fast as constants).
    """
    name = class_name(cls)
    args: dict[str, Any] = {
        "to_jsonable": to_jsonable, "_encode_dict": _encode_dict, "_encode_list": _encode_list,
        "_extra": _encode_extra, "NAME": name,
    }  # fmt: skip
    plan = _model_plan(cls)
    # The common case reads the fields as attributes (`obj.content`: half the cost of
    # `obj.__dict__["content"]`), where that reads the instance's own value: plain names,
    # nothing of that name on the class, no __getattribute__ of its own. A field missing
    # from the instance (a model_construct without it) takes the way field by field.
    by_attribute = cls.__getattribute__ is object.__getattribute__ and all(  # type: ignore[comparison-overlap]
        field.isascii() and field.isidentifier() and not keyword.iskeyword(field)
        and not any(field in vars(klass) for klass in cls.__mro__)
        for field, _ in plan
    )  # fmt: skip
    common, fast, fixed = [], [], []  # the common case: `common` tells it, `fast` writes it
    at_default: dict[int, str] = {}  # field -> the test that it holds its default (not None)
    slow = ["        values = obj.__dict__", "        fields = {}"]  # field by field
    for i, (field, default) in enumerate(plan):
        key = f"K{i}"
        args[key] = field
        read = f"obj.{field}" if by_attribute else f"values[{key}]"
        if default is _NO_DEFAULT:
            fast += [f"v = {read}", f"fields[{key}] = {_INLINE}"]
        elif default is None:
            fast += [
                f"if (v := {read}) is not None:",
                f"    fields[{key}] = {_INLINE}",
                f"elif {key} in was_set:",
                f"    fields[{key}] = None",
            ]
        else:
            fixed.append(field)
            if type(default) in (dict, list) and not default:
                at_default[i] = f"type(v := {read}) is {type(default).__name__} and not v"
            elif type(default) is str:  # a str equals itself: the default object is its default
                args[f"D{i}"] = default
                at_default[i] = f"((v := {read}) is D{i} or type(v) is str and v == D{i})"
            else:
                args[f"D{i}"], args[f"T{i}"] = default, type(default)
                at_default[i] = f"type(v := {read}) is T{i} and v == D{i}"
            common.append(at_default[i])
        slow.append(f"        v = values[{key}]")
        indent = "        "
        if default is not _NO_DEFAULT:
            if default is None:
                kept = "v is not None"
            elif type(default) in (dict, list) and not default:
                kept = f"type(v) is not {type(default).__name__} or v"
            else:
                args.setdefault(f"D{i}", default)
                args[f"T{i}"] = type(default)
                kept = f"type(v) is not T{i} or not v == D{i}"
            slow.append(f"{indent}if {kept} or {key} in was_set:")
            indent += "    "
        slow += _leaf(f"fields[{key}]", indent)
    args["FIXED"] = frozenset(fixed)
    common = ["FIXED.isdisjoint(was_set)", *common, "not obj.__pydantic_extra__"]
    fast = [
        f"if {' and '.join(common)}:",
        "    fields = {}",
        *("    " + line for line in fast),
        "    return {'$model': {'class': NAME, 'fields': fields}}",
    ]
    if by_attribute:
        fast = ["try:", *("    " + line for line in fast), "except AttributeError:", "    pass"]
    else:
        fast = ["values = obj.__dict__", *fast]
    body = [
        "    def encode(obj):",
        "        was_set = obj.__pydantic_fields_set__",
        *("        " + line for line in fast),
        *slow,
        "        extra = obj.__pydantic_extra__",
        "        if extra:",
        "            _extra(NAME, extra, fields)",
        "        return {'$model': {'class': NAME, 'fields': fields}}",
        "    return encode",
    ]
    source = f"def make({', '.join(args)}):\n" + "\n".join(body)
    namespace: dict[str, Any] = {}
    # our own text: names and defaults are arguments, never code, but for a field read as an
    # attribute, whose name is then an ASCII identifier
    exec(source, namespace)  # noqa: S102
    general: Callable[[Any], Any] = namespace["make"](**args)
    if not by_attribute:
        return general
    return _shaped_encoder(cls, plan, at_default, args, general, shape)


_MAX_SHAPES = 8  # quick ways per model class, at most


def _shaped_encoder(
    cls: type[pydantic.BaseModel], plan: list[tuple[str, Any]], at_default: dict[int, str],
    args: dict[str, Any], general: Callable[[Any], Any], first: Any,
) -> Callable[[Any], Any]:
    """A model's encoder with a quick way per size of fields set, inline: for the first fields
    set of that size it sees, used while an instance's fields set equals it; any other instance
    goes through `general`. At most `_MAX_SHAPES`, whatever the instances.

    A fields set of a new size makes a new encoder with one more way (`_shapes_source`), which
    takes this class's place in ENCODERS; an encoder made before hands such instances to the
    newest (no call to a way of its own: 240 agent messages 0.36 ms, against 0.39 with one)."""
    fields = frozenset(cls.model_fields)
    shapes: dict[int, frozenset[str]] = {}  # size -> the fields set of that size seen first
    newest: list[Callable[[Any], Any]] = []
    made: list[Callable[[Any], Any]] = []  # every encoder made here: each may be in ENCODERS

    lock = threading.Lock()

    def build(sizes: dict[int, frozenset[str]]) -> Callable[[Any], Any]:
        source = _shapes_source(plan, at_default, args, sizes)
        namespace: dict[str, Any] = {}
        exec(source, namespace)  # noqa: S102  # our own text: fields read as attributes are ASCII identifiers
        shape_args = {f"S{size}": shape for size, shape in sizes.items()}
        encode: Callable[[Any], Any] = namespace["make"](**args, **shape_args, general=general, learn=learn)
        if ENCODERS.get(cls) in made:
            ENCODERS[cls] = encode
        newest[:] = [encode]  # before `shapes` tells of its new way: the newest has every way
        made.append(encode)
        shapes.update(sizes)
        return encode

    def learn(obj: Any) -> Any:
        """Encode `obj`, whose fields set the encoder that called has no way for."""
        shape = frozenset(obj.__pydantic_fields_set__)
        if len(shape) not in shapes and shape <= fields and len(shapes) < _MAX_SHAPES:
            with lock:
                if len(shape) not in shapes:
                    build({**shapes, len(shape): shape})
        if shapes.get(len(shape)) == shape:  # the newest encoder has a way for it
            return newest[0](obj)
        return general(obj)

    sizes: dict[int, frozenset[str]] = {}
    if isinstance(first, (set, frozenset)) and frozenset(first) <= fields:
        sizes[len(first)] = frozenset(first)
    return build(sizes)


def _shapes_source(
    plan: list[tuple[str, Any]], at_default: dict[int, str], args: dict[str, Any], shapes: dict[int, frozenset[str]]
) -> str:
    """The encoder's text, a way per fields set in `shapes`: each field not in it that has a
    default at that default (None too), no extra fields; then the fields in one display, each
    value's likely type (by its default's) told inline."""
    body = ["    def encode(obj):", "        was_set = obj.__pydantic_fields_set__"]
    for size, shape in shapes.items():
        tests, shown = [], []
        for i, (field, default) in enumerate(plan):
            if field in shape or default is _NO_DEFAULT:
                if default is None:
                    value = f"v if (v := obj.{field}) is None or {_PLAIN_STR} else to_jsonable(v)"
                elif type(default) is dict and not default:
                    value = f"(_encode_dict(v) if v else {{}}) if type(v := obj.{field}) is dict else to_jsonable(v)"
                elif type(default) is list and not default:
                    value = f"(_encode_list(v) if v else []) if type(v := obj.{field}) is list else to_jsonable(v)"
                else:
                    value = f"v if type(v := obj.{field}) is str and v.isascii() and '\\x00' not in v else to_jsonable(v)"
                shown.append(f"K{i}: {value}")
            elif default is None:
                tests.append(f"obj.{field} is None")
            else:
                tests.append(at_default[i])
        tests.append("not obj.__pydantic_extra__")
        body += [
            f"        if was_set == S{size}:",  # sets of other sizes told apart first, in C
            "            try:",
            f"                if {' and '.join(tests)}:",
            f"                    return {{'$model': {{'class': NAME, 'fields': {{{', '.join(shown)}}}}}}}",
            "            except AttributeError:",
            "                pass",
            "            return general(obj)",
        ]
    body += ["        return learn(obj)", "    return encode"]
    names = [*args, *(f"S{size}" for size in shapes), "general", "learn"]
    return f"def make({', '.join(names)}):\n" + "\n".join(body)


_PLAIN_STR = "type(v) is str and v.isascii() and '\\x00' not in v"


# `v` as `to_jsonable` writes it, an ASCII str without NUL inline
_INLINE = f"v if {_PLAIN_STR} else to_jsonable(v)"


def _leaf(target: str, indent: str) -> list[str]:
    """Code that sets `target` to `v` written as `to_jsonable` writes it, the common leaves inline."""
    return [
        f"{indent}t = type(v)",
        f"{indent}if t is str:",
        f"{indent}    {target} = v if v.isascii() and '\\x00' not in v else to_jsonable(v)",
        f"{indent}elif v is None or t is bool:",
        f"{indent}    {target} = v",
        f"{indent}elif t is dict:",
        f"{indent}    {target} = _encode_dict(v)",
        f"{indent}elif t is list:",
        f"{indent}    {target} = _encode_list(v)",
        f"{indent}else:",
        f"{indent}    {target} = to_jsonable(v)",
    ]


def _encode_extra(name: str, extra: dict[str, Any], fields: dict[str, Any]) -> None:
    """Add a model's extra fields (pydantic's `extra="allow"`) to its stored `fields`."""
    for field, value in extra.items():
        if not _plain_key(field):
            raise SerializationError(
                f"cannot store extra field {field!r} of {name}: its name holds NUL or a lone surrogate"
            )
        fields[field] = to_jsonable(value)


def _model_v1_encoder(cls: type[pydantic.v1.BaseModel]) -> Callable[[Any], Any]:
    name = class_name(cls)
    return lambda obj: {
        "$model_v1": {
            "class": name,
            "fields": {field: to_jsonable(value) for field, value in obj.__dict__.items()},
        }
    }


def _dataclass_encoder(cls: type) -> Callable[[Any], Any]:
    name = class_name(cls)
    names = [field.name for field in dataclasses.fields(cls)]
    return lambda obj: {
        "$dataclass": {
            "class": name,
            "fields": {field: to_jsonable(getattr(obj, field)) for field in names},
        }
    }


def _namedtuple_encoder(cls: type) -> Callable[[Any], Any]:
    name = class_name(cls)
    names = cls._fields  # type: ignore[attr-defined]
    return lambda obj: {
        "$namedtuple": {
            "class": name,
            "fields": {field: to_jsonable(value) for field, value in zip(names, obj)},
        }
    }


def _enum_encoder(cls: type[Enum]) -> Callable[[Any], Any]:
    name = class_name(cls)
    return lambda obj: {"$enum": {"class": name, "value": to_jsonable(obj.value)}}


def _encode_error(obj: BaseException) -> Any:
    """An exception as its repr text, as LangGraph's serializer stores it: LangGraph
    reads a failed task's error back as that text (`StateSnapshot.tasks[i].error`)."""
    return to_jsonable(repr(obj))


# Built-in types whose subclasses (a `TextAccessor`, an `np.float64`) we store as the
# base type's value, as LangGraph's serializer does: they read back as the base type.
# The base method returns an exact copy without calling the subclass's overrides.
_BASE_VALUE: tuple[tuple[type, Callable[[Any], Any]], ...] = (
    (str, str.__str__), (int, int.__int__), (float, float.__float__),
    (list, list.copy), (dict, dict.copy),
)  # fmt: skip


def _base_type_encoder(cls: type) -> Callable[[Any], Any] | None:
    """For a subclass of a type in _BASE_VALUE: store the base type's value."""
    for base, base_value in _BASE_VALUE:
        if issubclass(cls, base):
            return lambda obj: to_jsonable(base_value(obj))
    return None


def _encode_send(obj: Any) -> Any:
    payload = {"node": to_jsonable(obj.node), "arg": to_jsonable(obj.arg)}
    timeout = getattr(obj, "timeout", None)  # langgraph>=1.2; older Sends have none
    if timeout is not None:
        payload["timeout"] = to_jsonable(timeout)
    return {"$send": payload}


def _encoder_for_class(cls: type, obj: Any = None) -> Callable[[Any], Any]:
    """Pick, and remember, the encoder for a class not in ENCODERS yet."""
    encode: Callable[[Any], Any]
    if issubclass(cls, Enum):
        encode = _enum_encoder(cls)
    elif issubclass(cls, pydantic.BaseModel):
        encode = _model_encoder(cls, getattr(obj, "__pydantic_fields_set__", None))
    elif issubclass(cls, pydantic.v1.BaseModel):
        encode = _model_v1_encoder(cls)
    elif dataclasses.is_dataclass(cls):
        encode = _dataclass_encoder(cls)
    elif issubclass(cls, tuple) and hasattr(cls, "_fields"):
        encode = _namedtuple_encoder(cls)
    elif cls is _Send:
        encode = _encode_send
    elif issubclass(cls, BaseException):
        encode = _encode_error
    elif cls in (pathlib.PosixPath, pathlib.WindowsPath):
        encode = lambda obj: {"$path": to_jsonable(str(obj))}  # noqa: E731
    elif issubclass(cls, ZoneInfo):
        encode = _encode_zoneinfo
    elif (as_base := _base_type_encoder(cls)) is not None:
        encode = as_base
    else:
        raise SerializationError(
            f"cannot store a value of type {cls.__module__}.{cls.__qualname__} as JSON; "
            "use JSON types, a dataclass, a pydantic model, an Enum or a NamedTuple"
        )
    ENCODERS[cls] = encode
    return encode

