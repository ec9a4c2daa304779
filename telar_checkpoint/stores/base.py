"""The store interface: strings keyed by thread id, and what the saver builds on them.

A store knows nothing of LangGraph or of our format. It reads, atomically
updates, deletes and lists strings: those four methods are all a store of
one's own must write. `update` takes a pure function from the current value to
the new one, so a store may retry it (optimistic concurrency) or run it under a
lock; when the new value extends the old one, a store whose storage allows it
appends the suffix instead of rewriting.

Everything else `Store` gives a default built on those four, as
`collections.abc` gives mixin methods: versions and conditional appends, an
index of terms, expiries and leases, deferred appends, foreign entries. Our
stores override them with faster ones; three class attributes say which
defaults a store has replaced where the saver must know it (`keeps_versions`,
`keeps_index`, `defers_appends`). Async methods default to running the sync
ones in a worker thread, so they never block the event loop; server-backed
stores override them natively.
"""

from __future__ import annotations

import asyncio
import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Hashable, Iterator

Change = Callable[[str | None], str | None]
"""A pure function from the stored value (None: absent) to the new one (None: delete)."""

RESERVED = "\x00telar:"
"""The start of the keys a store keeps for itself with the default expiries and leases (no
thread id starts with a NUL character); `thread_keys` and `sorted_keys` leave them out."""
_EXPIRY = RESERVED + "expiry:"  # + a key: its expiry, as `repr` of the float
_LEASE = RESERVED + "lease:"  # + a lease's name: [holder, end] as JSON


class _Absent:
    """The type of `ABSENT`."""

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Hashable = _Absent()
"""The version of a key that holds nothing, for `Store.append_if` (never a store's version)."""


