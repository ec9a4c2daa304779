"""The index contract (see `Store.index`), on every store that keeps one, sync and async."""

from __future__ import annotations

import pytest

from telar_checkpoint.stores import Store
from tests.stores import describe, reopen

KEYS = ["b", "a", "тред", "nul\x00key", "x" * 300, "", "c/d"]


def indexing(store: Store) -> Store:
    if not store.indexes:
        pytest.fail(f"the {store.kind} store keeps no index")
    return store


def test_indexed_gives_the_keys_recorded_under_a_term_in_order(store: Store) -> None:
    store = indexing(store)
    for key in KEYS:
        store.write(key, "v\n")
        store.index(key, ["run:1", f"own:{key}"])
    store.index("a", ["run:2"])
    assert store.indexed("run:1") == sorted(KEYS)
    assert store.indexed("run:2") == ["a"]
    assert store.indexed("own:тред") == ["тред"]
    assert store.indexed("nothing") == []


def test_indexed_pages_from_a_start_key(store: Store) -> None:
    store = indexing(store)
    for key in KEYS:
        store.index(key, ["t"])
    expected = sorted(KEYS)
    assert store.indexed("t", limit=2) == expected[:2]
    assert store.indexed("t", expected[2], 3) == expected[2:5]  # from a key on, that key included
    assert store.indexed("t", expected[2] + "\x00") == expected[3:]  # just after it
    assert store.indexed("t", expected[-1] + "\x00") == []
    pages, start = [], None
    while page := store.indexed("t", start, 2):
        pages += page
        start = page[-1] + "\x00"
    assert pages == expected


def test_index_may_name_a_key_before_its_value_exists(store: Store) -> None:
    """The saver records terms before the write they describe: a key without a value yet."""
    store = indexing(store)
    store.index("later", ["run:1"])
    assert store.indexed("run:1") == ["later"]
    assert store.read("later") is None


def test_recording_a_term_twice_keeps_one(store: Store) -> None:
    store = indexing(store)
    store.index("a", ["t", "t"])
    store.index("a", ["t"])
    assert store.indexed("t") == ["a"]


def test_unindex_forgets_only_what_it_names(store: Store) -> None:
    store = indexing(store)
    store.index("a", ["t", "u"])
    store.index("b", ["t"])
    store.unindex("a", ["t", "never"])
    assert store.indexed("t") == ["b"]
    assert store.indexed("u") == ["a"]


def test_delete_forgets_the_keys_terms(store: Store) -> None:
    store = indexing(store)
    store.write("a", "v\n")
    store.write("b", "v\n")
    store.index("a", ["t"])
    store.index("b", ["t"])
    store.delete("a")
    assert store.indexed("t") == ["b"]


def test_terms_of_any_text_round_trip(store: Store) -> None:
    store = indexing(store)
    terms = ["meta:[\"k\",\"s\\u0000\"]", "run:тред 🧵", "x" * 200, "a b\nc"]
    store.index("k", terms)
    for term in terms:
        assert store.indexed(term) == ["k"]


def test_index_is_ready_on_a_new_store_and_stays_ready(store: Store) -> None:
    store = indexing(store)
    assert store.index_ready()
    store.write("a", "v\n")
    assert store.index_ready()


def test_sorted_keys_pages_in_code_point_order(store: Store) -> None:
    for key in KEYS:
        store.write(key, "v\n")
    expected = sorted(KEYS)
    assert store.sorted_keys() == expected
    assert store.sorted_keys(limit=2) == expected[:2]
    assert store.sorted_keys(after=expected[1], limit=3) == expected[2:5]
    assert store.sorted_keys(after=expected[-1]) == []
    store.delete(expected[0])
    assert store.sorted_keys(limit=1) == [expected[1]]


def test_another_store_object_sees_the_index(shared_store: Store) -> None:
    store = indexing(shared_store)
    store.write("a", "v\n")
    store.index("a", ["t"])
    other = reopen(describe(store))
    try:
        assert other.indexed("t") == ["a"]
        assert other.sorted_keys() == ["a"]
        assert other.index_ready()
    finally:
        other.close()


async def test_async_index(astore: Store) -> None:
    store = indexing(astore)
    await store.awrite("b", "v\n")
    await store.awrite("a", "v\n")
    await store.aindex("b", ["t"])
    await store.aindex("a", ["t", "u"])
    assert await store.aindexed("t") == ["a", "b"]
    await store.aunindex("a", ["t"])
    assert await store.aindexed("t") == ["b"]
    assert await store.asorted_keys(limit=1) == ["a"]
    assert await store.aindex_ready()
