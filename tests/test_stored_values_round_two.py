"""Stored data as an attacker's input, round two.

A stored value is input from whoever wrote the store. Reading one must not leak memory
for ever (Flag pseudo-members), cost more than linear time (hash flooding), start a
process (`platform.uname_result`), import what the data names (zoneinfo keys) or print
(regex ``re.DEBUG``); each refusal is our SerializationError, naming what was wrong.
"""

from __future__ import annotations

import collections
import enum
import os
import platform
import re
import subprocess
import sys
import zoneinfo
from collections import Counter, OrderedDict, defaultdict
from typing import Any, NamedTuple

import pytest
from langgraph.checkpoint.serde.types import _DeltaSnapshot

from telar_checkpoint.errors import SerializationError
from telar_checkpoint.serializer import JsonSerializer, _classes, _decode

# --- Flag enums: undefined bits refused, no pseudo-member cached ---


class Bits(enum.Flag):
    """A Flag of 13 bits: 8,192 combinations, more than the decoder lets one class cache."""

    B0, B1, B2, B3, B4, B5, B6, B7, B8, B9, B10, B11, B12 = (1 << n for n in range(13))


def flag(cls: type, value: Any) -> dict[str, Any]:
    return {"$enum": {"class": f"{cls.__module__}:{cls.__qualname__}", "value": value}}


@pytest.mark.parametrize("value", [1 << 20, 1 << 200, -1, 2 | (1 << 30)])
def test_a_flag_with_bits_its_class_does_not_define_is_refused(value: int) -> None:
    serde = JsonSerializer(allowed_classes=[re.RegexFlag])
    cached = len(re.RegexFlag._value2member_map_)
    stored = value if abs(value) < 1 << 63 else {"$int": str(value)}
    with pytest.raises(SerializationError, match="RegexFlag.*bits"):
        serde.from_jsonable(flag(re.RegexFlag, stored))
    assert len(re.RegexFlag._value2member_map_) == cached  # no pseudo-member made


def test_a_flag_of_defined_bits_still_reads() -> None:
    serde = JsonSerializer(allowed_classes=[re.RegexFlag, Bits])
    value = re.IGNORECASE | re.MULTILINE
    assert serde.from_jsonable(serde.to_jsonable(value)) is value
    assert serde.from_jsonable(flag(re.RegexFlag, 0)) is re.RegexFlag(0)
    assert serde.from_jsonable(serde.to_jsonable(Bits.B0 | Bits.B12)) is Bits.B0 | Bits.B12


def test_a_flag_class_caches_a_bounded_number_of_combinations() -> None:
    serde = JsonSerializer(allowed_classes=[Bits])
    refused = 0
    for value in range(1 << 13):
        try:
            serde.from_jsonable(flag(Bits, value))
        except SerializationError as exc:
            assert "combinations" in str(exc)
            refused += 1
    assert refused > 0
    assert len(Bits._value2member_map_) <= _classes.MAX_FLAG_MEMBERS
    assert serde.from_jsonable(flag(Bits, 3)) is Bits.B0 | Bits.B1  # cached ones still read


# --- Hash flooding: members that share one hash are bounded ---

SAME_HASH = (1 << 61) - 1  # every multiple of it hashes to 0


def colliding(n: int) -> list[Any]:
    return [{"$int": str(k * SAME_HASH)} for k in range(1, n + 1)]


def payloads(n: int) -> dict[str, Any]:
    pairs = {"$map": [[key, 1] for key in colliding(n)]}
    return {
        "set": {"$set": colliding(n)},
        "frozenset": {"$frozenset": colliding(n)},
        "map": pairs,
        "counter": {"$counter": pairs},
        "odict": {"$odict": pairs},
        "defaultdict": {"$defaultdict": {"factory": "int", "items": pairs}},
        "tuple keys": {"$map": [[{"$tuple": [key]}, 1] for key in colliding(n)]},
    }


@pytest.mark.parametrize("kind", list(payloads(1)))
def test_members_sharing_one_hash_are_refused_past_the_bound(kind: str) -> None:
    with pytest.raises(SerializationError, match="share one hash"):
        JsonSerializer().from_jsonable(payloads(1000)[kind])


def test_members_sharing_one_hash_within_the_bound_read() -> None:
    serde = JsonSerializer()
    keys = [k * SAME_HASH for k in range(1, 61)]
    expected: dict[str, Any] = {
        "set": set(keys),
        "frozenset": frozenset(keys),
        "map": dict.fromkeys(keys, 1),
        "counter": Counter(dict.fromkeys(keys, 1)),
        "odict": OrderedDict.fromkeys(keys, 1),
        "defaultdict": defaultdict(int, dict.fromkeys(keys, 1)),
        "tuple keys": {(key,): 1 for key in keys},
    }
    for kind, payload in payloads(60).items():
        value = serde.from_jsonable(payload)
        assert value == expected[kind] and type(value) is type(expected[kind]), kind
        assert serde.from_jsonable(serde.to_jsonable(value)) == value, kind


def test_equal_members_are_not_counted_as_collisions() -> None:
    assert JsonSerializer().from_jsonable({"$set": [{"$int": str(SAME_HASH)}] * 1000}) == {SAME_HASH}


