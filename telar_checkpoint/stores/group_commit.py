"""Group commit: one fsync serves every write made before it started.

A store counts its writes (`wrote`, under its own write lock) and makes them
durable in `flush`: a writer whose write an fsync already covers returns at
once; otherwise it waits for the fsync in progress, then starts one that covers
every write so far.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable

from telar_checkpoint.stores.base import Store


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


def append_durably(store: Store, key: str, suffix: str, version: Hashable) -> Hashable | None:
    """`Store.append_if` of a store that `defers_appends`: its deferred append, then its flush."""
    new_version = store.append_if_deferred(key, suffix, version)
    if new_version is not None:
        store.flush(key)
    return new_version
