"""`MemoryStore`: strings in a dict, for tests and throwaway runs."""

from __future__ import annotations

import threading
from collections.abc import Iterator

from telar_checkpoint.stores.base import Change, Store


class MemoryStore(Store):
    """Keeps every history in a dict guarded by a lock; nothing survives the process."""

    kind = "memory"

    def __init__(self) -> None:
        self._data: dict[str, str] = {}
        self._lock = threading.Lock()

    def read(self, key: str) -> str | None:
        return self._data.get(key)

    def update(self, key: str, change: Change) -> str | None:
        with self._lock:
            new = change(self._data.get(key))
            if new is None:
                self._data.pop(key, None)
            else:
                self._data[key] = new
            return new

    def delete(self, key: str) -> None:
        with self._lock:
            self._data.pop(key, None)

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