class Store(ABC):
    """Strings keyed by thread id: `read`, `update`, `delete` and `keys` are abstract; every
    other method has a default built on them, which a store may override with a faster one.

    The saver asks a store what it can do by three class attributes, never by its type or by
    the methods it overrides. `StoreTests` (`telar_checkpoint.testing`) checks a store against
    all of it."""

    #: A short name for messages and listings ("file", "sqlite", ...).
    kind: str = "store"
    #: `version` gives a token that changes with every write and `append_if` appends at it
    #: (False, the defaults: no versions; the saver reads a thread whole and updates it).
    keeps_versions: bool = False
    #: `indexed` gives the keys recorded under a term, at a cost in what it finds (False, the
    #: defaults: nothing recorded, every key given; the saver reads every thread instead).
    keeps_index: bool = False
    #: `append_if_deferred` may return before its append is durable, and `flush` makes it so
    #: (False: `append_if_deferred` is `append_if`; the saver flushes only when True).
    defers_appends: bool = False

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
        """Every key that holds a value, in no particular order (with the default expiries and
        leases, the store's own keys, starting `RESERVED`, too)."""

    def thread_keys(self) -> list[str]:
        """Every thread's key, in code point order: `keys()` but the store's own (starting
        `RESERVED`). The library lists threads with it, and pages through them with `sorted_keys`
        where the store `keeps_index`."""
        return sorted(k for k in self.keys() if not k.startswith(RESERVED))

    def sorted_keys(self, after: str | None = None, limit: int | None = None) -> list[str]:
        """`thread_keys()` after `after` only, at most `limit` of them (the default filters
        `thread_keys()`; a store that keeps its keys in order, in its index, reads just those
        asked for, so it may give fewer while its index is not ready)."""
        chosen = [k for k in self.thread_keys() if after is None or k > after]
        return chosen if limit is None else chosen[: max(limit, 0)]

    def write(self, key: str, value: str) -> None:
        """Store `value` for `key`, replacing what was there."""
        self.update(key, lambda _old: value)

    def setup(self) -> None:
        """Create now what the store would create on first use (tables, indexes, the directory),
        so that a deployment fails at its start rather than at its first write; idempotent. The
        default creates nothing: a store that needs nothing made need not define it."""

    def close(self) -> None:
        """Release connections or handles; the default holds none."""

    # --- Versions: what lets the saver append without reading a thread whole (`keeps_versions`) ---

    def version(self, key: str) -> Hashable | None:
        """A token for the current value of `key` (None: no value). The default, without
        versions, answers None always; the saver does not ask unless `keeps_versions`."""
        return None

    def update_versioned(self, key: str, change: Change) -> tuple[str | None, Hashable | None]:
        """`update`, returning the new value and its version (None when not known exactly: the
        default's always)."""
        return self.update(key, change), None

    def append_if(self, key: str, suffix: str, version: Hashable) -> Hashable | None:
        """Append `suffix` if `key` is still at `version`, durably; the new version, or None if
        nothing was appended. With `ABSENT`, create `key` holding `suffix` only if it holds
        nothing, in one step. A store may answer None always (the default does): the saver then
        updates."""
        return None

    def append_if_deferred(self, key: str, suffix: str, version: Hashable) -> Hashable | None:
        """`append_if`, which may return before the suffix is durable where `defers_appends`:
        `flush` before acknowledging it. The default is `append_if`."""
        return self.append_if(key, suffix, version)

    def flush(self, key: str) -> None:
        """Return once every append of `key` made so far is durable (the default's are at once)."""

    # --- The index of terms (`keeps_index`) ---

    def index(self, key: str, terms: Collection[str]) -> None:
        """Record `terms` (short strings: see `telar_checkpoint.thread_index`) for `key`, durably
        before any write of `key` made after this returns. The saver records a key's terms before
        it writes lines that hold them, so the index may hold more than the values do, never
        less. The default records nothing (its `indexed` gives every key)."""

    def unindex(self, key: str, terms: Collection[str]) -> None:
        """Forget `terms` for `key` (nothing happens for a term not recorded). Deleting a key
        forgets its terms."""

    def indexed(self, term: str, start: str | None = None, limit: int | None = None) -> list[str]:
        """The keys recorded under `term` (a superset of those holding it: each is checked
        against its value), in code point order, from `start` on (inclusive: ``key + "\\x00"``
        is the next key's least), at most `limit`. The default gives every thread's key."""
        chosen = [k for k in self.sorted_keys() if start is None or k >= start]
        return chosen if limit is None else chosen[: max(limit, 0)]

    def index_ready(self) -> bool:
        """Whether every value stored has its terms recorded (False, for a store written by a
        release without an index: the saver rebuilds it before use). The default's always is."""
        return True

    def set_index_ready(self) -> None:
        """Note that the index now covers every value stored (a no-op where it always does)."""

    # --- Expiries and leases, for a time-to-live ---
    # An expiry is seconds since the Unix epoch, as the caller's clock gives them. A key may have
    # an expiry and no value (recorded before its first write). Deleting a key forgets its expiry
    # where a store keeps expiries of its own; the defaults keep each under a key of the store's
    # own (`RESERVED`), which a delete of the thread's key leaves until the saver's sweep, finding
    # no value, removes it. Their cost is in how many keys are stored; ours cost what they find.

    def expire_at(self, key: str, when: float) -> None:
        """Record that `key` expires at `when`, unless a later time is recorded: the later of
        the two is kept (two writers racing never shorten a key's life)."""
        self.update(_EXPIRY + key, lambda old: repr(when) if old is None or when > float(old) else old)

    def set_expiry(self, key: str, when: float | None) -> None:
        """Record exactly `when` for `key`, whatever was recorded (None: it has no expiry)."""
        if when is None:
            self.delete(_EXPIRY + key)
        else:
            self.write(_EXPIRY + key, repr(when))

    def expiry(self, key: str) -> float | None:
        """The expiry recorded for `key`, or None."""
        text = self.read(_EXPIRY + key)
        return None if text is None else float(text)

    def expired(self, now: float, limit: int) -> list[tuple[str, float]]:
        """The keys whose expiry is at or before `now`, with it, earliest first (ties in key
        order), at most `limit` of them."""
        due = []
        for own in self.keys():
            if own.startswith(_EXPIRY) and (text := self.read(own)) is not None and (when := float(text)) <= now:
                due.append((when, own[len(_EXPIRY) :]))
        return [(key, when) for when, key in sorted(due)[: max(limit, 0)]]

    def lease(self, name: str, holder: str, now: float, seconds: float) -> bool:
        """Take or renew the lease `name` for `holder` until `now + seconds`: True if it is
        free, lapsed (its end is at or before `now`) or already `holder`'s; False, changing
        nothing, if another holder has it. Atomic across processes."""
        taken = json.dumps([holder, now + seconds])

        def take(old: str | None) -> str | None:
            if old is not None:
                held, end = json.loads(old)
                if held != holder and end > now:
                    return old
            return taken

        return self.update(_LEASE + name, take) == taken

    def release(self, name: str, holder: str) -> None:
        """Give up the lease `name` if `holder` has it (nothing happens otherwise)."""
        self.update(_LEASE + name, lambda old: None if old is not None and json.loads(old)[0] == holder else old)

    # --- What else a store's space holds, for `verify` and `list_threads` ---

    def foreign(self) -> list[str]:
        """Entries in the store's space (a directory, a database, a key prefix) that are not
        values of this store, which the listings show apart (the default knows of none)."""
        return []

    def stale_temp_files(self) -> list[str]:
        """Leftovers of writes that were killed midway, which the store removes in time."""
        return []

    # --- Async twins: a worker thread by default, overridden where a native API exists ---

    async def aread(self, key: str) -> str | None:
        return await asyncio.to_thread(self.read, key)

    async def aupdate(self, key: str, change: Change) -> str | None:
        return await asyncio.to_thread(self.update, key, change)

    async def adelete(self, key: str) -> None:
        await asyncio.to_thread(self.delete, key)

    async def akeys(self) -> list[str]:
        return await asyncio.to_thread(lambda: list(self.keys()))

    async def athread_keys(self) -> list[str]:
        return sorted(k for k in await self.akeys() if not k.startswith(RESERVED))  # (`akeys`: a store may have no sync side)

    async def asorted_keys(self, after: str | None = None, limit: int | None = None) -> list[str]:
        return await asyncio.to_thread(self.sorted_keys, after, limit)

    async def awrite(self, key: str, value: str) -> None:
        await self.aupdate(key, lambda _old: value)

    async def asetup(self) -> None:
        await asyncio.to_thread(self.setup)

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)

    async def aversion(self, key: str) -> Hashable | None:
        return await asyncio.to_thread(self.version, key)

    async def aupdate_versioned(self, key: str, change: Change) -> tuple[str | None, Hashable | None]:
        return await asyncio.to_thread(self.update_versioned, key, change)

    async def aappend_if(self, key: str, suffix: str, version: Hashable) -> Hashable | None:
        return await asyncio.to_thread(self.append_if, key, suffix, version)

    async def aappend_if_deferred(self, key: str, suffix: str, version: Hashable) -> Hashable | None:
        return await asyncio.to_thread(self.append_if_deferred, key, suffix, version)

    async def aflush(self, key: str) -> None:
        await asyncio.to_thread(self.flush, key)

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

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Store:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
