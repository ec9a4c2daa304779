"""The store interface: strings keyed by thread id, nothing more.

A store knows nothing of LangGraph or of our format. It reads, atomically
updates, deletes and lists strings. `update` takes a pure function from the
current value to the new one, so a store may retry it (optimistic
concurrency) or run it under a lock; when the new value extends the old one,
a store whose storage allows it appends the suffix instead of rewriting.
Async methods default to running the sync ones in a worker thread, so they
never block the event loop; server-backed stores override them natively.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Hashable, Iterator

Change = Callable[[str | None], str | None]
"""A pure function from the stored value (None: absent) to the new one (None: delete)."""


class Store(ABC):
    """A few methods on strings keyed by thread id; the rest is derived."""

    #: A short name for messages and listings ("file", "sqlite", ...).
    kind: str = "store"

    # What a store can do, declared by each store (never inferred from the methods it overrides):
    # the async defaults, the saver and `telar_checkpoint.testing.StoreTests` go by these.

    #: Whether `version` gives a token that changes with every write of the key, and `append_if`
    #: appends at one. The saver keeps what it parsed with the version it came from, and appends
    #: without reading the whole value again; a store without (both give None) is read whole.
    versions: bool = False

    #: Whether `append_if_deferred` may return before the suffix is durable, which `flush` then
    #: makes it (False: every write is durable when it returns, and `flush` does nothing).
    deferred_appends: bool = False

    #: Whether the store keeps an index (`index`, `indexed`, `index_ready`: see there); without
    #: one, the saver scans every key.
    indexes: bool = False

    #: Whether a write costs enough (an fsync, a round trip to a server) that a saver's pending
    #: writes should wait up to 2 ms for the step's put to carry them in the same write (see
    #: `writer_locks.Lingers`). Measured with `benchmarks/ab.py linger` (the agent loop, 100
    #: turns, A/A'/B interleaved; benchmarks/results/ab.md), in three experiments:
    #: - Postgres (two): an invoke is 1-11% slower without it, beyond the A/A' noise in every run. On.
    #: - file, SQLite, Redis: faster with it in every experiment's median (by 7% at 29a49e7;
    #:   by 1-4.5% at deb937a), beyond the noise in every run in one experiment of three (SQLite:
    #:   two). A small gain that costs no code of its own (Postgres needs the machinery). On.
    #: - memory: 2-10% slower with it, beyond the noise in every run. Off.
    carry_writes: bool = False

    @abstractmethod
    def read(self, key: str) -> str | None:
        """The stored string for `key`, or None when there is none."""

    @abstractmethod
    def update(self, key: str, change: Change) -> str | None:
        """Atomically replace the value of `key` with `change(current)` and return it.

        `change` may be called more than once and must be pure. An exception it
        raises leaves the stored value as it was and propagates. Returning None
        deletes the key.
        """

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove `key`; nothing happens when it is absent."""

    @abstractmethod
    def keys(self) -> Iterator[str]:
        """Every key that holds a value, in no particular order."""

    # Versions, for a store that declares `versions` (see there).

    def version(self, key: str) -> Hashable | None:
        """A token for the current value of `key` (None: this store has no versions)."""
        return None

    def update_versioned(self, key: str, change: Change) -> tuple[str | None, Hashable | None]:
        """`update`, returning the new value and its version (None when not known exactly)."""
        return self.update(key, change), None

    def append_if(self, key: str, suffix: str, version: Hashable) -> Hashable | None:
        """Append `suffix` if `key` is still at `version`; the new version, or None if it moved."""
        return None

    def append_if_deferred(self, key: str, suffix: str, version: Hashable) -> Hashable | None:
        """`append_if`, but it may return before the suffix is durable: call `flush` before
        acknowledging it. Lets the next writer append while this one waits for the disk,
        and one `flush` serve them all."""
        return self.append_if(key, suffix, version)

    def flush(self, key: str) -> None:
        """Return once every write of `key` made so far is durable (a no-op where writes are
        durable when they return)."""

    def foreign(self) -> list[str]:
        """Entries in the store's space that are not values of this store (listed apart)."""
        return []

    def stale_temp_files(self) -> list[str]:
        """Leftovers of writes that were killed midway, which the store removes in time (for `verify`)."""
        return []

    # The index, for a store that declares `indexes`: terms, so that operations across threads
    # (`list(None, filter=...)`, `delete_for_runs`) cost what they find, not how many keys are
    # stored. A term is a short string (a run id, a metadata value: see `telar_checkpoint.terms`).
    # The saver records a key's terms before it writes lines that hold them, so the index may hold
    # more than the values do (a write that failed after, a term removed since) but never less;
    # every key it gives is checked against its value. A store whose index is not ready (written
    # by a release without one) has it rebuilt by the saver before use.

    def index(self, key: str, terms: Collection[str]) -> None:
        """Record `terms` for `key`, durably before any write of `key` made after this returns."""

    def unindex(self, key: str, terms: Collection[str]) -> None:
        """Forget `terms` for `key` (nothing happens for a term not recorded)."""

    def indexed(self, term: str, start: str | None = None, limit: int | None = None) -> list[str]:
        """The keys recorded under `term` (a superset of those holding it), in code point order,
        from `start` on (inclusive: ``key + "\\x00"`` is the next key's least), at most `limit`."""
        raise NotImplementedError(f"{type(self).__name__} keeps no index")

    def index_ready(self) -> bool:
        """Whether every value stored has its terms recorded (False: rebuild before use)."""
        return False

    def set_index_ready(self) -> None:
        """Note that the index now covers every value stored."""

    def sorted_keys(self, after: str | None = None, limit: int | None = None) -> list[str]:
        """Keys in code point order, those after `after` only, at most `limit` of them (the
        default sorts `keys()`; a store that keeps its keys ordered reads just those asked for)."""
        chosen = sorted(k for k in self.keys() if after is None or k > after)
        return chosen if limit is None else chosen[:limit]

    def write(self, key: str, value: str) -> None:
        """Store `value` for `key`, replacing what was there."""
        self.update(key, lambda _old: value)

    def close(self) -> None:
        """Release connections or handles; the default holds none."""

    # Async twins: a worker thread by default, overridden where a native API exists.
    async def aread(self, key: str) -> str | None:
        return await asyncio.to_thread(self.read, key)

    async def aupdate(self, key: str, change: Change) -> str | None:
        return await asyncio.to_thread(self.update, key, change)

    async def adelete(self, key: str) -> None:
        await asyncio.to_thread(self.delete, key)

    async def akeys(self) -> list[str]:
        return await asyncio.to_thread(lambda: list(self.keys()))

    async def awrite(self, key: str, value: str) -> None:
        await self.aupdate(key, lambda _old: value)

    async def aversion(self, key: str) -> Hashable | None:
        return await asyncio.to_thread(self.version, key) if self.versions else None

    async def aupdate_versioned(self, key: str, change: Change) -> tuple[str | None, Hashable | None]:
        if not self.versions:
            return await self.aupdate(key, change), None
        return await asyncio.to_thread(self.update_versioned, key, change)

    async def aappend_if(self, key: str, suffix: str, version: Hashable) -> Hashable | None:
        return await asyncio.to_thread(self.append_if, key, suffix, version) if self.versions else None

    async def aappend_if_deferred(self, key: str, suffix: str, version: Hashable) -> Hashable | None:
        if not self.deferred_appends:
            return await self.aappend_if(key, suffix, version)
        return await asyncio.to_thread(self.append_if_deferred, key, suffix, version)

    async def aflush(self, key: str) -> None:
        if self.deferred_appends:
            await asyncio.to_thread(self.flush, key)

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)

    async def aindex(self, key: str, terms: Collection[str]) -> None:
        if self.indexes:
            await asyncio.to_thread(self.index, key, terms)

    async def aunindex(self, key: str, terms: Collection[str]) -> None:
        if self.indexes:
            await asyncio.to_thread(self.unindex, key, terms)

    async def aindexed(self, term: str, start: str | None = None, limit: int | None = None) -> list[str]:
        return await asyncio.to_thread(self.indexed, term, start, limit)

    async def aindex_ready(self) -> bool:
        return await asyncio.to_thread(self.index_ready) if self.indexes else False

    async def aset_index_ready(self) -> None:
        if self.indexes:
            await asyncio.to_thread(self.set_index_ready)

    async def asorted_keys(self, after: str | None = None, limit: int | None = None) -> list[str]:
        return await asyncio.to_thread(self.sorted_keys, after, limit)

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Store:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
