"""Stored objects that name a class: the class is found (`Allowlist.listed`, or
`Allowlist.unlisted`), checked to be of the kind its tag says, and rebuilt through that class
only; a class not found, or one that refuses its stored fields, gives the plain data.
"""

from __future__ import annotations

import copy
import dataclasses
import threading
from collections.abc import Callable
from enum import Enum, Flag
from typing import Any

import pydantic
import pydantic.v1
from pydantic_core import PydanticUndefined

from telar_checkpoint.errors import SerializationError
from telar_checkpoint.serializer._payload import LEAF_TYPES, Decode, bad, expect_keys, want
from telar_checkpoint.serializer._registry import (
    BUILTIN_CLASSES,
    BUILTIN_NAMES,
    CONSTRUCT_WITHOUT_VALIDATION,
    Allowlist,
    warn_once,
)

_Send: type | None = BUILTIN_CLASSES.get("Send")


def _fields(payload: Any, dec: Decode, tag: str) -> dict[str, Any]:
    fields = want(payload["fields"], dict, tag)
    return {k: v if type(v) in LEAF_TYPES else dec(v) for k, v in fields.items()}


def _build(cls: type, build: Callable[[], Any], tag: str, plain: Any) -> Any:
    """`build()`; if the class refuses the stored fields, `plain` (the stored data)
    for a class of the program's (it may have changed since), an error for ours."""
    try:
        return build()
    except Exception as exc:
        return _plain_after_refusal(cls, tag, exc, plain)


def _plain_after_refusal(cls: type, tag: str, exc: Exception, plain: Any) -> Any:
    if cls in BUILTIN_NAMES:  # our own types: stored fields they refuse are damaged data
        raise _refused(cls, tag, exc) from exc
    _warn_refused("refused", cls, "as plain data: the class", exc)
    return plain


def _warn_refused(kind: str, cls: type, how: str, exc: Exception) -> None:
    """Warn once per class and `kind` that `cls` refused its stored fields, and how it is loaded."""
    name = f"{cls.__module__}:{cls.__qualname__}"
    warn_once(kind, name, "Loading %s from a checkpoint %s refused the stored fields (%s).", name, how, type(exc).__name__)


def _class(
    record: dict[str, Any], tag: str, allowlist: Allowlist, is_kind: Callable[[type], bool], kind: str
) -> type | None:
    """The class a stored object names, checked to be a `kind`; None for its plain data."""
    name = record["class"]
    if type(name) is not str:
        raise bad(tag, f"the class name is {name!r:.80}, not text")
    cls = allowlist.listed(name)
    if cls is None:
        return allowlist.unlisted(name, tag, is_kind)
    if not is_kind(cls):  # a listed class in the wrong tag: not something we wrote
        raise bad(tag, f"{name!r} is not a {kind}")
    return cls


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
        order: list[tuple[str, Any, int]] = []  # (field, default, how to fill it when not stored)
        direct = True
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

    if not plain_state:
        return build
    return _quick_constructor(cls, new, plan, tag, build)


_MAX_FORMS = 8  # quick ways per class, at most: a stored form beyond them goes the general way
# The quick ways of each class (and tag), by stored form (the names stored, in their order);
# shared by every decoder, as they depend on nothing else.
_FORMS: dict[tuple[type, str], dict[tuple[str, ...], _Builder]] = {}
_FORMS_LOCK = threading.Lock()


def _quick_constructor(
    cls: type[pydantic.BaseModel], new: Callable[[type], Any], plan: _Restore, tag: str, general: _Builder
) -> _Builder:
    """`general` with a quick way per stored form (the names stored, in their order) of the
    first `_MAX_FORMS` seen that name fields only, every required one among them: the form the
    encoder writes for each fields set a message has. A quick way is compiled for its form
    (`_form_way`); any other form goes the general way."""
    ways = _FORMS.setdefault((cls, tag), {})
    fields = {name for name, _default, _kind in plan.order}
    required = {name for name, _default, kind in plan.order if kind == _REQUIRED}

    def learn(form: tuple[str, ...]) -> _Builder:
        if len(ways) >= _MAX_FORMS or not fields.issuperset(form) or not required.issubset(form):
            return general
        with _FORMS_LOCK:
            way = ways.get(form)
            if way is None and len(ways) < _MAX_FORMS:
                way = ways[form] = _form_way(cls, new, plan, tag, form)
        return way or general

    def build(stored: dict[str, Any], dec: Decode) -> Any:
        form = tuple(stored)
        way = ways.get(form)
        return (way or learn(form))(stored, dec)

    return build


