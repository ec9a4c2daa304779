"""Index terms: the short strings a store's index keeps per thread (pure, no I/O).

A thread is recorded under a term for each run id and each plain metadata value of its
checkpoints, so that `delete_for_runs` and `list(None, filter=...)` look up the threads that
may hold what they want instead of reading every thread. The index may hold more than the
threads do; callers check every thread it gives, so a term only has to be equal for values
that LangGraph's filter (``metadata.get(key) == value``) calls equal.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

UNINDEXED_KEYS = frozenset({"step", "parents", "writes"})
"""Metadata keys not indexed: `step` changes at every checkpoint (an index write each put),
the others are not plain values. A filter on them alone reads every thread."""

LONGEST = 200  # characters; a longer term is kept as the hash of its text


def run_term(run_id: str) -> str:
    """The term of the checkpoints a run made."""
    return _bounded("run:" + run_id)


def _value_text(value: Any) -> str | None:
    """A text equal for values that compare equal (1, 1.0 and True alike, -0.0 and 0), None for a value no
    term stands for (None matches a missing key; NaN matches nothing; lists and dicts)."""
    if isinstance(value, str):
        return "s" + value
    if isinstance(value, (bool, int, float)):
        try:
            number = float(value)
        except OverflowError:  # an int beyond float range equals no float
            return "i" + str(value)
        if math.isnan(number):
            return None
        return "n" + repr(number + 0.0)  # + 0.0: -0.0 becomes 0.0, which it equals
    return None


# The terms of (key, value) pairs already seen, for values whose equal values all have one term:
# strings, ints and bools (1 and True share a term, and a dict key). Not floats: NaN equals
# nothing, so each NaN would take a place of its own. Bounded: emptied when full.
_MEMO: dict[tuple[str, str | int], str | None] = {}
_MEMO_SIZE = 4096
_MEMO_TYPES = (str, int, bool)


def metadata_term(key: str, value: Any) -> str | None:
    """The term of `key` holding `value`, or None when no term stands for it."""
    if key in UNINDEXED_KEYS:
        return None
    if type(value) not in _MEMO_TYPES:
        return _term(key, value)
    memo_key = (key, value)
    try:
        return _MEMO[memo_key]
    except KeyError:
        pass
    if len(_MEMO) >= _MEMO_SIZE:
        _MEMO.clear()
    term = _MEMO[memo_key] = _term(key, value)
    return term


def _term(key: str, value: Any) -> str | None:
    text = _value_text(value)
    return None if text is None else _bounded("meta:" + orjson.dumps([key, text]).decode())


def metadata_terms(metadata: Mapping[str, Any]) -> set[str]:
    """The terms of one checkpoint's metadata: its run id and each plain value."""
    terms = {t for k, v in metadata.items() if (t := metadata_term(k, v)) is not None}
    run_id = metadata.get("run_id")
    if isinstance(run_id, str):
        terms.add(run_term(run_id))
    return terms


def filter_terms(filter: Mapping[str, Any]) -> list[str] | None:
    """The terms every thread matching `filter` holds, or None when no key of it is indexed
    (the caller then reads every thread)."""
    terms = [t for k, v in filter.items() if (t := metadata_term(k, v)) is not None]
    return terms or None


def history_terms(metadatas: Iterable[Mapping[str, Any]]) -> set[str]:
    """The terms of a thread whose checkpoints have these metadata."""
    terms: set[str] = set()
    for metadata in metadatas:
        terms |= metadata_terms(metadata)
    return terms


def _bounded(term: str) -> str:
    if len(term) <= LONGEST:
        return term
    digest = hashlib.sha256(term.encode("utf-8", "surrogatepass")).hexdigest()
    return term[: term.index(":") + 1] + "#" + digest
