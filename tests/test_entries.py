"""`Entries` behaves as a dict (order included), and its copies never change each other."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from telar_checkpoint.entries import SEAL_AT, Entries

keys = st.integers(0, 12)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("set"), keys, st.integers()),
        st.tuples(st.just("del"), keys, st.just(0)),
        st.tuples(st.just("copy"), st.just(0), st.just(0)),
    ),
    max_size=300,
)


def same(entries: Entries, model: dict) -> None:
    assert list(entries) == list(model)
    assert list(entries.items()) == list(model.items())
    assert list(entries.values()) == list(model.values())
    assert len(entries) == len(model)
    for key in range(13):
        assert (key in entries) == (key in model)
        assert entries.get(key, "absent") == model.get(key, "absent")


@settings(max_examples=300, deadline=None)
@given(operations)
def test_entries_behave_as_a_dict_and_copies_are_independent(ops) -> None:
    entries: Entries = Entries()
    model: dict = {}
    earlier: list[tuple[Entries, dict]] = []
    for op, key, value in ops:
        if op == "set":
            entries[key] = value
            model[key] = value
        elif op == "del":
            if key in model:
                del entries[key]
                del model[key]
            else:
                try:
                    del entries[key]
                except KeyError:
                    pass
                else:
                    raise AssertionError(f"deleting absent key {key} did not raise")
        else:
            earlier.append((entries, dict(model)))
            entries = entries.copy()
        same(entries, model)
    for old, snapshot in earlier:  # a copy's changes never reached the one it was made from
        same(old, snapshot)


def test_a_copy_costs_the_recent_layer_not_the_whole() -> None:
    entries: Entries = Entries({i: i for i in range(10_000)})
    sealed = entries._sealed
    for i in range(10_000, 10_000 + SEAL_AT + 1):
        entries = entries.copy()
        entries[i] = i
        assert entries._sealed is sealed  # shared, not copied
    entries = entries.copy()
    assert entries._sealed is not sealed and not entries._recent  # sealed again, once
    assert list(entries) == list(range(10_000 + SEAL_AT + 1))


def test_reversed_gives_the_keys_last_first_whatever_the_layers_hold() -> None:
    from telar_checkpoint.entries import SEAL_AT, Entries

    plain: dict[int, str] = {}
    entries: Entries[int, str] = Entries()
    for step in range(3 * SEAL_AT):
        entries = entries.copy()
        for target in (plain, entries):
            target[step] = f"v{step}"
            if step % 7 == 3:
                target[step - 2] = "replaced"  # keeps its place
            if step % 11 == 5:
                del target[step - 4]
                target[step - 4] = "again"  # goes to the end
        assert list(reversed(entries)) == list(reversed(plain))