# --- No process: platform.uname_result computes `processor` by running `uname -p` ---


@pytest.fixture
def processes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []

    def refuse(name: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            raise OSError(f"{name} called while reading a stored value")

        return call

    monkeypatch.setattr(subprocess, "Popen", refuse("subprocess.Popen"))
    for name in ("posix_spawn", "posix_spawnp", "fork", "system", "execv", "execve"):
        if hasattr(os, name):
            monkeypatch.setattr(os, name, refuse(f"os.{name}"))
    return calls


UNAME = {"system": "Linux", "node": "n", "release": "6", "version": "#1", "machine": "x86_64"}


@pytest.mark.parametrize("fields", [UNAME, {**UNAME, "processor": "x"}])
def test_a_stored_uname_result_starts_no_process(processes: list[str], fields: dict[str, Any]) -> None:
    serde = JsonSerializer()
    value = serde.from_jsonable({"$namedtuple": {"class": "platform:uname_result", "fields": fields}})
    serde.to_jsonable(value)
    assert processes == []
    assert not isinstance(value, platform.uname_result)


def test_an_allowed_uname_result_is_refused(processes: list[str]) -> None:
    serde = JsonSerializer(allowed_classes=[platform.uname_result])
    with pytest.raises(SerializationError, match="uname_result"):
        serde.from_jsonable({"$namedtuple": {"class": "platform:uname_result", "fields": UNAME}})
    assert processes == []


class Point(NamedTuple):
    x: int
    y: int = 0

    def norm(self) -> int:
        return abs(self.x) + abs(self.y)


class Named(collections.namedtuple("Named", "a b")):
    __slots__ = ()


def test_plain_namedtuples_still_read() -> None:
    serde = JsonSerializer()
    for value in (_DeltaSnapshot([1, 2]), Point(3, -4), Named("a", {"b"})):
        back = serde.from_jsonable(serde.to_jsonable(value))
        assert back == value and type(back) is type(value)


# --- zoneinfo: only keys of the tz database, checked before anything is loaded ---


@pytest.mark.parametrize(
    "key",
    ["../../etc/passwd", "tzdata.zoneinfo.Something", "Not/AZone", "posixrules", "Europe/Paris/../Paris", "", "posix/../../etc/passwd"],
)
def test_a_zone_key_outside_the_tz_database_is_refused_before_loading(monkeypatch: pytest.MonkeyPatch, key: str) -> None:
    serde = JsonSerializer()
    assert serde.from_jsonable({"$zoneinfo": "Europe/Paris"}) == zoneinfo.ZoneInfo("Europe/Paris")  # cache warmed
    loaded: list[str] = []
    monkeypatch.setattr(_decode, "ZoneInfo", lambda k: loaded.append(k))
    modules = set(sys.modules)
    with pytest.raises(SerializationError, match="time zone"):
        serde.from_jsonable({"$zoneinfo": key})
    assert loaded == [] and set(sys.modules) == modules


@pytest.mark.parametrize("key", ["UTC", "Europe/Paris", "posix/Europe/Paris", "right/UTC"])
def test_zone_keys_of_the_tz_database_still_read(key: str) -> None:
    try:
        zone = zoneinfo.ZoneInfo(key)
    except zoneinfo.ZoneInfoNotFoundError:  # pragma: no cover - depends on the system's tz files
        pytest.skip(f"no {key} zone here")
    serde = JsonSerializer()
    assert serde.from_jsonable(serde.to_jsonable(zone)) is zone


def test_a_zone_key_outside_the_tz_database_is_not_stored() -> None:
    try:
        zone = zoneinfo.ZoneInfo("posixrules")
    except zoneinfo.ZoneInfoNotFoundError:  # pragma: no cover - depends on the system's tz files
        pytest.skip("no posixrules zone here")
    with pytest.raises(SerializationError, match="posixrules"):
        JsonSerializer().to_jsonable(zone)


# --- regex: only the flags the encoder writes ---


@pytest.mark.parametrize("flags", [re.DEBUG, re.DEBUG | re.UNICODE, 1 << 12, -1])
def test_a_pattern_with_flags_outside_res_public_set_is_refused(capsys: pytest.CaptureFixture[str], flags: int) -> None:
    with pytest.raises(SerializationError, match="flags"):
        JsonSerializer().from_jsonable({"$regex": {"pattern": "a(b)c", "flags": flags}})
    assert capsys.readouterr().out == ""


def test_a_debug_pattern_is_stored_without_debug(capsys: pytest.CaptureFixture[str]) -> None:
    serde = JsonSerializer()
    pattern = re.compile("a(b)c", re.DEBUG)
    capsys.readouterr()
    assert serde.from_jsonable(serde.to_jsonable(pattern)) == re.compile("a(b)c")
    assert capsys.readouterr().out == ""


def test_a_pattern_with_public_flags_reads() -> None:
    serde = JsonSerializer()
    for pattern in (re.compile("a.b", re.IGNORECASE | re.MULTILINE), re.compile(b"x", re.DOTALL | re.VERBOSE), re.compile("x", re.A)):
        assert serde.from_jsonable(serde.to_jsonable(pattern)) == pattern
