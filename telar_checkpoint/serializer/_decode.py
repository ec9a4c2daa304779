"""JSON values back to Python values: the inverse of `_encode`.

An object with one key starting with ``"$"`` is a tag, looked up in `TAGS` (or
`CLASS_TAGS`); an unknown tag or a malformed payload raises SerializationError, a
class that is not found gives the plain data (`_classes`). Nothing here imports a
module or calls anything the data names: classes come from the `Allowlist` and
modules already imported, functions from fixed tables.
"""

from __future__ import annotations

import base64
import binascii
import pathlib
import re
from collections import Counter, OrderedDict, defaultdict, deque
from collections.abc import Callable
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal, InvalidOperation
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

from telar_checkpoint.errors import SerializationError
from telar_checkpoint.serializer._classes import CLASS_TAGS
from telar_checkpoint.serializer._payload import LEAF_TYPES, REGEX_FLAGS, Decode, bad, expect_keys, is_zone_key, want
from telar_checkpoint.serializer._registry import Allowlist

FACTORIES: dict[Any, Any] = {
    None: None, "list": list, "dict": dict, "set": set, "frozenset": frozenset, "tuple": tuple,
    "int": int, "float": float, "str": str, "bool": bool, "bytes": bytes,
    "Counter": Counter, "OrderedDict": OrderedDict, "deque": deque,
}  # fmt: skip
# The distinct members of one stored set, or keys of one dict, that may share a hash.
MAX_SAME_HASH = 64
FLOATS = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}


def _str(payload: Any, dec: Decode) -> str:
    runs = want(payload, list, "$str")
    out = []
    for run in runs:
        if type(run) is str:
            out.append(run)
        elif type(run) is int and 0 <= run < 0x110000:
            out.append(chr(run))
        else:
            raise bad("$str", f"bad run {run!r:.80}")
    return "".join(out)


def _int(payload: Any, dec: Decode) -> int:
    text = want(payload, str, "$int")
    try:
        return int(text, 0)
    except ValueError as exc:
        raise bad("$int", str(exc)) from None


def _float(payload: Any, dec: Decode) -> float:
    try:
        return FLOATS[payload]
    except (KeyError, TypeError):
        raise bad("$float", f"{payload!r:.80} is not nan, inf or -inf") from None


def _dict(payload: Any, dec: Decode) -> dict[str, Any]:
    return {key: dec(value) for key, value in want(payload, dict, "$dict").items()}


def _map(payload: Any, dec: Decode) -> dict[Any, Any]:
    out: dict[Any, Any] = {}
    hashes = _HashCount("$map")
    for pair in want(payload, list, "$map"):
        if type(pair) is not list or len(pair) != 2:
            raise bad("$map", f"expected [key, value], got {pair!r:.80}")
        key, size = dec(pair[0]), len(out)
        try:
            out[key] = dec(pair[1])
        except TypeError as exc:  # an unhashable key
            raise bad("$map", str(exc)) from None
        if len(out) != size:
            hashes.add(key)
    return out


class _HashCount:
    """Counts the distinct members of a set or keys of a dict that share one hash.

    Python keeps such members in one probe chain, so inserting the n-th compares it
    with the n-1 before: members chosen to collide (multiples of 2**61 - 1 all hash
    to 0) make building a container quadratic. Past `MAX_SAME_HASH` the value is
    refused, so building one stays linear in its size.
    """

    __slots__ = ("counts", "tag")

    def __init__(self, tag: str) -> None:
        self.counts: dict[int, int] = {}
        self.tag = tag

    def add(self, member: Any) -> None:
        """Count a member just added (not one equal to a member already there)."""
        h = hash(member)
        n = self.counts.get(h, 0) + 1
        if n > MAX_SAME_HASH:
            raise bad(self.tag, f"more than {MAX_SAME_HASH} members share one hash ({h}): a value built to be slow to read")
        self.counts[h] = n


def _any_dict(payload: Any, dec: Decode, tag: str) -> dict[Any, Any]:
    """A payload that is itself an encoded dict (plain, `$dict` or `$map`)."""
    value = dec(want(payload, dict, tag))
    return want(value, dict, tag)


def _b64(payload: Any, tag: str) -> bytes:
    try:
        return base64.b64decode(want(payload, str, tag), validate=True)
    except (binascii.Error, ValueError) as exc:  # ValueError: text that is not ASCII
        raise bad(tag, str(exc)) from None


def _deque(payload: Any, dec: Decode) -> deque[Any]:
    record = expect_keys(payload, "$deque", ("items", "maxlen"))
    maxlen = want(record["maxlen"], (int, type(None)), "$deque")
    return deque(dec(want(record["items"], list, "$deque")), maxlen)


def _defaultdict(payload: Any, dec: Decode) -> defaultdict[Any, Any]:
    record = expect_keys(payload, "$defaultdict", ("factory", "items"))
    if record["factory"] not in FACTORIES:
        raise bad("$defaultdict", f"unknown factory {record['factory']!r:.80}")
    return defaultdict(FACTORIES[record["factory"]], _any_dict(record["items"], dec, "$defaultdict"))


def _parse(parse: Callable[[str], Any], payload: Any, tag: str) -> Any:
    try:
        return parse(want(payload, str, tag))
    except (ValueError, InvalidOperation) as exc:
        raise bad(tag, str(exc)) from None