def _form_way(cls: type[pydantic.BaseModel], new: Callable[[type], Any], plan: _Restore, tag: str, form: tuple[str, ...]) -> _Builder:
    """The quick way for stored fields named `form` (fields only, every required one):
    each stored field read and decoded in stored order, as the general way does, an empty
    dict or list made without a call; the fields not stored take their defaults as `_fill`
    gives them; then the state is set as the general way sets it."""
    args: dict[str, Any] = {}
    lines = ["    def build(stored, dec):"]
    if form:
        lines.append(f"        {''.join(f'v{j}, ' for j in range(len(form)))}= stored.values()")
    for j in range(len(form)):
        lines += [
            f"        if type(v{j}) not in leaf:",
            f"            if type(v{j}) is dict and not v{j}:",
            f"                v{j} = {{}}",
            f"            elif type(v{j}) is list and not v{j}:",
            f"                v{j} = []",
            "            else:",
            f"                v{j} = dec(v{j})",
        ]
    at = {name: j for j, name in enumerate(form)}
    shown = []
    for i, (name, default, kind) in enumerate(plan.order):
        args[f"K{i}"] = name
        if name in at:
            shown.append(f"K{i}: v{at[name]}")
        elif kind == _VALUE:
            args[f"D{i}"] = default
            shown.append(f"K{i}: D{i}")
        elif kind == _FACTORY:
            args[f"D{i}"] = default
            shown.append(f"K{i}: {{}}" if default is dict else f"K{i}: []" if default is list else f"K{i}: D{i}()")
        else:  # _COPY (a required field is always stored: see `learn`)
            args[f"D{i}"] = default
            shown.append(f"K{i}: deepcopy(D{i})")
    lines += [
        "        try:",
        f"            values = {{{', '.join(shown)}}}",
        "            obj = new(cls)",
        "            set_fields_set(obj, set(stored))",
        f"            set_extra(obj, {'{}' if plan.allow_extra else 'None'})",
        "            set_private(obj, None)",
        "            set_dict(obj, values)",
        "        except Exception as exc:  # the class refused the stored fields",
        "            raise refused(cls, tag, exc) from exc",
        "        return obj",
        "    return build",
    ]
    args.update(
        cls=cls, new=new, tag=tag, leaf=LEAF_TYPES, refused=_refused, deepcopy=copy.deepcopy,
        set_fields_set=_SET_FIELDS_SET, set_extra=_SET_EXTRA, set_private=_SET_PRIVATE, set_dict=_SET_DICT,
    )
    source = f"def make({', '.join(args)}):\n" + "\n".join(lines)
    namespace: dict[str, Any] = {}
    # our own text: field names and defaults are arguments (K0, D0, ...), never code
    exec(source, namespace)  # noqa: S102
    way: _Builder = namespace["make"](**args)
    return way


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
        if validate:
            return _validated(cls, fields, tag, cls.model_construct)
        try:
            return cls.model_construct(set(fields), **fields)
        except Exception as exc:  # the class refused the stored fields
            raise _refused(cls, tag, exc) from exc

    return build


def _validated(cls: type, fields: dict[str, Any], tag: str, construct: Callable[..., Any]) -> Any:
    """A model of the program's, validated from its stored fields; if it refuses them
    (the class changed since), built by `construct`, without validation, as LangGraph's
    serializer does; if even that fails, the plain fields."""
    try:
        return cls(**fields)
    except Exception as exc:
        _warn_refused("unvalidated", cls, "without validation: it", exc)
    try:
        return construct(**fields)
    except Exception as exc:
        return _plain_after_refusal(cls, tag, exc, fields)


def _is_model(cls: type) -> bool:
    return issubclass(cls, pydantic.BaseModel)


def _model(payload: Any, dec: Decode, allowlist: Allowlist) -> Any:
    record = expect_keys(payload, "$model", ("class", "fields"))
    cls = _class(record, "$model", allowlist, _is_model, "pydantic model")
    if cls is None:
        return _fields(record, dec, "$model")
    build = _model_builder(cls, "$model")
    allowlist.model_builders[record["class"]] = build  # the decoder's fast path, next time
    return build(want(record["fields"], dict, "$model"), dec)


def _stored_class(
    payload: Any, dec: Decode, allowlist: Allowlist, tag: str, is_kind: Callable[[type], bool], kind: str
) -> tuple[Any, dict[str, Any]]:
    """The class a `{"class", "fields"}` record names (None when it is not loaded: see
    `_class`) and its fields, decoded."""
    record = expect_keys(payload, tag, ("class", "fields"))
    return _class(record, tag, allowlist, is_kind, kind), _fields(record, dec, tag)


def _model_v1(payload: Any, dec: Decode, allowlist: Allowlist) -> Any:
    cls, fields = _stored_class(payload, dec, allowlist, "$model_v1", _is_model_v1, "pydantic.v1 model")
    return fields if cls is None else _validated(cls, fields, "$model_v1", cls.construct)


def _is_model_v1(cls: type) -> bool:
    return issubclass(cls, pydantic.v1.BaseModel)


def _is_namedtuple(cls: type) -> bool:
    """A NamedTuple whose items are its `_fields`, read by tuple's own methods. A subclass
    that adds computed fields is not: `platform.uname_result`'s `processor` runs ``uname -p``
    when the tuple is iterated, so rebuilding and storing one again would start a process."""
    if not issubclass(cls, tuple) or not hasattr(cls, "_fields"):
        return False
    made = next((base for base in cls.__mro__ if "_make" in vars(base)), None)  # namedtuple()'s class
    return (
        made is not None
        and vars(made).get("_fields") == getattr(cls, "_fields", None)
        and all(getattr(cls, name) is getattr(tuple, name) for name in ("__iter__", "__len__", "__getitem__"))
    )


