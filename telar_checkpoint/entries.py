"""`Entries`: a dict of a history's checkpoints whose copies share most of their contents.

A writer copies the history it changes (readers go on using the old one), so a
copy must not cost the length of the thread. `Entries` keeps a *sealed* dict,
never changed once made and shared by every copy, and a small *recent* layer of
its own: new keys, entries that replace a sealed one, and the sealed keys that
are gone. A copy copies the layer; once the layer grows past `SEAL_AT`, the
copy seals everything into a new shared dict instead. So a copy costs O(SEAL_AT)
and, once in SEAL_AT copies, O(n): amortized O(1) in the thread's length.

It behaves as a dict, order included: a key keeps its place when its value is
replaced, and goes to the end when it is deleted and set again.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, MutableMapping
from enum import Enum
from itertools import chain
from typing import Final, Generic, TypeVar

SEAL_AT = 64

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class _Missing(Enum):
    """The type of `_MISSING`: a one-member enum, so `value is not _MISSING` narrows to the value's type."""

    MISSING = 0


_MISSING: Final = _Missing.MISSING


class Entries(MutableMapping[K, V], Generic[K, V]):
    __slots__ = ("_sealed", "_recent", "_gone")

    def __init__(self, sealed: dict[K, V] | None = None, recent: dict[K, V] | None = None, gone: set[K] | None = None) -> None:
        self._sealed: dict[K, V] = sealed if sealed is not None else {}  # shared: never changed
        self._recent: dict[K, V] = recent if recent is not None else {}
        self._gone: set[K] = gone if gone is not None else set()  # sealed keys deleted

    def copy(self) -> Entries[K, V]:
        """A copy to change while this one stays as it is."""
        if len(self._recent) + len(self._gone) > SEAL_AT:
            return Entries(self._merged())
        return Entries(self._sealed, dict(self._recent), set(self._gone))

    def _merged(self) -> dict[K, V]:
        """One dict, in order: replaced values keep their place, keys set again go to the end."""
        merged = dict(self._sealed)
        for key in self._gone:
            del merged[key]
        merged.update(self._recent)
        return merged

    def _is_new(self, key: K) -> bool:
        """True for a key of the recent layer that is not at a sealed place."""
        return key not in self._sealed or key in self._gone

    def __getitem__(self, key: K) -> V:
        value: V | _Missing = self._recent.get(key, _MISSING)
        if value is not _MISSING:
            return value
        if key in self._gone:
            raise KeyError(key)
        return self._sealed[key]

    def get(self, key: K, default: V | None = None) -> V | None:  # type: ignore[override]  # one signature for Mapping.get's overloads
        value: V | _Missing = self._recent.get(key, _MISSING)
        if value is not _MISSING:
            return value
        if key in self._gone:
            return default
        return self._sealed.get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._recent or (key in self._sealed and key not in self._gone)

    def __setitem__(self, key: K, value: V) -> None:
        self._recent[key] = value

    def __delitem__(self, key: K) -> None:
        if key in self._recent:
            del self._recent[key]
            if key in self._sealed and key not in self._gone:
                self._gone.add(key)
        elif key in self._sealed and key not in self._gone:
            self._gone.add(key)
        else:
            raise KeyError(key)

    def __bool__(self) -> bool:  # without counting (`__len__` walks the recent layer)
        return bool(self._recent) or len(self._sealed) > len(self._gone)

    def __len__(self) -> int:
        return len(self._sealed) - len(self._gone) + sum(1 for key in self._recent if self._is_new(key))

    def _only_added(self) -> bool:
        """True when the recent layer only adds keys: the order is then the sealed dict's,
        then the layer's (the common case, iterated at C speed)."""
        return not self._gone and not any(key in self._sealed for key in self._recent)

    def __iter__(self) -> Iterator[K]:
        if self._only_added():
            return chain(self._sealed, self._recent)
        return self._keys_in_order()

    def _keys_in_order(self) -> Iterator[K]:
        gone, recent = self._gone, self._recent
        for key in self._sealed:
            if key not in gone:
                yield key
        for key in list(recent):
            if self._is_new(key):
                yield key

    def __reversed__(self) -> Iterator[K]:
        """The keys, last first (as `reversed` on a dict)."""
        for key in reversed(list(self._recent)):  # at most SEAL_AT keys
            if self._is_new(key):
                yield key
        gone = self._gone
        for key in reversed(self._sealed):
            if key not in gone:
                yield key

    # Iterators, not Mapping's views: a view over the shared sealed dict and the recent layer would
    # have to merge them (the cost of a copy that `Entries` avoids); every caller only iterates.
    def items(self) -> Iterator[tuple[K, V]]:  # type: ignore[override]
        if self._only_added():
            return chain(self._sealed.items(), self._recent.items())
        return ((key, self[key]) for key in self._keys_in_order())

    def values(self) -> Iterator[V]:  # type: ignore[override]
        return (value for _key, value in self.items())

    def __repr__(self) -> str:
        return f"Entries({dict(self.items())!r})"
