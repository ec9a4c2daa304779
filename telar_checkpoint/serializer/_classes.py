"""Stored objects that name a class: looked up in the allowlist, checked to be of
the kind their tag says, and rebuilt through that class only.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from enum import Enum
from typing import Any

import pydantic
import pydantic.v1
from pydantic_core import PydanticUndefined

from telar_checkpoint.errors import SerializationError
from telar_checkpoint.serializer._payload import LEAF_TYPES, Decode, bad, expect_keys, want
from telar_checkpoint.serializer._registry import (
    BUILTIN_CLASSES,
    CONSTRUCT_WITHOUT_VALIDATION,
    Allowlist,
)

_Send: type | None = BUILTIN_CLASSES.get("Send")


def _fields(payload: Any, dec: Decode, tag: str) -> dict[str, Any]:
    fields = want(payload["fields"], dict, tag)
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
            raise bad("$model", f"{cls.__qualname__} needs field {name!r}")
        values[name] = value
    extra: dict[str, Any] | None = {} if plan.allow_extra else None
    if present < len(fields):
        if extra is None:
            unknown = sorted(set(fields) - set(values))
            raise bad("$model", f"{cls.__qualname__} has no fields {unknown}")
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
    record = expect_keys(payload, "$model", ("class", "fields"))
    cls = allowlist.lookup(record["class"], "$model")
    if not issubclass(cls, pydantic.BaseModel):
        raise bad("$model", f"{record['class']!r} is not a pydantic model")
    fields = _fields(record, dec, "$model")
    if cls in CONSTRUCT_WITHOUT_VALIDATION:
        return _build(cls, lambda: _construct(cls, fields), "$model")
    return _build(cls, lambda: cls(**fields), "$model")


def _model_v1(payload: Any, dec: Decode, allowlist: Allowlist) -> Any:
    record = expect_keys(payload, "$model_v1", ("class", "fields"))
    cls = allowlist.lookup(record["class"], "$model_v1")
    if not issubclass(cls, pydantic.v1.BaseModel):
        raise bad("$model_v1", f"{record['class']!r} is not a pydantic.v1 model")
    fields = _fields(record, dec, "$model_v1")
    return _build(cls, lambda: cls(**fields), "$model_v1")


def _dataclass(payload: Any, dec: Decode, allowlist: Allowlist) -> Any:
    record = expect_keys(payload, "$dataclass", ("class", "fields"))
    cls = allowlist.lookup(record["class"], "$dataclass")
    if not dataclasses.is_dataclass(cls):
        raise bad("$dataclass", f"{record['class']!r} is not a dataclass")
    fields = _fields(record, dec, "$dataclass")
    init_names = {field.name for field in dataclasses.fields(cls) if field.init}
    later = {name: value for name, value in fields.items() if name not in init_names}
    known = {field.name for field in dataclasses.fields(cls)}
    if not later.keys() <= known:
        raise bad("$dataclass", f"{record['class']} has no fields {sorted(later.keys() - known)}")

    def build() -> Any:
        obj = cls(**{name: value for name, value in fields.items() if name in init_names})
        for name, value in later.items():  # init=False fields, frozen or not
            object.__setattr__(obj, name, value)
        return obj

    return _build(cls, build, "$dataclass")


def _namedtuple(payload: Any, dec: Decode, allowlist: Allowlist) -> Any:
    record = expect_keys(payload, "$namedtuple", ("class", "fields"))
    cls = allowlist.lookup(record["class"], "$namedtuple")
    if not (issubclass(cls, tuple) and hasattr(cls, "_fields")):
        raise bad("$namedtuple", f"{record['class']!r} is not a NamedTuple")
    fields = _fields(record, dec, "$namedtuple")
    return _build(cls, lambda: cls(**fields), "$namedtuple")


def _enum(payload: Any, dec: Decode, allowlist: Allowlist) -> Any:
    record = expect_keys(payload, "$enum", ("class", "value"))
    cls = allowlist.lookup(record["class"], "$enum")
    if not issubclass(cls, Enum):
        raise bad("$enum", f"{record['class']!r} is not an Enum")
    value = dec(record["value"])
    return _build(cls, lambda: cls(value), "$enum")


def _error(payload: Any, dec: Decode, allowlist: Allowlist) -> Any:
    """An exception; one of a class we do not load comes back as its repr text.

    LangGraph stores the error of every failed task (a user's own exception, a
    `CancelledError`) and only needs to know that it failed; its own serializer
    keeps every exception as `repr(exc)`. So an unknown class is never loaded,
    and never stops a resume either.
    """
    record = expect_keys(payload, "$error", ("class", "args"))
    args = dec(want(record["args"], list, "$error"))
    try:
        cls = allowlist.lookup(record["class"], "$error")
    except SerializationError:
        name = str(record["class"]).rpartition(":")[2].rpartition(".")[2]
        return f"{name}({', '.join(map(repr, args))})"
    if not issubclass(cls, BaseException):
        raise bad("$error", f"{record['class']!r} is not an exception")
    return _build(cls, lambda: cls(*args), "$error")


def _send(payload: Any, dec: Decode, allowlist: Allowlist) -> Any:
    if _Send is None:  # pragma: no cover - langgraph is installed in tests
        raise SerializationError("stored value $send needs the langgraph package")
    record = expect_keys(payload, "$send", ("node", "arg"), ("timeout",))
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