def _namedtuple(payload: Any, dec: Decode, allowlist: Allowlist) -> Any:
    cls, fields = _stored_class(
        payload, dec, allowlist, "$namedtuple", _is_namedtuple, "NamedTuple whose items are its fields"
    )
    return fields if cls is None else _build(cls, lambda: cls(**fields), "$namedtuple", fields)


def _is_dataclass(cls: type) -> bool:
    return dataclasses.is_dataclass(cls)


def _dataclass(payload: Any, dec: Decode, allowlist: Allowlist) -> Any:
    cls, fields = _stored_class(payload, dec, allowlist, "$dataclass", _is_dataclass, "dataclass")
    if cls is None:
        return fields
    init_names = {field.name for field in dataclasses.fields(cls) if field.init}
    later = {name: value for name, value in fields.items() if name not in init_names}
    known = {field.name for field in dataclasses.fields(cls)}

    def build() -> Any:
        if not later.keys() <= known:
            raise TypeError(f"{cls.__qualname__} has no fields {sorted(later.keys() - known)}")
        obj = cls(**{name: value for name, value in fields.items() if name in init_names})
        for name, value in later.items():  # init=False fields, frozen or not
            object.__setattr__(obj, name, value)
        return obj

    return _build(cls, build, "$dataclass", fields)


def _enum(payload: Any, dec: Decode, allowlist: Allowlist) -> Any:
    record = expect_keys(payload, "$enum", ("class", "value"))
    cls = _class(record, "$enum", allowlist, lambda cls: issubclass(cls, Enum), "Enum")
    value = dec(record["value"])
    if cls is not None and issubclass(cls, Flag):
        _check_flag(cls, value)
    return value if cls is None else _build(cls, lambda: cls(value), "$enum", value)


# The members (pseudo-members included) a Flag class may hold before the decoder makes
# no new ones: Python caches each combination of bits it is asked for, for ever.
MAX_FLAG_MEMBERS = 4096


def _check_flag(cls: type[Flag], value: Any) -> None:
    """Refuse a Flag value with bits `cls` does not define (each distinct one would be a
    pseudo-member cached for ever), or a new combination once `cls` caches `MAX_FLAG_MEMBERS`."""
    name = f"{cls.__module__}.{cls.__qualname__}"
    if type(value) is not int:
        raise bad("$enum", f"{name} is a Flag, and its value is {type(value).__name__}, not an int")
    cached = cls._value2member_map_
    if value in cached:
        return
    mask = getattr(cls, "_flag_mask_", None)
    if type(mask) is not int:  # Python 3.10: the bits of its members
        mask = 0
        for member in cls.__members__.values():
            mask |= member.value
    if value & ~mask:  # a negative value has every high bit
        raise bad("$enum", f"{name} value has bits its class does not define")
    if len(cached) >= MAX_FLAG_MEMBERS:
        raise bad(
            "$enum",
            f"{name} already holds {len(cached)} combinations of bits (the bound is {MAX_FLAG_MEMBERS}): "
            "each new one is kept for ever",
        )


def _error(payload: Any, dec: Decode, allowlist: Allowlist) -> Any:
    """An exception stored by an earlier release, as the text LangGraph's savers give.

    LangGraph's serializer stores an exception (the error of a failed task, most
    often) as ``repr(exc)``, and LangGraph reads such text back as the error;
    we now write that text too. Earlier releases wrote the class and args: they
    read back as the text ``repr`` gives for a plain exception of that class,
    without building it.
    """
    record = expect_keys(payload, "$error", ("class", "args"))
    args = dec(want(record["args"], list, "$error"))
    name = want(record["class"], str, "$error").rpartition(":")[2].rpartition(".")[2]
    return f"{name}({repr(args[0]) if len(args) == 1 else ', '.join(map(repr, args))})"


def _send(payload: Any, dec: Decode, allowlist: Allowlist) -> Any:
    if _Send is None:  # pragma: no cover - langgraph is installed in tests
        raise SerializationError("stored value $send needs the langgraph package")
    record = expect_keys(payload, "$send", ("node", "arg"), ("timeout",))
    node, arg, timeout = dec(record["node"]), dec(record["arg"]), dec(record.get("timeout"))
    if timeout is None:  # langgraph<1.2's Send takes no timeout
        return _build(_Send, lambda: _Send(node, arg), "$send", None)
    return _build(_Send, lambda: _Send(node, arg, timeout=timeout), "$send", None)


CLASS_TAGS: dict[str, Callable[[Any, Decode, Allowlist], Any]] = {
    "$model": _model,
    "$model_v1": _model_v1,
    "$dataclass": _dataclass,
    "$namedtuple": _namedtuple,
    "$enum": _enum,
    "$error": _error,
    "$send": _send,
}


