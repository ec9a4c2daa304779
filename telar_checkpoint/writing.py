"""The one write path: a typed change of one thread, appended to its string or rewritten whole.

Every change of a thread but a delete is one of three values: `PutCheckpoint` (a put),
`PutWrites` (a task's pending writes) and `RewriteThread` (a change of the whole string:
delete_for_runs, prune, copy, migration, import, trim, repair, upgrade). `Writer.write` (and
`awrite`) carries each the same way:

1. The thread's writers in this saver take turns (`writer_locks.Turns`).
2. A put or writes is an edit of the history kept from the store's last version of the thread
   (`change.edit`: the rules, `rules.apply`, and compaction decide `Append` or `Rewrite`). An
   `Append` is appended only if the store is still at that version (`Versioned.append_if`, or
   `DeferredAppends.append_if_deferred`).
3. Otherwise (no kept history, a `Rewrite`, a `RewriteThread`, or the store moved on) the
   store updates the string atomically with the same change applied to what it holds
   (`update_versioned`, `Writer.applied`).
4. An append to a store that defers durability is flushed after the turn (group commit).

A change is a value, never changed once made (by convention: `PutCheckpoint` and `PutWrites`
are not frozen dataclasses, whose init costs twice as much, on every write).

Pending writes may wait for the put that follows them and be appended with its line in one
store write (`Batch`, `Lingers`). The caches of parsed histories (`VersionedHistories` by the
store's version, `ParseCache` by text) live here too: reads use them, writes keep them current.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import cast

from telar_checkpoint.codec import CheckpointCodec, PreparedRecord
from telar_checkpoint.compaction import Edit, Rewrite, edited
from telar_checkpoint.errors import TelarError
from telar_checkpoint.format import WritesLine
from telar_checkpoint.history import History
from telar_checkpoint.parse_cache import ParseCache, VersionedHistories
from telar_checkpoint.steps import Steps, arun, call, run
from telar_checkpoint.stores.base import Store, Versioned
from telar_checkpoint.stores.group_commit import DeferredAppends
from telar_checkpoint.thread_index import ThreadIndex
from telar_checkpoint.writer_locks import AsyncTurns, Batch, Lingers, Turns, WriterLocks, carrying

_Lines = tuple[Hashable, History, str]  # what to append: the version it needs, the history it makes, the text
StringChange = Callable[[str | None], "str | None"]


@dataclass(slots=True)
class PutCheckpoint:
    """A put: its record with the values encoded when the put was given (`CheckpointCodec.prepare`),
    and the index `terms` of its metadata (None: the store keeps no index)."""

    codec: CheckpointCodec
    prepared: PreparedRecord
    max_history: int | None
    terms: set[str] | None = None

    def edit(self, history: History) -> tuple[History, Edit]:
        return self.codec.put_edit(history, self.prepared, self.max_history)


@dataclass(slots=True)
class PutWrites:
    """One task's pending writes, their values encoded when they were given: the `WritesLine`
    that is stored (or the part of it that changes something)."""

    codec: CheckpointCodec
    line: WritesLine

    def edit(self, history: History) -> tuple[History, Edit]:
        return self.codec.writes_edit(history, self.line)


class RewriteThread:
    """A change of the thread's whole string, `change(old) -> new` (None: no thread). `terms`:
    the index terms of the string it writes, when known before (recorded first). Its error is
    kept for its own caller (`result`), so that the writes carried with it are stored all the same."""

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


Change = PutCheckpoint | PutWrites | RewriteThread


class Writer:
    """The write path of one saver (see the module's docstring), and its caches of parsed histories."""

    def __init__(
        self, store: Store, index: ThreadIndex, lingers: Lingers, locks: WriterLocks | None = None
    ) -> None:
        self.store, self.index, self.lingers = store, index, lingers
        self.versioned: Versioned | None = store if isinstance(store, Versioned) else None  # the store, when it has versions
        self.deferred: DeferredAppends | None = store if isinstance(store, DeferredAppends) else None  # when it defers durability
        self.locks = locks or WriterLocks()
        self.histories = VersionedHistories()  # parsed histories by the store's version: a hit reads nothing
        self.parses = ParseCache()  # by the text last given or made: a retried update parses only what is new

    def sharing_turns(self) -> Writer:
        """A writer for another saver on the same store (`with_allowlist`): the same turns,
        lingers and index, so that the two savers' writers of a thread take turns."""
        return Writer(self.store, self.index, self.lingers, self.locks)

    def applied(self, thread_id: str, change: Change) -> StringChange:
        """`change` as a change of the stored string: the same edit, made on the history last
        parsed or made from that string."""
        if isinstance(change, RewriteThread):
            return change

        def apply(old: str | None) -> str | None:
            history, edit = change.edit(self.parses.parse(thread_id, old))
            new = edited(old, edit)
            if new is not old:
                self.parses.keep(thread_id, new, history)
            return new

        return apply

    def kept(self, thread_id: str, new: str | None, version: Hashable | None) -> None:
        """Keep the history an update stored (a damaged one, which only a rewrite leaves, is
        not kept: it is read again, and its error raised, when it is next used)."""
        if new is not None and version is not None:
            try:
                self.histories.keep(thread_id, version, self.parses.parse(thread_id, new))
            except TelarError:
                pass

    # --- the turn ----------------------------------------------------------------------

    def write(self, thread_id: str, change: Change) -> None:
        """Append the change's lines when the kept history is current, else update whole.

        Writers of the thread take turns until their lines are appended; each then waits
        for the disk on its own, so the next one can append meanwhile. Pending writes
        may linger (see `Lingers`): LangGraph puts the step's checkpoint right after
        them, so they wait, as a `Batch`, for that put to append them with its own line
        in one store write. The store's group commit makes appends durable: one flush
        serves every writer whose append came before it."""
        turns = self.locks.sync(thread_id)
        with turns.lock:
            linger = self.lingers.wrote(thread_id, writes=isinstance(change, PutWrites))
            joined = self._join(turns, thread_id, change) if linger else None
            if joined is None:
                carried, lines = self._take(turns, thread_id, change)
                unflushed = run(self._store_steps(thread_id, carried, lines, change))
        if joined is None:
            if carried is not None or unflushed:
                run(self._flush_steps(thread_id, carried, unflushed))
            return
        done = cast(threading.Event, joined.done)
        if not done.wait(linger):
            with turns.lock:
                mine = turns.batches.get(thread_id) is joined  # nobody came: write it ourselves
                if mine:
                    carried, lines = self._take(turns, thread_id, None)
                    unflushed = run(self._store_steps(thread_id, carried, lines, None))
            if mine and (carried is not None or unflushed):
                run(self._flush_steps(thread_id, carried, unflushed))
            done.wait()
        joined.result()

    async def awrite(self, thread_id: str, change: Change) -> None:
        """`write`, for coroutines of one event loop."""
        turns = self.locks.async_(thread_id)
        async with turns.lock:
            linger = self.lingers.wrote(thread_id, writes=isinstance(change, PutWrites))
            joined = self._join(turns, thread_id, change) if linger else None
            if joined is None:
                carried, lines = self._take(turns, thread_id, change)
                unflushed = await arun(self._store_steps(thread_id, carried, lines, change))
        if joined is None:
            if carried is not None or unflushed:
                await arun(self._flush_steps(thread_id, carried, unflushed))
            return
        adone = cast(asyncio.Event, joined.done)
        try:
            await asyncio.wait_for(adone.wait(), linger)
        except asyncio.TimeoutError:
            async with turns.lock:
                mine = turns.batches.get(thread_id) is joined
                if mine:
                    carried, lines = self._take(turns, thread_id, None)
                    unflushed = await arun(self._store_steps(thread_id, carried, lines, None))
            if mine and (carried is not None or unflushed):
                await arun(self._flush_steps(thread_id, carried, unflushed))
            await adone.wait()
        joined.result()

    def _join(self, turns: Turns | AsyncTurns, thread_id: str, change: PutCheckpoint | PutWrites | RewriteThread) -> Batch | None:
        """Leave the change with the thread's `Batch` for the next writer to append (see
        `Lingers`); None when there is no kept history to build its lines on."""
        if isinstance(change, RewriteThread):
            return None
        batch = turns.batches.get(thread_id)
        if batch is None:
            cached = self.histories.latest(thread_id)
            if cached is None or cached[1].must_rewrite:
                return None
            batch = Batch(cached[0], cached[1], turns.event())
        if batch.history is not None:
            history, edit = change.edit(batch.history)  # an error leaves the batch as it was
            if isinstance(edit, Rewrite):
                batch.history = None  # the batch goes the slow way
            else:
                batch.history, batch.text = history, batch.text + edit.text
        batch.changes.append(change)
        turns.batches[thread_id] = batch
        return batch

    def _take(self, turns: Turns | AsyncTurns, thread_id: str, change: Change | None) -> tuple[Batch | None, _Lines | None]:
        """The thread's waiting batch (taken from the turns) and the lines to append for it and
        `change` (None: the batch alone), with the version they need and the history they make;
        lines None: take the slow path (a rewrite, or no kept history). Nothing is asked of the
        store: `append_if` only appends if the store is still at that version, so a stale history
        costs a retry. An error of the change's edit leaves the batch for the next writer."""
        carried = turns.batches.get(thread_id)
        lines: _Lines | None = None
        if not isinstance(change, RewriteThread):
            if carried is not None:
                if carried.history is not None:
                    lines = carried.version, carried.history, carried.text
            elif (cached := self.histories.latest(thread_id)) is not None:
                lines = cached[0], cached[1], ""
            if lines is not None and change is not None:
                version, history, text = lines
                history, edit = change.edit(history)
                lines = None if isinstance(edit, Rewrite) else (version, history, text + edit.text)
        turns.batches.pop(thread_id, None)
        return carried, lines

    def _applied_all(self, thread_id: str, carried: Batch | None, change: Change | None) -> StringChange:
        """The carried batch's changes and this one, as one change of the stored string."""
        changes = [self.applied(thread_id, c) for c in (*(carried.changes if carried is not None else ()), change) if c is not None]
        if len(changes) == 1:
            return changes[0]

        def apply(old: str | None) -> str | None:
            for each in changes:
                old = each(old)
            return old

        return apply

    def _store_steps(self, thread_id: str, carried: Batch | None, lines: _Lines | None, change: Change | None) -> Steps[bool]:
        """Append `lines` if the store is at their version, else update whole; whether the write
        awaits the store's flush (an append to a store that defers, see `_flush_steps`). A failure
        fails the carried batch too.
        A put's index terms are recorded first (those this saver has not recorded for the thread
        before an append; all of them before an update, as the thread may have been deleted, and
        its terms with it, since), inside the turn: a write lingering for this put is carried, not
        left to time out."""
        store, versioned, deferred, indexed = self.store, self.versioned, self.deferred, self.index.indexed
        terms = change.terms if isinstance(change, (PutCheckpoint, RewriteThread)) else None
        try:  # (not `with carrying(carried)`: no call of ours when no batch is carried, on every write)
            if lines is not None and versioned is not None:
                version, history, suffix = lines
                if terms and indexed is not None and (new := self.index.new_terms(thread_id, terms)):
                    yield call(indexed.index, indexed.aindex, thread_id, new)
                    self.index.recorded(thread_id, new)
                if not suffix and (yield call(versioned.version, versioned.aversion, thread_id)) == version:
                    return False
                new_version = None
                if suffix and deferred is not None:
                    new_version = yield call(deferred.append_if_deferred, deferred.aappend_if_deferred, thread_id, suffix, version)
                elif suffix:
                    new_version = yield call(versioned.append_if, versioned.aappend_if, thread_id, suffix, version)
                if new_version is not None:
                    self.histories.keep(thread_id, new_version, history)
                    return deferred is not None
            if terms and indexed is not None:
                yield call(indexed.index, indexed.aindex, thread_id, terms)
                self.index.recorded(thread_id, terms)
            applied = self._applied_all(thread_id, carried, change)
            if versioned is None:
                yield call(store.update, store.aupdate, thread_id, applied)
            else:
                self.kept(thread_id, *(yield call(versioned.update_versioned, versioned.aupdate_versioned, thread_id, applied)))
        except BaseException as exc:
            if carried is not None:  # its writers get this write's error
                carried.finish(exc)
            raise
        return False

    def _flush_steps(self, thread_id: str, carried: Batch | None, unflushed: bool) -> Steps[None]:
        """Make an `unflushed` append durable, then let the writers of the batch it carried return
        (run only when there is either: a lone durable write has nothing to do here)."""
        with carrying(carried, finish=True):
            if unflushed and self.deferred is not None:
                yield call(self.deferred.flush, self.deferred.aflush, thread_id)
