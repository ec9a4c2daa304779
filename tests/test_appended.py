"""A list channel is stored as the items it added exactly when its first items are the
parent's list as JSON text (`rules._appended`, which dumps the new list once and keeps it)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from telar_checkpoint.format import CheckpointLine
from telar_checkpoint.history import Entry
from telar_checkpoint.rules import _appended

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=8,
)


def parent_with(value: list[Any]) -> Entry:
    line = CheckpointLine(ns="", id="p", parent=None, metadata={}, checkpoint={}, extra={}, values={"log": value})
    return Entry(line)


def added(before: list[Any], after: list[Any]) -> list[Any] | None:
    values = {"log": list(after)}
    appended, lists = _appended(values, parent_with(before))
    if len(before) <= len(after):
        text, length, depth = lists["log"]  # kept for the next put
        assert (text, length) == (orjson.dumps(after), len(after))
        assert depth == (1 if "log" in appended else 0)  # a line that extends its parent's list is one deeper
    return appended.get("log")


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        ([1], [1, 2], [2]),
        ([1], [1], []),
        ([1], [12], None),  # a number that only starts the same
        ([1], [1.0, 2], None),  # a change of type is a change
        ([1], [True], None),
        (["ab"], ["abc"], None),
        ([{"a": 1}], [{"a": 1, "b": 2}], None),
        ([[1]], [[1, 2]], None),
        ([[1]], [[1], [2]], [[2]]),
        ([{"t": "x"}, 2], [{"t": "edited"}, 2, 3], None),  # an earlier item edited in place
    ],
)
def test_the_items_added_are_found_by_the_text_of_the_lists(before: list[Any], after: list[Any], expected: list[Any] | None) -> None:
    assert added(before, after) == expected


@settings(max_examples=400, deadline=None)
@given(st.lists(json_values, min_size=1, max_size=4), st.lists(json_values, max_size=4), st.booleans())
def test_one_dump_agrees_with_comparing_the_prefix_as_json(before: list[Any], extra: list[Any], same_start: bool) -> None:
    after = (list(before) if same_start else [*extra[:1], *before[1:]]) + extra
    expected = after[len(before) :] if orjson.dumps(after[: len(before)]) == orjson.dumps(before) and len(before) <= len(after) else None
    assert added(before, after) == expected
