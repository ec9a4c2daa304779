"""`MemoryStore`: strings in a dict, for tests and throwaway runs."""

from __future__ import annotations

import threading
from collections.abc import Hashable, Iterator

from telar_checkpoint.stores.base import Change, Store


class MemoryStore(Store):
    """Keeps every history in a dict guarded by a lock; nothing survives the process.

    A value is kept as the list of pieces appended to it, joined when read, so an
    append costs the size of what it adds, not of the whole value.
    """

    kind = "memory"

    def __init__(self) -> None:
        self._data: dict[str, list[str]] = {}
        self._versions: dict[str, int] = {}
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
            self._data.pop(key, None)
            self._versions.pop(key, None)
        else:
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