def _clock(cls: type, payload: Any, dec: Decode, tag: str) -> Any:
    """A datetime or time: isoformat text, or local text plus tzinfo and fold."""
    if type(payload) is str:
        return _parse(cls.fromisoformat, payload, tag)  # type: ignore[attr-defined]
    record = expect_keys(payload, tag, ("local", "tz", "fold"))
    local = _parse(cls.fromisoformat, record["local"], tag)  # type: ignore[attr-defined]
    tz = dec(record["tz"])
    if tz is not None and not isinstance(tz, (timezone, ZoneInfo)):
        raise bad(tag, f"tz is {type(tz).__name__}, not a timezone")
    if record["fold"] not in (0, 1):
        raise bad(tag, "fold is not 0 or 1")
    return local.replace(tzinfo=tz, fold=record["fold"])


def _timedelta(payload: Any, tag: str = "$timedelta") -> timedelta:
    parts = want(payload, list, tag)
    if len(parts) != 3 or any(type(part) is not int for part in parts):
        raise bad(tag, "expected [days, seconds, microseconds]")
    try:
        return timedelta(*parts)
    except OverflowError as exc:
        raise bad(tag, str(exc)) from None


def _timezone(payload: Any, dec: Decode) -> timezone:
    record = expect_keys(payload, "$timezone", ("offset", "name"))
    offset = _timedelta(record["offset"], "$timezone")
    name = want(dec(record["name"]), (str, type(None)), "$timezone")
    try:
        return timezone(offset) if name is None else timezone(offset, name)
    except ValueError as exc:
        raise bad("$timezone", str(exc)) from None


def _zoneinfo(payload: Any, dec: Decode) -> ZoneInfo:
    key = want(payload, str, "$zoneinfo")
    # ZoneInfo(key) reads the file, or imports the tzdata module, the key names:
    # only the keys of the tz database are loaded.
    if not is_zone_key(key):
        raise bad("$zoneinfo", f"{key!r:.80} is not a time zone of the tz database")
    try:
        return ZoneInfo(key)
    except (ValueError, OSError) as exc:
        raise bad("$zoneinfo", str(exc)) from None


def _regex(payload: Any, dec: Decode) -> re.Pattern[Any]:
    record = expect_keys(payload, "$regex", ("pattern", "flags"))
    pattern = want(dec(record["pattern"]), (str, bytes), "$regex")
    flags = int(want(record["flags"], int, "$regex"))  # a plain int: an IntFlag formats as text on Python 3.10
    if flags & ~REGEX_FLAGS:  # re.DEBUG prints when compiling; other bits are not re's
        raise bad("$regex", f"flags {flags:#x} are not in re's public set ({REGEX_FLAGS:#x})")
    try:
        return re.compile(pattern, flags)
    except (re.error, ValueError) as exc:
        raise bad("$regex", str(exc)) from None


def _set_of(kind: type, payload: Any, dec: Decode, tag: str) -> Any:
    out: set[Any] = set()
    hashes = _HashCount(tag)
    for item in want(payload, list, tag):
        member, size = dec(item), len(out)
        try:
            out.add(member)
        except TypeError as exc:  # an unhashable member
            raise bad(tag, str(exc)) from None
        if len(out) != size:
            hashes.add(member)
    return out if kind is set else kind(out)


TAGS: dict[str, Callable[[Any, Decode], Any]] = {
    "$str": _str,
    "$int": _int,
    "$float": _float,
    "$dict": _dict,
    "$map": _map,
    "$tuple": lambda p, dec: tuple(dec(want(p, list, "$tuple"))),
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
    "$path": lambda p, dec: pathlib.Path(want(dec(p), str, "$path")),
    "$regex": _regex,
}


def make_decoder(allowlist: Allowlist) -> Decode:
    """A `from_jsonable` function loading classes from `allowlist` only."""

    leaf = LEAF_TYPES
    builders = allowlist.model_builders  # cleared, never replaced, when the allowlist changes
    model = CLASS_TAGS["$model"]

    def dec(data: Any) -> Any:
        try:  # every call guards (free since Python 3.11): the one the recursion fails in answers
            t = type(data)
            if t is dict:
                n = len(data)
                if n == 1:
                    # A class name already checked (on the allowlist, a pydantic model) goes
                    # straight to its builder; anything else takes the full path, which checks
                    # it, reports what is wrong, and remembers the builder.
                    payload = data.get("$model", data)
                    if type(payload) is dict and len(payload) == 2:
                        name = payload.get("class")
                        if type(name) is str:
                            build = builders.get(name)
                            fields = payload.get("fields")
                            if build is not None and type(fields) is dict:
                                return build(fields, dec)
                    for key in data:
                        if key == "$model":
                            return model(data[key], dec, allowlist)
                        if key[:1] == "$":
                            return _tagged(key, data[key])
                elif n == 0:
                    return {}
                # leaves inline: one call per container, not per string
                return {k: v if type(v) in leaf else dec(v) for k, v in data.items()}
            if t is list:
                if not data:
                    return []
                return [v if type(v) in leaf else dec(v) for v in data]
            return data
        except RecursionError:
            raise SerializationError("stored value is nested too deeply to load") from None

    def _tagged(tag: str, payload: Any) -> Any:
        decode = TAGS.get(tag)
        if decode is not None:
            try:
                return decode(payload, dec)
            except SerializationError:
                raise
            except Exception as exc:  # the type refused the payload (a zone that does not exist, ...)
                raise SerializationError(f"stored value {tag} could not be rebuilt: {exc!r:.200}") from exc
        decode_class = CLASS_TAGS.get(tag)
        if decode_class is not None:
            return decode_class(payload, dec, allowlist)
        raise SerializationError(
            f"stored value has unknown tag {tag!r:.80}; it was not written by this "
            "JsonSerializer (a newer version, or another program)"
        )

    return dec
