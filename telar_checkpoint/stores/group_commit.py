"""Group commit: one fsync serves every write made before it started.

A store counts its writes (`wrote`, under its own write lock) and makes them
durable in `flush`: a writer whose write an fsync already covers returns at
once; otherwise it waits for the fsync in progress, then starts one that covers
every write so far.
"""

from __future__ import annotations

import asyncio
import threading
from abc import abstractmethod
from collections.abc import Callable, Hashable

from telar_checkpoint.stores.base import Versioned


class GroupCommit:
    """The counters and locks of group commit for one file."""

    def __init__(self) -> None:
        self.sync_lock = threading.Lock()  # held while an fsync runs
        self.written = 0  # writes made (counted under the store's write lock)
        self.synced = 0  # writes known to be on disk

    @property
    def pending(self) -> bool:
        return self.synced < self.written

    def wrote(self) -> int:
        """Count a write; its ticket for `flush`."""
        self.written += 1
        return self.written

    def flush(self, ticket: int, sync: Callable[[], None]) -> None:
        """Return once write `ticket` is durable, calling `sync` (an fsync) if no other did."""
        if self.synced >= ticket:
            return
        with self.sync_lock:
            if self.synced >= ticket:
                return
            target = self.written
            sync()
            self.synced = target


class DeferredAppends(Versioned):
    """An optional protocol of a `Store` whose appends may be made durable later, together:
    `append_if_deferred` may return before its suffix is durable, and `flush` makes every
    append of the key so far durable (the group commit above). `append_if` is the one, then
    the other. The saver appends with the first inside a thread's turn and flushes after it,
    so the next writer can append while this one waits for the disk."""

    @abstractmethod
    def append_if_deferred(self, key: str, suffix: str, version: Hashable) -> Hashable | None:
        """`append_if`, returning before the suffix is durable: `flush` before acknowledging it."""

    @abstractmethod
    def flush(self, key: str) -> None:
        """Return once every append of `key` made so far is durable."""

    def append_if(self, key: str, suffix: str, version: Hashable) -> Hashable | None:
        new_version = self.append_if_deferred(key, suffix, version)
        if new_version is not None:
            self.flush(key)
        return new_version

    async def aappend_if_deferred(self, key: str, suffix: str, version: Hashable) -> Hashable | None:
        return await asyncio.to_thread(self.append_if_deferred, key, suffix, version)

    async def aflush(self, key: str) -> None:
        await asyncio.to_thread(self.flush, key)
