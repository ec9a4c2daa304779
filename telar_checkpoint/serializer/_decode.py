"""JSON values back to Python values: the exact inverse of `_encode`.

An object with one key starting with ``"$"`` is a tag, looked up in `TAGS`; an
unknown tag, a malformed payload or a class not on the allowlist raises
SerializationError. Nothing here imports a module or calls anything the data
names: classes come from the `Allowlist` dict, functions from fixed tables.
"""

from __future__ import annotations

import base64
import binascii
import copy
import dataclasses
import pathlib
import re
from collections import Counter, OrderedDict, defaultdict, deque
from collections.abc import Callable
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal, InvalidOperation
from enum import Enum
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

import pydantic
import pydantic.v1
from pydantic_core import PydanticUndefined

from telar_checkpoint.errors import SerializationError
from telar_checkpoint.serializer._registry import (
    BUILTIN_CLASSES,
    CONSTRUCT_WITHOUT_VALIDATION,
    Allowlist,
)

Decode = Callable[[Any], Any]
FACTORIES: dict[Any, Any] = {
    None: None, "list": list, "dict": dict, "set": set, "frozenset": frozenset, "tuple": tuple,
    "int": int, "float": float, "str": str, "bool": bool, "bytes": bytes,
    "Counter": Counter, "OrderedDict": OrderedDict, "deque": deque,
}  # fmt: skip
LEAF_TYPES = frozenset({str, int, float, bool, type(None)})
FLOATS = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}
_Send: type | None = BUILTIN_CLASSES.get("Send")


def _bad(tag: str, why: str) -> SerializationError:
    return SerializationError(f"stored value {tag} is malformed: {why}")


def _want(payload: Any, kind: type | tuple[type, ...], tag: str) -> Any:
    if not isinstance(payload, kind):
        raise _bad(tag, f"expected {getattr(kind, '__name__', kind)}, got {payload!r:.80}")
    return payload


