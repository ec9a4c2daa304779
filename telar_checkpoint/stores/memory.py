"""`MemoryStore`: strings in a dict, for tests and throwaway runs."""

from __future__ import annotations

import bisect
import heapq
import threading
from collections.abc import Collection, Hashable, Iterator

from telar_checkpoint.stores.base import ABSENT, Change, Store


class MemoryStore(Store):
    """Keeps every history in a dict guarded by a lock; nothing survives the process.

    A value is kept as the list of pieces appended to it, joined when read, so an
    append costs the size of what it adds, not of the whole value. Expiries are a dict
    and a heap of (time, key) whose stale entries (a time since changed) are dropped
    when met, so `expired` costs what it finds; leases are a dict of (holder, end).
    """

    kind = "memory"
    keeps_versions = keeps_index = True

    def __init__(self) -> None:
        self._data: dict[str, list[str]] = {}
        self._versions: dict[str, int] = {}
        self._sorted: list[str] = []  # the keys, in order (kept by bisect as keys come and go)
        self._terms: dict[str, list[str]] = {}  # term -> its keys, in order
        self._terms_of: dict[str, set[str]] = {}  # key -> its terms
        self._expiry: dict[str, float] = {}
        self._due: list[tuple[float, str]] = []  # a heap; an entry is stale when _expiry says otherwise
        self._leases: dict[str, tuple[str, float]] = {}  # name -> (holder, end)
        self._clock = 0
        self._lock = threading.Lock()

    def read(self, key: str) -> str | None:
        with self._lock:
            return self._joined(key)

    def _joined(self, key: str) -> str | None:
        pieces = self._data.get(key)
        if pieces is None:
            return None
        if len(pieces) > 1:
            pieces[:] = ["".join(pieces)]
        return pieces[0]

    def _set(self, key: str, value: str | None) -> int:
        self._clock += 1
        if value is None:
            if self._data.pop(key, None) is not None:
                del self._sorted[bisect.bisect_left(self._sorted, key)]
            self._versions.pop(key, None)
            self._unindex(key, self._terms_of.pop(key, ()))
            self._expiry.pop(key, None)
        else:
            if key not in self._data:
                bisect.insort(self._sorted, key)
            self._data[key] = [value]
            self._versions[key] = self._clock
        return self._clock

    def update(self, key: str, change: Change) -> str | None:
        return self.update_versioned(key, change)[0]

    def update_versioned(self, key: str, change: Change) -> tuple[str | None, int | None]:
        with self._lock:
            new = change(self._joined(key))
            version = self._set(key, new)
            return new, version if new is not None else None

    def version(self, key: str) -> int | None:
        return self._versions.get(key)

    def append_if(self, key: str, suffix: str, version: Hashable) -> int | None:
        with self._lock:
            if version is ABSENT:
                return None if key in self._data else self._set(key, suffix)
            if key not in self._data or self._versions.get(key) != version:
                return None
            self._data[key].append(suffix)
            self._clock += 1
            self._versions[key] = self._clock
            return self._clock

    def delete(self, key: str) -> None:
        with self._lock:
            self._set(key, None)

    def keys(self) -> Iterator[str]:
        return iter(list(self._data))

    def index(self, key: str, terms: Collection[str]) -> None:
        with self._lock:
            for term in terms:
                keys = self._terms.setdefault(term, [])
                at = bisect.bisect_left(keys, key)
                if at == len(keys) or keys[at] != key:
                    keys.insert(at, key)
            self._terms_of.setdefault(key, set()).update(terms)

    def unindex(self, key: str, terms: Collection[str]) -> None:
        with self._lock:
            self._unindex(key, terms)
            self._terms_of.get(key, set()).difference_update(terms)

    def _unindex(self, key: str, terms: Collection[str]) -> None:
        for term in terms:
            keys = self._terms.get(term)
            if keys is not None:
                at = bisect.bisect_left(keys, key)
                if at < len(keys) and keys[at] == key:
                    del keys[at]
                if not keys:
                    del self._terms[term]

    def indexed(self, term: str, start: str | None = None, limit: int | None = None) -> list[str]:
        with self._lock:
            keys = self._terms.get(term, [])
            first = 0 if start is None else bisect.bisect_left(keys, start)
            return keys[first : None if limit is None else first + max(limit, 0)]

    def index_ready(self) -> bool:
        return True

    def expire_at(self, key: str, when: float) -> None:
        with self._lock:
            old = self._expiry.get(key)
            if old is None or when > old:
                self._set_expiry(key, when)

    def set_expiry(self, key: str, when: float | None) -> None:
        with self._lock:
            if when is None:
                self._expiry.pop(key, None)
            elif self._expiry.get(key) != when:
                self._set_expiry(key, when)

    def _set_expiry(self, key: str, when: float) -> None:
        self._expiry[key] = when
        heapq.heappush(self._due, (when, key))
        if len(self._due) > 2 * len(self._expiry) + 64:  # mostly stale: rebuild (amortized over the pushes)
            self._due = [(at, k) for k, at in self._expiry.items()]
            heapq.heapify(self._due)

    def expiry(self, key: str) -> float | None:
        with self._lock:
            return self._expiry.get(key)

    def expired(self, now: float, limit: int) -> list[tuple[str, float]]:
        """Pops the heap's entries due by `now` (dropping the stale ones), then pushes back the found."""
        found: list[tuple[str, float]] = []
        with self._lock:
            while self._due and len(found) < limit and self._due[0][0] <= now:
                when, key = heapq.heappop(self._due)
                if self._expiry.get(key) == when and (not found or found[-1] != (key, when)):
                    found.append((key, when))
            for key, when in found:
                heapq.heappush(self._due, (when, key))
        return found

    def lease(self, name: str, holder: str, now: float, seconds: float) -> bool:
        with self._lock:
            held = self._leases.get(name)
            if held is not None and held[0] != holder and held[1] > now:
                return False
            self._leases[name] = (holder, now + seconds)
            return True

    def release(self, name: str, holder: str) -> None:
        with self._lock:
            held = self._leases.get(name)
            if held is not None and held[0] == holder:
                del self._leases[name]

    def sorted_keys(self, after: str | None = None, limit: int | None = None) -> list[str]:
        with self._lock:
            start = 0 if after is None else bisect.bisect_right(self._sorted, after)
            return self._sorted[start : None if limit is None else start + max(limit, 0)]

    async def aread(self, key: str) -> str | None:
        return self.read(key)

    async def aupdate(self, key: str, change: Change) -> str | None:
        return self.update(key, change)

    async def adelete(self, key: str) -> None:
        self.delete(key)

    async def akeys(self) -> list[str]:
        return list(self.keys())

    async def aversion(self, key: str) -> int | None:
        return self.version(key)

    async def aupdate_versioned(self, key: str, change: Change) -> tuple[str | None, int | None]:
        return self.update_versioned(key, change)

    async def aappend_if(self, key: str, suffix: str, version: Hashable) -> int | None:
        return self.append_if(key, suffix, version)

    async def aindex(self, key: str, terms: Collection[str]) -> None:
        self.index(key, terms)

    async def aunindex(self, key: str, terms: Collection[str]) -> None:
        self.unindex(key, terms)

    async def aindexed(self, term: str, start: str | None = None, limit: int | None = None) -> list[str]:
        return self.indexed(term, start, limit)

    async def aindex_ready(self) -> bool:
        return True

    async def asorted_keys(self, after: str | None = None, limit: int | None = None) -> list[str]:
        return self.sorted_keys(after, limit)

    async def aexpire_at(self, key: str, when: float) -> None:
        self.expire_at(key, when)

    async def aset_expiry(self, key: str, when: float | None) -> None:
        self.set_expiry(key, when)

    async def aexpiry(self, key: str) -> float | None:
        return self.expiry(key)

    async def aexpired(self, now: float, limit: int) -> list[tuple[str, float]]:
        return self.expired(now, limit)

    async def alease(self, name: str, holder: str, now: float, seconds: float) -> bool:
        return self.lease(name, holder, now, seconds)

    async def arelease(self, name: str, holder: str) -> None:
        self.release(name, holder)
