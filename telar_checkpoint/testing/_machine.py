"""`StoreMachine`: the rules of a store as a hypothesis state machine, against a dict."""

from __future__ import annotations

from collections.abc import Hashable

try:
    import pytest
    from hypothesis import strategies as st
    from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
except ImportError as exc:  # pragma: no cover - the test extra is missing
    raise ImportError("telar_checkpoint.testing needs pytest and hypothesis: pip install 'telar-checkpoint[test]'") from exc

from telar_checkpoint.errors import StoreError
from telar_checkpoint.stores.base import Change, Store
from telar_checkpoint.testing._workers import append, fail

MACHINE_KEYS = st.sampled_from(["a", "b/..", "nul\x00", "é🧵", ""])
MACHINE_TEXTS = st.text(max_size=12)
MACHINE_TERMS = ["t", "run:1", 'meta:["k","s\\u0000"]', "тред 🧵"]


class StoreMachine(RuleBasedStateMachine):
    """The rules of a store, against a dict of values and, for the index, two sets per term: the
    keys it must give, and those it may still give (a key deleted while absent, or by an update
    to None, may keep its terms: the index may name more keys than hold a term, never fewer)."""

    store: Store  # its versions are checked when `versions`, its index when `indexes`
    versions: bool
    indexes: bool

    def __init__(self) -> None:
        super().__init__()
        for key in list(self.store.keys()):
            self.store.delete(key)
        for term in MACHINE_TERMS if self.indexes else ():
            for key in self.store.indexed(term):
                self.store.unindex(key, [term])
        self.model: dict[str, str] = {}
        self.seen: dict[str, list[Hashable]] = {}  # every version each key has had, in this example
        self.must: dict[str, set[str]] = {term: set() for term in MACHINE_TERMS}
        self.may: dict[str, set[str]] = {term: set() for term in MACHINE_TERMS}
        self.agrees_with_dict()

    def changed(self, key: str, version: Hashable | None = None, *, same: bool = False) -> None:
        """Check the version of `key` after a write: one it never had (or, when the write left
        the value as it was, `same`, possibly the one before), and the one the write returned."""
        if not self.versions:
            return
        current = self.store.version(key)
        if key not in self.model:
            assert current is None
            return
        seen = self.seen.setdefault(key, [])
        assert current is not None and (current not in seen or (same and current == seen[-1]))
        assert version is None or version == current
        seen.append(current)

    def stored(self, key: str, change: Change, expected: str) -> None:
        """`update` with `change`, which gives `expected`: stored exactly, or refused with a StoreError."""
        same = self.model.get(key) == expected
        try:
            assert self.store.update(key, change) == expected
        except StoreError:
            return
        self.model[key] = expected
        self.changed(key, same=same)

    @rule(key=MACHINE_KEYS, value=MACHINE_TEXTS)
    def write(self, key: str, value: str) -> None:
        self.stored(key, lambda _old: value, value)

    @rule(key=MACHINE_KEYS, suffix=MACHINE_TEXTS)
    def extend(self, key: str, suffix: str) -> None:
        self.stored(key, append(suffix), self.model.get(key, "") + suffix)

    def stored_key(self, data: st.DataObject, key: str) -> str:
        """`key`, or (half the time, when there is one) a key that holds a value or a term, so
        that deletes and index changes meet the keys that other rules wrote."""
        stored = sorted(set(self.model).union(*self.must.values()))
        if not stored or not data.draw(st.booleans(), "a stored key"):
            return key
        return data.draw(st.sampled_from(stored), "stored key")

    @rule(key=MACHINE_KEYS, by_update=st.booleans(), data=st.data())
    def delete(self, key: str, by_update: bool, data: st.DataObject) -> None:
        key = self.stored_key(data, key)
        existed = key in self.model
        if by_update:
            assert self.store.update(key, lambda _old: None) is None
        else:
            self.store.delete(key)
        self.model.pop(key, None)
        self.changed(key)
        for term in MACHINE_TERMS:
            if key in self.must[term] and (by_update or not existed):
                self.may[term].add(key)
            if not by_update and existed:
                self.may[term].discard(key)
            self.must[term].discard(key)

    @rule(key=MACHINE_KEYS)
    def failing_change(self, key: str) -> None:
        with pytest.raises(RuntimeError):
            self.store.update(key, fail)

    @precondition(lambda self: self.versions)
    @rule(key=MACHINE_KEYS, suffix=MACHINE_TEXTS)
    def update_versioned(self, key: str, suffix: str) -> None:
        expected = self.model.get(key, "") + suffix
        same = self.model.get(key) == expected
        try:
            new, version = self.store.update_versioned(key, append(suffix))
        except StoreError:
            return
        assert new == expected and version is not None
        self.model[key] = expected
        self.changed(key, version, same=same)

    @precondition(lambda self: self.versions)
    @rule(key=MACHINE_KEYS, suffix=MACHINE_TEXTS, stale=st.booleans(), deferred=st.booleans())
    def append_if(self, key: str, suffix: str, stale: bool, deferred: bool) -> None:
        current = self.store.version(key)
        version = current
        if stale:
            version = next((v for v in reversed(self.seen.get(key, [])) if v != current), ("not", "a", "version"))
        try:
            if deferred:  # (`append_if` where the store does not defer appends)
                moved = self.store.append_if_deferred(key, suffix, version)
                self.store.flush(key)
            else:
                moved = self.store.append_if(key, suffix, version)
        except StoreError:
            assert self.store.version(key) == current
            return
        if stale or key not in self.model:
            assert moved is None and self.store.version(key) == current
            return
        assert moved is not None and (moved != current or not suffix)  # appending nothing may keep the version
        self.model[key] += suffix
        self.changed(key, moved, same=not suffix)

    @precondition(lambda self: self.indexes)
    @rule(key=MACHINE_KEYS, terms=st.lists(st.sampled_from(MACHINE_TERMS), max_size=3), data=st.data())
    def index(self, key: str, terms: list[str], data: st.DataObject) -> None:
        key = self.stored_key(data, key)
        self.store.index(key, terms)
        for term in terms:
            self.must[term].add(key)

    @precondition(lambda self: self.indexes)
    @rule(key=MACHINE_KEYS, terms=st.lists(st.sampled_from(MACHINE_TERMS), max_size=3))
    def unindex(self, key: str, terms: list[str]) -> None:
        self.store.unindex(key, terms)
        for term in terms:
            self.must[term].discard(key)
            self.may[term].discard(key)

    @invariant()
    def agrees_with_dict(self) -> None:
        assert sorted(self.store.keys()) == sorted(self.model)
        assert self.store.thread_keys() == self.store.sorted_keys() == sorted(self.model)
        for key, value in self.model.items():
            assert self.store.read(key) == value
        for term in MACHINE_TERMS if self.indexes else ():
            given = self.store.indexed(term)
            assert given == sorted(given) and self.must[term] <= set(given) <= self.must[term] | self.may[term], term