def _record(payload: Any, tag: str, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> Any:
    """A payload object with exactly these keys (extra keys, such as `method`, refused)."""
    if type(payload) is dict and len(payload) == len(required) and not optional:
        for key in required:
            if key not in payload:
                break
        else:
            return payload
    _want(payload, dict, tag)
    missing = [key for key in required if key not in payload]
    unknown = [key for key in payload if key not in required and key not in optional]
    if missing or unknown:
        raise _bad(tag, f"missing keys {missing}, unexpected keys {unknown}")
    return payload


def _str(payload: Any, dec: Decode) -> str:
    runs = _want(payload, list, "$str")
    out = []
    for run in runs:
        if type(run) is str:
            out.append(run)
        elif type(run) is int and 0 <= run < 0x110000:
            out.append(chr(run))
        else:
            raise _bad("$str", f"bad run {run!r:.80}")
    return "".join(out)


def _int(payload: Any, dec: Decode) -> int:
    text = _want(payload, str, "$int")
    try:
        return int(text, 0)
    except ValueError as exc:
        raise _bad("$int", str(exc)) from None


def _float(payload: Any, dec: Decode) -> float:
    try:
        return FLOATS[payload]
    except (KeyError, TypeError):
        raise _bad("$float", f"{payload!r:.80} is not nan, inf or -inf") from None


def _dict(payload: Any, dec: Decode) -> dict[str, Any]:
    return {key: dec(value) for key, value in _want(payload, dict, "$dict").items()}


def _map(payload: Any, dec: Decode) -> dict[Any, Any]:
    out = {}
    for pair in _want(payload, list, "$map"):
        if type(pair) is not list or len(pair) != 2:
            raise _bad("$map", f"expected [key, value], got {pair!r:.80}")
        try:
            out[dec(pair[0])] = dec(pair[1])
        except TypeError as exc:  # an unhashable key
            raise _bad("$map", str(exc)) from None
    return out


def _any_dict(payload: Any, dec: Decode, tag: str) -> dict[Any, Any]:
    """A payload that is itself an encoded dict (plain, `$dict` or `$map`)."""
    value = dec(_want(payload, dict, tag))
    return _want(value, dict, tag)


def _b64(payload: Any, tag: str) -> bytes:
    try:
        return base64.b64decode(_want(payload, str, tag), validate=True)
    except binascii.Error as exc:
        raise _bad(tag, str(exc)) from None


def _deque(payload: Any, dec: Decode) -> deque[Any]:
    record = _record(payload, "$deque", ("items", "maxlen"))
    maxlen = _want(record["maxlen"], (int, type(None)), "$deque")
    return deque(dec(_want(record["items"], list, "$deque")), maxlen)


def _defaultdict(payload: Any, dec: Decode) -> defaultdict[Any, Any]:
    record = _record(payload, "$defaultdict", ("factory", "items"))
    if record["factory"] not in FACTORIES:
        raise _bad("$defaultdict", f"unknown factory {record['factory']!r:.80}")
    return defaultdict(FACTORIES[record["factory"]], _any_dict(record["items"], dec, "$defaultdict"))


def _parse(parse: Callable[[str], Any], payload: Any, tag: str) -> Any:
    try:
        return parse(_want(payload, str, tag))
    except (ValueError, InvalidOperation) as exc:
        raise _bad(tag, str(exc)) from None


def _clock(cls: type, payload: Any, dec: Decode, tag: str) -> Any:
    """A datetime or time: isoformat text, or local text plus tzinfo and fold."""
    if type(payload) is str:
        return _parse(cls.fromisoformat, payload, tag)  # type: ignore[attr-defined]
    record = _record(payload, tag, ("local", "tz", "fold"))
    local = _parse(cls.fromisoformat, record["local"], tag)  # type: ignore[attr-defined]
    tz = dec(record["tz"])
    if tz is not None and not isinstance(tz, (timezone, ZoneInfo)):
        raise _bad(tag, f"tz is {type(tz).__name__}, not a timezone")
    if record["fold"] not in (0, 1):
        raise _bad(tag, "fold is not 0 or 1")
    return local.replace(tzinfo=tz, fold=record["fold"])


def _timedelta(payload: Any, tag: str = "$timedelta") -> timedelta:
    parts = _want(payload, list, tag)
    if len(parts) != 3 or any(type(part) is not int for part in parts):
        raise _bad(tag, "expected [days, seconds, microseconds]")
    try:
        return timedelta(*parts)
    except OverflowError as exc:
        raise _bad(tag, str(exc)) from None


def _timezone(payload: Any, dec: Decode) -> timezone:
    record = _record(payload, "$timezone", ("offset", "name"))
    offset = _timedelta(record["offset"], "$timezone")
    name = _want(dec(record["name"]), (str, type(None)), "$timezone")
    try:
        return timezone(offset) if name is None else timezone(offset, name)
    except ValueError as exc:
        raise _bad("$timezone", str(exc)) from None


def _zoneinfo(payload: Any, dec: Decode) -> ZoneInfo:
    try:  # ZoneInfo refuses keys that are paths outside the tz database
        return ZoneInfo(_want(payload, str, "$zoneinfo"))
    except (ValueError, OSError) as exc:
        raise _bad("$zoneinfo", str(exc)) from None


def _regex(payload: Any, dec: Decode) -> re.Pattern[Any]:
    record = _record(payload, "$regex", ("pattern", "flags"))
    pattern = _want(dec(record["pattern"]), (str, bytes), "$regex")
    try:
        return re.compile(pattern, _want(record["flags"], int, "$regex"))
    except (re.error, ValueError) as exc:
        raise _bad("$regex", str(exc)) from None


def _set_of(kind: type, payload: Any, dec: Decode, tag: str) -> Any:
    try:
        return kind(dec(_want(payload, list, tag)))
    except TypeError as exc:  # an unhashable member
        raise _bad(tag, str(exc)) from None


TAGS: dict[str, Callable[[Any, Decode], Any]] = {
    "$str": _str,
    "$int": _int,
    "$float": _float,
    "$dict": _dict,
    "$map": _map,
    "$tuple": lambda p, dec: tuple(dec(_want(p, list, "$tuple"))),
    "$set": lambda p, dec: _set_of(set, p, dec, "$set"),
    "$frozenset": lambda p, dec: _set_of(frozenset, p, dec, "$frozenset"),
    "$bytes": lambda p, dec: _b64(p, "$bytes"),
    "$bytearray": lambda p, dec: bytearray(_b64(p, "$bytearray")),
    "$deque": _deque,
    "$odict": lambda p, dec: OrderedDict(_any_dict(p, dec, "$odict")),
    "$counter": lambda p, dec: Counter(_any_dict(p, dec, "$counter")),
    "$defaultdict": _defaultdict,
    "$datetime": lambda p, dec: _clock(datetime, p, dec, "$datetime"),
    "$date": lambda p, dec: _parse(date.fromisoformat, p, "$date"),
    "$time": lambda p, dec: _clock(time, p, dec, "$time"),
    "$timedelta": lambda p, dec: _timedelta(p),
    "$timezone": _timezone,
    "$zoneinfo": _zoneinfo,
    "$uuid": lambda p, dec: _parse(UUID, p, "$uuid"),
    "$decimal": lambda p, dec: _parse(Decimal, p, "$decimal"),
    "$path": lambda p, dec: pathlib.Path(_want(dec(p), str, "$path")),
    "$regex": _regex,
}


# --- classes: looked up in the allowlist, checked to be of the kind the tag says ---


def _fields(payload: Any, dec: Decode, tag: str) -> dict[str, Any]:
    fields = _want(payload["fields"], dict, tag)
    return {k: v if type(v) in LEAF_TYPES else dec(v) for k, v in fields.items()}


def _build(cls: type, build: Callable[[], Any], tag: str) -> Any:
    try:
        return build()
    except Exception as exc:  # the class refused the stored fields
        raise SerializationError(
            f"stored value {tag} could not rebuild {cls.__module__}.{cls.__qualname__}: {exc}"
        ) from exc


@dataclasses.dataclass(slots=True)
class _Restore:
    """How to rebuild one built-in pydantic class from stored fields without validation."""

    order: list[tuple[str, Any, int]]  # (field, default, how to fill it when not stored)
    allow_extra: bool
    direct: bool  # plain model: set its state as unpickling does; else model_construct


_REQUIRED, _VALUE, _FACTORY, _COPY = range(4)
_RESTORE: dict[type, _Restore] = {}
_IMMUTABLE = (type(None), bool, int, float, str, bytes, tuple, frozenset)
_MISSING = object()


def _restore_plan(cls: type[pydantic.BaseModel]) -> _Restore:
    plan = _RESTORE.get(cls)
    if plan is None:
        order, direct = [], True
        for name, field in cls.model_fields.items():
            if field.default_factory is not None:
                order.append((name, field.default_factory, _FACTORY))
                direct = direct and not field.default_factory_takes_validated_data
            elif field.default is PydanticUndefined:
                order.append((name, None, _REQUIRED))
            else:
                kind = _VALUE if type(field.default) in _IMMUTABLE else _COPY
                order.append((name, field.default, kind))
        direct = (
            direct
            and not cls.__private_attributes__
            and cls.model_post_init is pydantic.BaseModel.model_post_init
        )
        plan = _Restore(order, cls.model_config.get("extra") == "allow", direct)
        _RESTORE[cls] = plan
    return plan


def _construct(cls: type[pydantic.BaseModel], fields: dict[str, Any]) -> Any:
    """A built-in model with exactly the stored fields, defaults filled in as pydantic would.

    The stored fields are values pydantic validated when the model was made, and
    some classes (RemoveMessage) refuse their own fields in __init__, so they
    are not validated again. model_construct is the public way to do this, but
    inspects every default_factory on each call; for plain models we set the
    state as unpickling does, which is 5x faster.
    """
    plan = _restore_plan(cls)
    if not plan.direct:
        return cls.model_construct(set(fields), **fields)
    values = {}
    present = 0
    for name, default, kind in plan.order:
        value = fields.get(name, _MISSING)
        if value is not _MISSING:
            present += 1
        elif kind == _VALUE:
            value = default
        elif kind == _FACTORY:
            value = default()
        elif kind == _COPY:
            value = copy.deepcopy(default)
        else:
            raise _bad("$model", f"{cls.__qualname__} needs field {name!r}")
        values[name] = value
    extra: dict[str, Any] | None = {} if plan.allow_extra else None
    if present < len(fields):
        if extra is None:
            unknown = sorted(set(fields) - set(values))
            raise _bad("$model", f"{cls.__qualname__} has no fields {unknown}")
        extra = {name: value for name, value in fields.items() if name not in values}
    obj = cls.__new__(cls)
    obj.__setstate__(
        {
            "__dict__": values,
            "__pydantic_extra__": extra,
            "__pydantic_fields_set__": set(fields),
            "__pydantic_private__": None,
        }
    )
    return obj


def _model(payload: Any, dec: Decode, allowlist: Allowlist) -> Any:
    record = _record(payload, "$model", ("class", "fields"))
    cls = allowlist.lookup(record["class"], "$model")
    if not issubclass(cls, pydantic.BaseModel):
        raise _bad("$model", f"{record['class']!r} is not a pydantic model")
    fields = _fields(record, dec, "$model")
    if cls in CONSTRUCT_WITHOUT_VALIDATION:
        return _build(cls, lambda: _construct(cls, fields), "$model")
    return _build(cls, lambda: cls(**fields), "$model")


def _model_v1(payload: Any, dec: Decode, allowlist: Allowlist) -> Any:
    record = _record(payload, "$model_v1", ("class", "fields"))
    cls = allowlist.lookup(record["class"], "$model_v1")
    if not issubclass(cls, pydantic.v1.BaseModel):
        raise _bad("$model_v1", f"{record['class']!r} is not a pydantic.v1 model")
    fields = _fields(record, dec, "$model_v1")
    return _build(cls, lambda: cls(**fields), "$model_v1")


def _dataclass(payload: Any, dec: Decode, allowlist: Allowlist) -> Any:
    record = _record(payload, "$dataclass", ("class", "fields"))
    cls = allowlist.lookup(record["class"], "$dataclass")
    if not dataclasses.is_dataclass(cls):
        raise _bad("$dataclass", f"{record['class']!r} is not a dataclass")
    fields = _fields(record, dec, "$dataclass")
    init_names = {field.name for field in dataclasses.fields(cls) if field.init}
    later = {name: value for name, value in fields.items() if name not in init_names}
    known = {field.name for field in dataclasses.fields(cls)}
    if not later.keys() <= known:
        raise _bad("$dataclass", f"{record['class']} has no fields {sorted(later.keys() - known)}")

    def build() -> Any:
        obj = cls(**{name: value for name, value in fields.items() if name in init_names})
        for name, value in later.items():  # init=False fields, frozen or not
            object.__setattr__(obj, name, value)
        return obj

    return _build(cls, build, "$dataclass")


def _namedtuple(payload: Any, dec: Decode, allowlist: Allowlist) -> Any:
    record = _record(payload, "$namedtuple", ("class", "fields"))
    cls = allowlist.lookup(record["class"], "$namedtuple")
    if not (issubclass(cls, tuple) and hasattr(cls, "_fields")):
        raise _bad("$namedtuple", f"{record['class']!r} is not a NamedTuple")
    fields = _fields(record, dec, "$namedtuple")
    return _build(cls, lambda: cls(**fields), "$namedtuple")


def _enum(payload: Any, dec: Decode, allowlist: Allowlist) -> Any:
    record = _record(payload, "$enum", ("class", "value"))
    cls = allowlist.lookup(record["class"], "$enum")
    if not issubclass(cls, Enum):
        raise _bad("$enum", f"{record['class']!r} is not an Enum")
    value = dec(record["value"])
    return _build(cls, lambda: cls(value), "$enum")


def _error(payload: Any, dec: Decode, allowlist: Allowlist) -> Any:
    record = _record(payload, "$error", ("class", "args"))
    cls = allowlist.lookup(record["class"], "$error")
    if not issubclass(cls, BaseException):
        raise _bad("$error", f"{record['class']!r} is not an exception")
    args = dec(_want(record["args"], list, "$error"))
    return _build(cls, lambda: cls(*args), "$error")


def _send(payload: Any, dec: Decode, allowlist: Allowlist) -> Any:
    if _Send is None:  # pragma: no cover - langgraph is installed in tests
        raise SerializationError("stored value $send needs the langgraph package")
    record = _record(payload, "$send", ("node", "arg"), ("timeout",))
    node, arg, timeout = dec(record["node"]), dec(record["arg"]), dec(record.get("timeout"))
    return _build(_Send, lambda: _Send(node, arg, timeout=timeout), "$send")


CLASS_TAGS: dict[str, Callable[[Any, Decode, Allowlist], Any]] = {
    "$model": _model,
    "$model_v1": _model_v1,
    "$dataclass": _dataclass,
    "$namedtuple": _namedtuple,
    "$enum": _enum,
    "$error": _error,
    "$send": _send,
}


def make_decoder(allowlist: Allowlist) -> Decode:
    """A `from_jsonable` function loading classes from `allowlist` only."""

    leaf = LEAF_TYPES

    def dec(data: Any) -> Any:
        t = type(data)
        if t is dict:
            if len(data) == 1:
                for key in data:
                    if key[:1] == "$":
                        return _tagged(key, data[key])
            # leaves inline: one call per container, not per string
            return {k: v if type(v) in leaf else dec(v) for k, v in data.items()}
        if t is list:
            return [v if type(v) in leaf else dec(v) for v in data]
        return data

    def _tagged(tag: str, payload: Any) -> Any:
        decode = TAGS.get(tag)
        if decode is not None:
            return decode(payload, dec)
        decode_class = CLASS_TAGS.get(tag)
        if decode_class is not None:
            return decode_class(payload, dec, allowlist)
        raise SerializationError(
            f"stored value has unknown tag {tag!r:.80}; it was not written by this "
            "JsonSerializer (a newer version, or another program)"
        )

    return dec
