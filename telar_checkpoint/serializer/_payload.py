"""Checks shared by the decoders: payload shapes, and the error for a malformed one."""

from __future__ import annotations

import functools
import re
import zoneinfo
from collections.abc import Callable
from typing import Any

from telar_checkpoint.errors import SerializationError

Decode = Callable[[Any], Any]
# JSON leaves, returned as they are (checked inline to save a call per leaf).
LEAF_TYPES = frozenset({str, int, float, bool, type(None)})
# The regex flags a stored pattern may carry: `re`'s public ones but DEBUG, which prints
# the compiled pattern to stdout (the encoder leaves it out).
REGEX_FLAGS = int(re.ASCII | re.IGNORECASE | re.LOCALE | re.MULTILINE | re.DOTALL | re.UNICODE | re.VERBOSE)


@functools.lru_cache(maxsize=1)
def _zone_keys() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones()) | {"UTC"}


def is_zone_key(key: str) -> bool:
    """Whether `key` names a zone of the tz database: one of `zoneinfo.available_timezones()`
    (read once: it is slow) or "UTC", or one of those under its ``posix/`` or ``right/`` directory."""
    keys = _zone_keys()
    return key in keys or (key[:6] in ("posix/", "right/") and key[6:] in keys)



def bad(tag: str, why: str) -> SerializationError:
    return SerializationError(f"stored value {tag} is malformed: {why}")


def want(payload: Any, kind: type | tuple[type, ...], tag: str) -> Any:
    if not isinstance(payload, kind):
        raise bad(tag, f"expected {getattr(kind, '__name__', kind)}, got {payload!r:.80}")
    return payload


def expect_keys(payload: Any, tag: str, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> Any:
    """A payload object with exactly these keys (extra keys, such as `method`, refused)."""
    if type(payload) is dict and len(payload) == len(required) and not optional:
        for key in required:
            if key not in payload:
                break
        else:
            return payload
    want(payload, dict, tag)
    missing = [key for key in required if key not in payload]
    unknown = [key for key in payload if key not in required and key not in optional]
    if missing or unknown:
        raise bad(tag, f"missing keys {missing}, unexpected keys {unknown}")
    return payload
