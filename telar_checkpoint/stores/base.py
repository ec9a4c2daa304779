"""The store interface: strings keyed by thread id, nothing more.

A store knows nothing of LangGraph or of our format. It reads, atomically
updates, deletes and lists strings. `update` takes a pure function from the
current value to the new one, so a store may retry it (optimistic
concurrency) or run it under a lock; when the new value extends the old one,
a store whose storage allows it appends the suffix instead of rewriting.
Async methods default to running the sync ones in a worker thread, so they
never block the event loop; server-backed stores override them natively.
What only some stores do is an optional protocol: `Versioned`, `Indexed`,
`Expiring`, `SharedSpace`.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Hashable, Iterator

Change = Callable[[str | None], str | None]
"""A pure function from the stored value (None: absent) to the new one (None: delete)."""


class Store(ABC):
    """A few methods on strings keyed by thread id; the rest is derived. What only some stores
    can do is an optional protocol the store also subclasses: `Versioned`, `Indexed`,
    `Expiring`, `SharedSpace` (and `group_commit.DeferredAppends`). The saver and
    `telar_checkpoint.testing.StoreTests` go by those, never by the methods a store overrides."""

    #: A short name for messages and listings ("file", "sqlite", ...).
    kind: str = "store"

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

    def sorted_keys(self, after: str | None = None, limit: int | None = None) -> list[str]:
        """Keys in code point order, those after `after` only, at most `limit` of them (the
        default sorts `keys()`; a store that keeps its keys ordered reads just those asked for)."""
        chosen = sorted(k for k in self.keys() if after is None or k > after)
        return chosen if limit is None else chosen[:limit]

    def write(self, key: str, value: str) -> None:
        """Store `value` for `key`, replacing what was there."""
        self.update(key, lambda _old: value)

    def setup(self) -> None:
        """Create now what the store would create on first use (tables, indexes, the directory),
        so that a deployment fails at its start rather than at its first write; idempotent. The
        default creates nothing: a store that needs nothing made need not define it."""

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

    async def asorted_keys(self, after: str | None = None, limit: int | None = None) -> list[str]:
        return await asyncio.to_thread(self.sorted_keys, after, limit)

    async def awrite(self, key: str, value: str) -> None:
        await self.aupdate(key, lambda _old: value)

    async def asetup(self) -> None:
        await asyncio.to_thread(self.setup)

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Store:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class _Absent:
    """The type of `ABSENT`."""

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Hashable = _Absent()
"""The version of a key that holds nothing, for `Versioned.append_if` (never a store's version)."""


class Versioned(ABC):
    """An optional protocol of a `Store`: a token that changes with every write of a key, and an
    append at one. The saver keeps what it parsed with the version it came from, and appends
    without reading the whole value again; a store without it is read whole.

    `append_if(key, suffix, ABSENT)` creates `key` holding `suffix` only if it holds nothing, in
    one step (a new thread's first write, which otherwise takes an update); a store may answer
    None to it always, and the saver then updates."""

    @abstractmethod
    def version(self, key: str) -> Hashable | None:
        """A token for the current value of `key` (None: no value)."""

    @abstractmethod
    def update_versioned(self, key: str, change: Change) -> tuple[str | None, Hashable | None]:
        """`Store.update`, returning the new value and its version (None when not known exactly)."""

    @abstractmethod
    def append_if(self, key: str, suffix: str, version: Hashable) -> Hashable | None:
        """Append `suffix` if `key` is still at `version`, durably; the new version, or None if it moved."""

    async def aversion(self, key: str) -> Hashable | None:
        return await asyncio.to_thread(self.version, key)

    async def aupdate_versioned(self, key: str, change: Change) -> tuple[str | None, Hashable | None]:
        return await asyncio.to_thread(self.update_versioned, key, change)

    async def aappend_if(self, key: str, suffix: str, version: Hashable) -> Hashable | None:
        return await asyncio.to_thread(self.append_if, key, suffix, version)


class Indexed(ABC):
    """An optional protocol of a `Store`: an index of terms, so that operations across threads
    (`list(None, filter=...)`, `delete_for_runs`) cost what they find, not how many keys are
    stored. A term is a short string (a run id, a metadata value: see `telar_checkpoint.thread_index`).

    The saver records a key's terms before it writes lines that hold them, so the index may hold
    more than the values do (a write that failed after, a term removed since) but never less;
    every key it gives is checked against its value. A store whose index is not ready (written
    by a release without one) has it rebuilt by the saver before use."""

    @abstractmethod
    def index(self, key: str, terms: Collection[str]) -> None:
        """Record `terms` for `key`, durably before any write of `key` made after this returns."""

    @abstractmethod
    def unindex(self, key: str, terms: Collection[str]) -> None:
        """Forget `terms` for `key` (nothing happens for a term not recorded)."""

    @abstractmethod
    def indexed(self, term: str, start: str | None = None, limit: int | None = None) -> list[str]:
        """The keys recorded under `term` (a superset of those holding it), in code point order,
        from `start` on (inclusive: ``key + "\\x00"`` is the next key's least), at most `limit`."""

    @abstractmethod
    def index_ready(self) -> bool:
        """Whether every value stored has its terms recorded (False: rebuild before use)."""

    def set_index_ready(self) -> None:
        """Note that the index now covers every value stored (a no-op where it always does)."""

    async def aindex(self, key: str, terms: Collection[str]) -> None:
        await asyncio.to_thread(self.index, key, terms)

    async def aunindex(self, key: str, terms: Collection[str]) -> None:
        await asyncio.to_thread(self.unindex, key, terms)

    async def aindexed(self, term: str, start: str | None = None, limit: int | None = None) -> list[str]:
        return await asyncio.to_thread(self.indexed, term, start, limit)

    async def aindex_ready(self) -> bool:
        return await asyncio.to_thread(self.index_ready)

    async def aset_index_ready(self) -> None:
        await asyncio.to_thread(self.set_index_ready)


class Expiring(ABC):
    """An optional protocol of a `Store`: an expiry time per key (seconds since the Unix epoch,
    as the caller's clock gives them), the keys whose time has come, earliest first, at a cost
    in what they find rather than in how many keys are stored, and leases, so that one holder
    at a time does a piece of work across processes (`lease`). Deleting a key forgets its
    expiry. A key may have an expiry and no value (recorded before its first write)."""

    @abstractmethod
    def expire_at(self, key: str, when: float) -> None:
        """Record that `key` expires at `when`, unless a later time is recorded: the later of
        the two is kept (two writers racing never shorten a key's life)."""

    @abstractmethod
    def set_expiry(self, key: str, when: float | None) -> None:
        """Record exactly `when` for `key`, whatever was recorded (None: it has no expiry)."""

    @abstractmethod
    def expiry(self, key: str) -> float | None:
        """The expiry recorded for `key`, or None."""

    @abstractmethod
    def expired(self, now: float, limit: int) -> list[tuple[str, float]]:
        """The keys whose expiry is at or before `now`, with it, earliest first (ties in key
        order), at most `limit` of them."""

    @abstractmethod
    def lease(self, name: str, holder: str, now: float, seconds: float) -> bool:
        """Take or renew the lease `name` for `holder` until `now + seconds`: True if it is
        free, lapsed (its end is at or before `now`) or already `holder`'s; False, changing
        nothing, if another holder has it. Atomic across processes."""

    @abstractmethod
    def release(self, name: str, holder: str) -> None:
        """Give up the lease `name` if `holder` has it (nothing happens otherwise)."""

    async def aexpire_at(self, key: str, when: float) -> None:
        await asyncio.to_thread(self.expire_at, key, when)

    async def aset_expiry(self, key: str, when: float | None) -> None:
        await asyncio.to_thread(self.set_expiry, key, when)

    async def aexpiry(self, key: str) -> float | None:
        return await asyncio.to_thread(self.expiry, key)

    async def aexpired(self, now: float, limit: int) -> list[tuple[str, float]]:
        return await asyncio.to_thread(self.expired, now, limit)

    async def alease(self, name: str, holder: str, now: float, seconds: float) -> bool:
        return await asyncio.to_thread(self.lease, name, holder, now, seconds)

    async def arelease(self, name: str, holder: str) -> None:
        await asyncio.to_thread(self.release, name, holder)


class SharedSpace(ABC):
    """An optional protocol of a `Store` whose space (a directory, a database, a key prefix) may
    hold what is not its values, which `verify` reports."""

    @abstractmethod
    def foreign(self) -> list[str]:
        """Entries in the store's space that are not values of this store (listed apart)."""

    def stale_temp_files(self) -> list[str]:
        """Leftovers of writes that were killed midway, which the store removes in time."""
        return []
