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
        raise _refused(cls, tag, exc) from exc


_REQUIRED, _VALUE, _FACTORY, _COPY = range(4)
_IMMUTABLE = (type(None), bool, int, float, str, bytes, tuple, frozenset)
_MISSING = object()


@dataclasses.dataclass(slots=True)
class _Restore:
    """How to rebuild one built-in pydantic class from stored fields without validation."""

    order: list[tuple[str, Any, int]]  # (field, default, how to fill it when not stored)
    allow_extra: bool
    direct: bool  # plain model: set its state as unpickling does; else model_construct
    # Every field, in order: its default when that is an immutable value, else _MISSING.
    template: dict[str, Any]
    # The fields `template` leaves _MISSING, with how to fill them (plan order).
    fill: list[tuple[str, Any, int]]
    # The class keeps pydantic's own __setstate__, so its four attributes can be set here.
    plain_state: bool


_RESTORE: dict[type, _Restore] = {}
# Builds a class from its stored fields (a dict), decoding them with the given function.
_Builder = Callable[[dict[str, Any], Decode], Any]


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
        plan = _Restore(
            order,
            cls.model_config.get("extra") == "allow",
            direct,
            {name: default if kind == _VALUE else _MISSING for name, default, kind in order},
            [entry for entry in order if entry[2] != _VALUE],
            cls.__setstate__ is pydantic.BaseModel.__setstate__,
        )
        _RESTORE[cls] = plan
    return plan


# pydantic's own slots, set as its __setstate__ does (a descriptor call is the fastest way).
_SET_FIELDS_SET = pydantic.BaseModel.__dict__["__pydantic_fields_set__"].__set__
_SET_EXTRA = pydantic.BaseModel.__dict__["__pydantic_extra__"].__set__
_SET_PRIVATE = pydantic.BaseModel.__dict__["__pydantic_private__"].__set__
_SET_DICT = pydantic.BaseModel.__dict__["__dict__"].__set__


def _constructor(cls: type[pydantic.BaseModel], plan: _Restore, tag: str) -> _Builder:
    """The builder of one plain model (`plan.direct`), with its plan unpacked once."""
    template, fill, allow_extra = plan.template, plan.fill, plan.allow_extra
    size = len(template)
    new = object.__new__ if cls.__new__ is object.__new__ else cls.__new__
    plain_state = plan.plain_state
    leaf = LEAF_TYPES

    def build(stored: dict[str, Any], dec: Decode) -> Any:
        # The template fixes the field order and holds the immutable defaults;
        # stored names that are not fields go last.
        values = template.copy()
        for k, v in stored.items():
            values[k] = v if type(v) in leaf else dec(v)
        try:
            if len(stored) != size or len(values) != size:
                extra = _fill(cls, values, template, fill, allow_extra)
            else:  # every field stored, and nothing else
                extra = {} if allow_extra else None
            obj = new(cls)
            if plain_state:  # what pydantic's __setstate__ does, in its order
                _SET_FIELDS_SET(obj, set(stored))
                _SET_EXTRA(obj, extra)
                _SET_PRIVATE(obj, None)
                _SET_DICT(obj, values)
            else:
                obj.__setstate__(
                    {
                        "__dict__": values,
                        "__pydantic_extra__": extra,
                        "__pydantic_fields_set__": set(stored),
                        "__pydantic_private__": None,
                    }
                )
            return obj
        except Exception as exc:  # the class refused the stored fields
            raise _refused(cls, tag, exc) from exc

    return build


def _refused(cls: type, tag: str, exc: Exception) -> SerializationError:
    return SerializationError(
        f"stored value {tag} could not rebuild {cls.__module__}.{cls.__qualname__}: {exc}"
    )


def _fill(
    cls: type,
    values: dict[str, Any],
    template: dict[str, Any],
    fill: list[tuple[str, Any, int]],
    allow_extra: bool,
) -> dict[str, Any] | None:
    """Complete `values` (the template updated with the stored fields): fill the
    defaults of the fields not stored, in field order, then move the stored names
    that are not fields out of it, into the returned extra dict."""
    for name, default, kind in fill:
        if values[name] is not _MISSING:  # a stored value is never _MISSING
            continue
        if kind == _FACTORY:
            values[name] = default()
        elif kind == _COPY:
            values[name] = copy.deepcopy(default)
        else:
            raise bad("$model", f"{cls.__qualname__} needs field {name!r}")
    if len(values) == len(template):
        return {} if allow_extra else None
    unknown = [name for name in values if name not in template]  # in stored order
    if not allow_extra:
        raise bad("$model", f"{cls.__qualname__} has no fields {sorted(unknown)}")
    return {name: values.pop(name) for name in unknown}


def _model_builder(cls: type[pydantic.BaseModel], tag: str) -> _Builder:
    """A function building `cls` from its stored fields, decoding them with `dec`.

    A built-in model gets exactly the stored fields, defaults filled in as
    pydantic would: the stored fields are values pydantic validated when the
    model was made, and some classes (RemoveMessage) refuse their own fields in
    __init__, so they are not validated again. model_construct is the public way
    to do this, but inspects every default_factory on each call; for plain
    models we set the state as unpickling does, which is 5x faster.
    """
    validate = cls not in CONSTRUCT_WITHOUT_VALIDATION
    if not validate:
        plan = _restore_plan(cls)
        if plan.direct:
            return _constructor(cls, plan, tag)
    leaf = LEAF_TYPES

    def build(stored: dict[str, Any], dec: Decode) -> Any:
        fields = {k: v if type(v) in leaf else dec(v) for k, v in stored.items()}
        try:
            if validate:
                return cls(**fields)
            return cls.model_construct(set(fields), **fields)
        except Exception as exc:  # the class refused the stored fields
            raise _refused(cls, tag, exc) from exc

    return build


def _model(payload: Any, dec: Decode, allowlist: Allowlist) -> Any:
    record = expect_keys(payload, "$model", ("class", "fields"))
    name = record["class"]
    cls = allowlist.lookup(name, "$model")
    if not issubclass(cls, pydantic.BaseModel):
        raise bad("$model", f"{name!r} is not a pydantic model")
    build = _model_builder(cls, "$model")
    allowlist.model_builders[name] = build  # the decoder's fast path, next time
    return build(want(record["fields"], dict, "$model"), dec)


def _by_keywords(tag: str, accepts: Callable[[type], bool], kind: str) -> Callable[[Any, Decode, Allowlist], Any]:
    """The decoder of `tag`: a class of `kind` (as `accepts` says), called with its stored fields."""

    def decode(payload: Any, dec: Decode, allowlist: Allowlist) -> Any:
        record = expect_keys(payload, tag, ("class", "fields"))
        cls = allowlist.lookup(record["class"], tag)
        if not accepts(cls):
            raise bad(tag, f"{record['class']!r} is not a {kind}")
        fields = _fields(record, dec, tag)
        return _build(cls, lambda: cls(**fields), tag)

    return decode


_model_v1 = _by_keywords("$model_v1", lambda cls: issubclass(cls, pydantic.v1.BaseModel), "pydantic.v1 model")
_namedtuple = _by_keywords("$namedtuple", lambda cls: issubclass(cls, tuple) and hasattr(cls, "_fields"), "NamedTuple")


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
    if timeout is None:  # langgraph<1.2's Send takes no timeout
        return _build(_Send, lambda: _Send(node, arg), "$send")
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


