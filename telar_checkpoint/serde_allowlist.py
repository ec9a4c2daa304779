"""Which stored ``$serde`` values a serializer other than ours may be handed: the serde allowlist.

A state value written by a serializer other than `JsonSerializer` (LangGraph's
`JsonPlusSerializer`, an `EncryptedSerializer`, one of the program's) is stored as
``{"$serde": [type, base64]}`` and read back through that serializer. LangGraph's
serializer builds whatever class a msgpack payload names (it imports the module and
calls the name, unless strict), so stored data could run code. Before it is handed a
stored value, every type the value names is checked against the *serde allowlist*:

- LangGraph's safe types (``SAFE_MSGPACK_TYPES``: datetime, UUID, Decimal, paths,
  messages, ``Send``...) and the method ``datetime.fromisoformat``;
- the types telar-checkpoint ships (`serializer._registry.BUILTIN_CLASSES`);
- the serializer's own ``allowed_msgpack_modules`` (an inner serializer's too);
- the classes LangGraph derives from the state schema (`TelarSaver.with_allowlist`).

A value naming anything else, a msgpack extension LangGraph does not write, an
``"lc"`` object of LangChain's (LangGraph's older ``"json"`` type) naming a class not
listed, or pickle from a serializer not made with ``pickle_fallback=True`` raises
`RefusedTypeError` before the serializer sees it. The check parses with the same
library and options as LangGraph's reader and builds nothing, so what passes is
exactly what the serializer then loads. A serializer that wraps another (an
`EncryptedSerializer`) is copied with the one inside checked, so the check sees
the decrypted bytes. `JsonSerializer` is handed values unchecked: it builds only
the classes of its own allowlist, never imports or calls what data names.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from typing import Any

import ormsgpack
from langchain_core.load.serializable import Serializable
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from telar_checkpoint.errors import RefusedTypeError, SerializationError
from telar_checkpoint.serializer import JsonSerializer
from telar_checkpoint.serializer._registry import BUILTIN_CLASSES

try:
    from langgraph.checkpoint.serde._msgpack import SAFE_MSGPACK_TYPES
except ImportError:  # pragma: no cover - langgraph-checkpoint without it: only our own types
    SAFE_MSGPACK_TYPES = frozenset()

Pair = tuple[str, str]  # (module, name), as a msgpack payload names a class

# LangGraph's msgpack extension codes (the EXT_* of langgraph.checkpoint.serde.jsonplus).
_NAMED = frozenset({0, 1, 2, 4, 5})  # (module, name, args...): the class built from stored arguments
_METHOD = 3  # (module, name, arg, method): the method called with a stored argument
_NUMPY = 6  # (dtype, shape, order, buffer): an array; it names nothing
_DELTA = 7  # a value wrapped as a _DeltaSnapshot
_METHODS = frozenset({("datetime", "datetime", "fromisoformat")})  # as LangGraph's SAFE_MSGPACK_METHODS
_LOADS = {"null", "bytes", "bytearray", "json", "msgpack", "pickle"}  # the types JsonPlusSerializer reads
_LC_KINDS = ("constructor", "secret", "not_implemented")  # the "lc" objects LangChain's reviver acts on

SHIPPED: frozenset[Pair] = frozenset(
    {(key[0], key[1]) for key in SAFE_MSGPACK_TYPES if len(key) == 2}
    | {(cls.__module__, cls.__name__) for cls in BUILTIN_CLASSES.values()}
)
# LangChain ids ("lc": 1) of the shipped LangChain classes, as LangGraph's "json" type stored them.
_SHIPPED_LC_IDS: frozenset[tuple[str, ...]] = frozenset(
    tuple(cls.lc_id())
    for cls in BUILTIN_CLASSES.values()
    if issubclass(cls, Serializable) and cls.is_lc_serializable()
)


def pair(key: tuple[str, ...] | type) -> Pair:
    """An allowlist entry as the ``(module, name)`` a payload names: a class, or a tuple
    whose last item is the name (``("pkg", "mod", "Name")`` is ``("pkg.mod", "Name")``)."""
    if isinstance(key, type):
        return key.__module__, key.__name__
    if len(key) < 2 or not all(isinstance(part, str) for part in key):
        raise TypeError(f"an allowlist entry is (module, name) or a class, not {key!r}")
    return ".".join(key[:-1]), key[-1]


def own_allowlist(serde: object) -> frozenset[Pair]:
    """The classes `serde` was told to load (``allowed_msgpack_modules``), with those of a
    serializer it wraps. ``allowed_msgpack_modules=True`` (LangGraph's default when not
    strict) lists nothing: it allows every type."""
    listed = getattr(serde, "_allowed_msgpack_modules", None)
    pairs = {pair(key) for key in listed} if isinstance(listed, (set, frozenset)) else set()
    inner = getattr(serde, "serde", None)
    if inner is not None and inner is not serde:
        pairs |= own_allowlist(inner)
    return frozenset(pairs)


def _refused(name: str, how: str, hint: str = "") -> RefusedTypeError:
    return RefusedTypeError(f"stored $serde value refused: it names {name}, {how}; nothing was loaded{hint}", refused=name)


def _not_listed(name: str) -> RefusedTypeError:
    return _refused(
        name,
        "which is not on the serde allowlist",
        ". If the class is yours, list it: JsonPlusSerializer(allowed_msgpack_modules=[YourClass]) "
        "(under LANGGRAPH_STRICT_MSGPACK=true LangGraph lists the state schema's classes itself)",
    )


def _extension_problem(code: int, parts: Any, allowed: frozenset[Pair]) -> SerializationError | None:
    """What is wrong with msgpack extension `code` whose payload unpacked to `parts`, if anything."""
    if code in (_DELTA, _NUMPY):
        return None
    names = (0, 1, 3) if code == _METHOD else (0, 1)  # the items that name something, text
    if not (isinstance(parts, list) and len(parts) > max(names[-1], 2) and all(isinstance(parts[i], str) for i in names)):
        return SerializationError(f"stored $serde value has a malformed msgpack extension {code}: {parts!r:.80}")
    if code == _METHOD:
        if (parts[0], parts[1], parts[3]) in _METHODS:
            return None
        return _refused(f"{parts[0]}.{parts[1]}.{parts[3]}", "a method that is never called on load")
    return None if (parts[0], parts[1]) in allowed else _not_listed(f"{parts[0]}.{parts[1]}")


def check_msgpack(data: bytes, allowed: frozenset[Pair]) -> None:
    """Refuse a msgpack payload naming a class not in `allowed`, a method other than
    ``datetime.fromisoformat``, or an extension LangGraph does not write. Builds nothing."""
    problems: list[SerializationError] = []

    def hook(code: int, payload: bytes) -> None:
        if code not in _NAMED and code not in (_METHOD, _NUMPY, _DELTA):
            problems.append(_refused(f"msgpack extension type {code}", "which LangGraph's serializer does not write"))
        else:  # nested values first, as LangGraph's reader unpacks them
            problem = _extension_problem(code, unpack(payload), allowed)
            if problem is not None:
                problems.append(problem)
        if problems:
            raise ValueError("refused")  # ormsgpack reports it as "ext_hook failed"
        return None

    def unpack(payload: bytes) -> Any:
        return ormsgpack.unpackb(payload, ext_hook=hook, option=ormsgpack.OPT_NON_STR_KEYS)

    try:
        unpack(data)
    except (ValueError, TypeError, ormsgpack.MsgpackDecodeError) as exc:
        if problems:
            raise problems[0] from None
        raise SerializationError(f"stored $serde value is not valid msgpack: {exc}") from None


def check_lc_json(data: bytes, allowed: frozenset[Pair]) -> None:
    """Refuse LangGraph's older ``"json"`` payload when a LangChain ``"lc"`` object in it would
    build a class that is not listed, or read a secret. Builds nothing."""
    try:
        stack: list[Any] = [json.loads(data)]
    except ValueError as exc:
        raise SerializationError(f"stored $serde value is not valid JSON: {exc}") from None
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
            if item.get("lc") in (1, 2) and item.get("type") in _LC_KINDS and item.get("id") is not None:
                ident = item["id"]
                named = tuple(ident) if isinstance(ident, list) and all(isinstance(p, str) for p in ident) else None
                ok = named is not None and item["type"] == "constructor" and (
                    named in _SHIPPED_LC_IDS if item["lc"] == 1 else len(named) >= 2 and pair(named) in allowed
                )
                if not ok:
                    name = ".".join(named) if named else repr(ident)[:80]
                    raise _not_listed(f"{name} (a LangChain {item['type']})")


class GuardedSerializer:
    """`serde`, handed a stored value only once the types it names are on `allowed` (see the module docs)."""

    def __init__(self, serde: SerializerProtocol, allowed: frozenset[Pair]) -> None:
        self.serde = serde
        self.allowed = allowed
        self._jsonplus = isinstance(serde, JsonPlusSerializer)
        self._pickle = getattr(serde, "pickle_fallback", False) is True  # the program's explicit choice

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        return self.serde.dumps_typed(obj)

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        type_, payload = data
        if type_ == "msgpack":
            check_msgpack(payload, self.allowed)
        elif type_ == "pickle" and not self._pickle:
            raise RefusedTypeError(
                "stored $serde value refused: it is pickled data, which is loaded only by a "
                "serializer made with pickle_fallback=True; nothing was loaded",
                refused="pickle",
            )
        elif self._jsonplus and type_ == "json":
            check_lc_json(payload, self.allowed)
        elif self._jsonplus and type_ not in _LOADS:
            raise SerializationError(f"stored $serde value has type {type_!r:.80}, which {type(self.serde).__name__} does not read")
        return self.serde.loads_typed(data)


def guarded(serde: SerializerProtocol, extra: Iterable[tuple[str, ...] | type] = ()) -> SerializerProtocol:
    """What reads stored ``$serde`` values for `serde`: itself for a `JsonSerializer`, else
    `serde` behind the check, with `extra` (the state schema's classes) also allowed."""
    if isinstance(serde, JsonSerializer):
        return serde
    allowed = SHIPPED | own_allowlist(serde) | {pair(key) for key in extra}
    inner = getattr(serde, "serde", None)
    if isinstance(inner, SerializerProtocol) and inner is not serde:  # a wrapper: check what it unwraps
        try:
            wrapper = copy.copy(serde)
            wrapper.serde = guarded(inner, extra)  # type: ignore[attr-defined]  # checked by getattr above
            serde = wrapper
        except (AttributeError, TypeError):  # pragma: no cover - a frozen wrapper: its own types are still checked
            pass
    return GuardedSerializer(serde, allowed)


def with_msgpack_allowlist(serde: SerializerProtocol, extra: Iterable[tuple[str, ...] | type]) -> SerializerProtocol:
    """`serde` with `extra` added to its own allowlist, as LangGraph's savers derive it
    (``with_msgpack_allowlist``, on it or on the serializer it wraps); `serde` itself when it has none."""
    derive = getattr(serde, "with_msgpack_allowlist", None)
    if derive is not None:
        derived: SerializerProtocol = derive(extra)
        return derived
    inner = getattr(serde, "serde", None)
    if isinstance(inner, SerializerProtocol) and inner is not serde:
        updated = with_msgpack_allowlist(inner, extra)
        if updated is not inner:
            try:
                wrapper = copy.copy(serde)
                wrapper.serde = updated  # type: ignore[attr-defined]  # checked by getattr above
                return wrapper
            except (AttributeError, TypeError):  # pragma: no cover - a frozen wrapper keeps its serializer
                pass
    return serde
