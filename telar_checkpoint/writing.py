"""The one write path: a typed change of one thread, appended to its string or rewritten whole.

Every change of a thread but a delete is one of three values: a `rules.Put` (a put), a
`WritesLine` (one task's pending writes) and a `RewriteThread` (a change of the whole string:
delete_for_runs, prune, copy, migration, import, trim, repair, upgrade). `Writer.write` (and
`awrite`) carries each the same way: take the thread's turn, edit, store, flush.

1. The thread's writers in this saver take turns (`Turns`): each starts from the history the
   one before it kept, so each appends. Other processes still race; the store settles that.
2. A put or writes is applied by the rules (`rules.apply`) to the history kept for the store's
   last version of the thread (`Histories`), and compaction decides `Append` or `Rewrite`.
   An `Append` is appended only if the store is still at that version (`Store.append_if`,
   or `Store.append_if_deferred`), where the store `keeps_versions`.
3. Otherwise (no kept history, a `Rewrite`, a `RewriteThread`, or the store moved on) the
   store updates the string atomically with the same change applied to what it holds
   (`update_versioned`, `Writer.applied`).
4. An append to a store that defers durability is flushed after the turn (group commit: the
   next writer appends while this one waits for the disk).

The one cache of parsed histories (`Histories`) lives here too: reads use it, writes keep it
current.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

from telar_checkpoint import forks
from telar_checkpoint.compaction import Append, edited
from telar_checkpoint.errors import TelarError
from telar_checkpoint.format import WritesLine
from telar_checkpoint.history import History
from telar_checkpoint.rules import Put, apply
from telar_checkpoint.steps import Steps, arun, call, run
from telar_checkpoint.stores.base import ABSENT, Store
from telar_checkpoint.thread_index import ThreadIndex

StringChange = Callable[[str | None], "str | None"]
STRIPES = 64  # the turns' locks a saver's writers share, by the thread id's hash
CACHED_THREADS = 4096  # parsed histories kept at most, for the most recently used threads
# ... and the characters of their histories at most (their memory is about twice that): a server's
# concurrent runs each find their thread kept (at 256 concurrent runs, 64 threads kept halved the
# throughput: each put read and parsed its whole thread again; benchmarks/results/load.md).
CACHED_CHARS = 32 * 1024 * 1024


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


@dataclass(slots=True, eq=False)
class _Kept:
    """What `Histories` keeps of one thread: the store's `version` of it (None: not known), the
    `history` parsed from or made for that version, and the text it stands for, when known:
    `text`, then the `suffixes` appended to it since (joined when next needed)."""

    version: Hashable | None
    history: History
    text: str | None
    suffixes: list[str] = field(default_factory=list)
    pending: int = 0  # characters in `suffixes`
    weight: int = 0  # the history's characters, as `Histories` counted them


class Histories:
    """The one cache of parsed histories: per thread, the store's version, the text and its
    parsed `History`, for the `size` most recently used threads, and no more than `chars`
    characters of histories in all (bounded, thread-safe).

    A read whose store version is the one kept reads nothing (`get`); a write builds on the
    history kept for the last version (`latest`). A text that is the one kept reuses its
    history, and one that extends it (another writer appended) parses only the new lines, into
    a copy (`parse`). A change never changes a history (see `rules.apply`), so readers in other
    threads go on using the one they have. Measured (benchmarks/results/ab.md): without the
    version a saver writing a thread alone is slower; without the text, two savers serving a
    thread in turn (as server replicas do) are 1.5-2.6 times slower."""

    def __init__(self, size: int = CACHED_THREADS, chars: int = CACHED_CHARS) -> None:
        self.size, self.chars = size, chars
        self._items: OrderedDict[str, _Kept] = OrderedDict()
        self._lock = threading.Lock()
        self._weight = 0  # the characters of the histories kept

    def _put(self, thread_id: str, new: _Kept) -> None:
        """Keep `new` as the thread's latest, and forget the least recently used beyond the bounds (under the lock)."""
        new.weight = new.history.size
        old = self._items.get(thread_id)
        self._weight += new.weight - (old.weight if old is not None else 0)
        self._items[thread_id] = new
        self._items.move_to_end(thread_id)
        while len(self._items) > self.size or (self._weight > self.chars and len(self._items) > 1):
            self._weight -= self._items.popitem(last=False)[1].weight

    def latest(self, thread_id: str) -> _Kept | None:
        """What is kept for the thread, current or not (on every write)."""
        with self._lock:
            kept = self._items.get(thread_id)
            if kept is not None:
                self._items.move_to_end(thread_id)
            return kept

    def get(self, thread_id: str, version: Hashable | None) -> History | None:
        """The history kept for the thread, if it is at `version`."""
        kept = self.latest(thread_id) if version is not None else None
        return kept.history if kept is not None and kept.version == version else None

    def parse(self, thread_id: str | None, text: str | None, version: Hashable | None = None) -> History:
        """The history of `text` (shared, read-only), kept with `version`: the store's version of
        that text, or None when it is not known (a read that raced a write)."""
        text = text or ""
        if thread_id is None or self.size <= 0:
            return History.parse(thread_id, text)
        kept, old = self._text(thread_id)
        if kept is not None and old is not None:
            if old is text or old == text:
                if version is not None and version != kept.version:
                    self.keep(thread_id, version, kept.history, text)
                return kept.history
            if kept.history.torn is None and old and text.startswith(old):
                history = kept.history.clone()
                history.extend(text[len(old):])
                self.keep(thread_id, version, history, text)
                return history
        history = History.parse(thread_id, text)
        self.keep(thread_id, version, history, text)
        return history

    def _text(self, thread_id: str) -> tuple[_Kept | None, str | None]:
        """What is kept for the thread, and the whole text it stands for (None: not known)."""
        with self._lock:
            kept = self._items.get(thread_id)
            if kept is None or kept.text is None:
                return kept, None
            if kept.suffixes:
                kept.text, kept.suffixes, kept.pending = kept.text + "".join(kept.suffixes), [], 0
            return kept, kept.text

    def keep(self, thread_id: str, version: Hashable | None, history: History, text: str | None) -> None:
        """Remember that the thread's `version` (None: not known) is `history`, parsed from or
        rendered to `text` (None: not known); nobody may change that history any more."""
        if self.size <= 0:
            return
        with self._lock:
            self._put(thread_id, _Kept(version, history, text))

    def appended(self, thread_id: str, kept: _Kept, version: Hashable, history: History, suffix: str) -> None:
        """The store appended `suffix` to the text of `kept`: its new `version` is `history`."""
        with self._lock:
            text, pending = kept.text, kept.pending + len(suffix)
            if text is not None and pending > len(text) + (1 << 16):
                text = None  # more appended than was read: the text is read again when needed (memory stays O(text))
            new = _Kept(version, history, text)
            if text is not None:
                kept.suffixes.append(suffix)  # (the old entry is no longer read for its text: the list moves on)
                new.suffixes, new.pending = kept.suffixes, pending
            self._put(thread_id, new)


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
    """The write path of one saver (see the module's docstring), and its cache of parsed histories."""

    def __init__(self, store: Store, index: ThreadIndex, keep_finished_calls: bool = False, turns: Turns | None = None) -> None:
        self.store, self.index, self.keep_finished_calls = store, index, keep_finished_calls
        self.versioned: Store | None = store if store.keeps_versions else None  # the store, when it has versions
        self.deferred: Store | None = store if store.defers_appends else None  # when it defers durability
        self.turns = turns or Turns()
        self.histories = Histories()

    def sharing_turns(self) -> Writer:
        """A writer for another saver on the same store (`with_allowlist`): the same turns and
        index, so that the two savers' writers of a thread take turns."""
        return Writer(self.store, self.index, self.keep_finished_calls, self.turns)

    def applied(self, thread_id: str, change: Change) -> StringChange:
        """`change` as a change of the stored string: the same edit, made on the history parsed
        from that string."""
        if isinstance(change, RewriteThread):
            return change

        def apply_to(old: str | None) -> str | None:
            history, made = apply(self.histories.parse(thread_id, old), change, keep_finished_calls=self.keep_finished_calls)
            new = edited(old, made)
            if new is not old:
                self.histories.keep(thread_id, None, history, new)
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
        kept = self.histories.latest(thread_id) if versioned is not None and type(change) is not RewriteThread else None
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
                        self.histories.appended(thread_id, kept, version, history, suffix)
                        return True
                else:
                    version = yield call(versioned.append_if, versioned.aappend_if, thread_id, suffix, kept.version)  # type: ignore[union-attr]
                    if version is not None:
                        self.histories.appended(thread_id, kept, version, history, suffix)
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
                self.histories.parse(thread_id, new, version)
            except TelarError:
                pass
        return False
