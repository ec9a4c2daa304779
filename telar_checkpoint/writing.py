"""The one write path: a typed change of one thread, appended to its string or rewritten whole.

Every change of a thread is one of three values: a `rules.Put` (a put), a `WritesLine` (one
task's pending writes) and a `RewriteThread` (a change of the whole string: delete_thread,
delete_for_runs, prune, copy, migration, import, trim, repair, upgrade, an expiry). `Writer.write` (and
`awrite`) carries each the same way: take the thread's turn, edit, store, flush.

1. The thread's writers in this saver take turns (`Turns`): each starts from the history the
   one before it kept, so each appends. Other processes still race; the store settles that.
2. A put or writes is applied by the rules (`rules.apply`) to the history kept for the store's
   last version of the thread (`threads.ThreadRecords`), and compaction decides `Append` or `Rewrite`.
   An `Append` is appended only if the store is still at that version (`Store.append_if`,
   or `Store.append_if_deferred`), where the store `keeps_versions`.
3. Otherwise (no kept history, a `Rewrite`, a `RewriteThread`, or the store moved on) the
   store updates the string atomically with the same change applied to what it holds
   (`update_versioned`, `Writer.applied`).
4. An append to a store that defers durability is flushed after the turn (group commit: the
   next writer appends while this one waits for the disk).

What the saver keeps of each thread's string and history (`threads.ThreadRecords`): reads use
it, writes keep it current.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Callable
from typing import Protocol

from telar_checkpoint import forks
from telar_checkpoint.compaction import Append, edited
from telar_checkpoint.errors import TelarError
from telar_checkpoint.format import WritesLine
from telar_checkpoint.history import History
from telar_checkpoint.rules import Put, apply
from telar_checkpoint.steps import Steps, arun, call, run
from telar_checkpoint.stores.base import ABSENT, Store
from telar_checkpoint.thread_index import ThreadIndex
from telar_checkpoint.threads import ThreadRecords

StringChange = Callable[[str | None], "str | None"]
STRIPES = 64  # the turns' locks a saver's writers share, by the thread id's hash


class RewriteThread:
    """A change of the thread's whole string, `change(old) -> new` (None: no thread). `terms`:
    the index terms of the string it writes, when known before (recorded first). Its error is
    kept for its own caller (`result`)."""

    def __init__(self, change: StringChange, terms: set[str] | None = None) -> None:
        self.change, self.terms = change, terms
        self.new: str | None = None
        self.error: Exception | None = None

    def __call__(self, old: str | None) -> str | None:
        self.error = None  # a store may call a change again, on what another writer stored
        try:
            self.new = self.change(old)
        except Exception as exc:
            self.error = exc
            return old
        return self.new

    def result(self) -> str | None:
        if self.error is not None:
            raise self.error
        return self.new


Change = Put | WritesLine | RewriteThread


class ThreadPolicy(Protocol):
    """What a saver does for its threads beside storing them (`state_schema.SchemaThreads`,
    `lifetime.Lifetime`): steps on every read of a thread, before and after every put or writes
    of it, made at `now` by the saver's clock (the saver's one write route,
    `TelarSaver._write`). A hook with nothing to do returns None, so a write with nothing
    to do for any policy runs none of their steps; `after_write` is asked only of a policy
    that had steps before the write (one with nothing to do before has nothing after)."""

    def read_steps(self, thread_id: str, history: History) -> Steps[History]: ...

    def before_write(self, thread_id: str, now: float) -> Steps[None] | None: ...

    def after_write(self, thread_id: str, now: float) -> Steps[None] | None: ...


class Turns:
    """The turns of one saver's writers: a `threading.Lock` per stripe for sync writers, and an
    `asyncio.Lock` per stripe and event loop. Striped (`STRIPES`, chosen by the thread id's
    hash), so memory stays bounded however many threads a saver writes; two threads that share
    a stripe only wait for each other a little. A forked child starts afresh, seen by its pid
    (`forks.pid`): the parent's writers and what they held are not the child's."""

    def __init__(self, stripes: int = STRIPES) -> None:
        self._stripes = stripes
        self._reset()

    def _reset(self) -> None:
        self._pid = forks.pid
        self._sync = [threading.Lock() for _ in range(self._stripes)]
        self._async: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[asyncio.Lock]] = weakref.WeakKeyDictionary()
        self._guard = threading.Lock()

    def sync(self, thread_id: str) -> threading.Lock:
        """The lock sync writers of `thread_id` hold while they write."""
        if self._pid != forks.pid:  # forked: the parent's turns (and what held them) are not ours
            self._reset()
        return self._sync[hash(thread_id) % self._stripes]

    def async_(self, thread_id: str) -> asyncio.Lock:
        """The lock async writers of `thread_id` in the running event loop hold while they write."""
        if self._pid != forks.pid:
            self._reset()
        loop = asyncio.get_running_loop()
        locks = self._async.get(loop)
        if locks is None:
            with self._guard:
                locks = self._async.setdefault(loop, [asyncio.Lock() for _ in range(self._stripes)])
        return locks[hash(thread_id) % self._stripes]


class Writer:
    """The write path of one saver (see the module's docstring), on the records of its threads."""

    def __init__(self, store: Store, index: ThreadIndex, records: ThreadRecords, keep_finished_calls: bool = False) -> None:
        self.store, self.index, self.records, self.keep_finished_calls = store, index, records, keep_finished_calls
        self.versioned: Store | None = store if store.keeps_versions else None  # the store, when it has versions
        self.deferred: Store | None = store if store.defers_appends else None  # when it defers durability
        self.turns = Turns()

    def applied(self, thread_id: str, change: Change) -> StringChange:
        """`change` as a change of the stored string: the same edit, made on the history parsed
        from that string."""
        if isinstance(change, RewriteThread):
            return change

        def apply_to(old: str | None) -> str | None:
            history, made = apply(self.records.parse(thread_id, old), change, keep_finished_calls=self.keep_finished_calls)
            new = edited(old, made)
            if new is not old:
                self.records.keep(thread_id, None, history, new)
            return new

        return apply_to

    def write(self, thread_id: str, change: Change) -> None:
        """Take the thread's turn, edit, store; then flush an append the store deferred."""
        with self.turns.sync(thread_id):
            unflushed = run(self._store_steps(thread_id, change))
        if unflushed:
            self.deferred.flush(thread_id)  # type: ignore[union-attr]  # unflushed: the store defers

    async def awrite(self, thread_id: str, change: Change) -> None:
        """`write`, for coroutines of one event loop."""
        async with self.turns.async_(thread_id):
            unflushed = await arun(self._store_steps(thread_id, change))
        if unflushed:
            await self.deferred.aflush(thread_id)  # type: ignore[union-attr]

    def _store_steps(self, thread_id: str, change: Change) -> Steps[bool]:
        """Append the change's lines if the store is at the version of the kept history, else
        update whole; whether the append awaits the store's flush (a store that defers).

        A put's index terms are recorded first: those this saver has not recorded for the
        thread before an append; all of them before an update, as the thread may have been
        deleted, and its terms with it, since. Nothing is asked of the store before the edit:
        `append_if` only appends if the store is still at that version, so a stale history costs
        a retry; a thread this saver read as holding nothing is kept at version `ABSENT`, and its
        first write creates it in one step where the store can (else it updates). An error of the
        edit (a put that would make a cycle) is raised before any write."""
        versioned, indexed = self.versioned, self.index.indexed
        terms = None if type(change) is WritesLine else change.terms  # type: ignore[union-attr]
        kept = self.records.latest(thread_id) if versioned is not None and type(change) is not RewriteThread else None
        if kept is not None and kept.version is not None:
            history, made = apply(kept.history, change, keep_finished_calls=self.keep_finished_calls)  # type: ignore[arg-type]
            if type(made) is Append:
                # (all of a thread read as absent: it may have been deleted, and its terms with it, since recorded)
                if terms and indexed is not None and (new := terms if kept.version is ABSENT else self.index.new_terms(thread_id, terms)):
                    yield call(indexed.index, indexed.aindex, thread_id, new)
                    self.index.recorded(thread_id, new)
                suffix = made.text
                if not suffix:  # nothing to store, if the store is still where the history was kept
                    if (yield call(versioned.version, versioned.aversion, thread_id)) == kept.version:  # type: ignore[union-attr]
                        return False
                elif (deferred := self.deferred) is not None:
                    version = yield call(deferred.append_if_deferred, deferred.aappend_if_deferred, thread_id, suffix, kept.version)
                    if version is not None:
                        self.records.appended(thread_id, kept, version, history, suffix)
                        return True
                else:
                    version = yield call(versioned.append_if, versioned.aappend_if, thread_id, suffix, kept.version)  # type: ignore[union-attr]
                    if version is not None:
                        self.records.appended(thread_id, kept, version, history, suffix)
                        return False
        if terms and indexed is not None:
            yield call(indexed.index, indexed.aindex, thread_id, terms)
            self.index.recorded(thread_id, terms)
        applied = self.applied(thread_id, change)
        if versioned is None:
            store = self.store
            yield call(store.update, store.aupdate, thread_id, applied)
            return False
        new, version = yield call(versioned.update_versioned, versioned.aupdate_versioned, thread_id, applied)
        if new is not None and version is not None:
            try:  # a damaged history, which only a rewrite leaves, is not kept: it is read again, and its error raised, when used
                self.records.parse(thread_id, new, version)
            except TelarError:
                pass
        return False
