"""What a saver knows of each thread it has used: one record a thread, in one table.

A `ThreadRecord` holds the thread's stored text and the store's version of it (`Kept`), the
history parsed from that text, the index terms the saver recorded for the thread, the expiry
it last recorded or read for it, and whether it is stored at the saver's state schema version.
`ThreadRecords` keeps them for the most recently used threads, at most `KEPT_THREADS` threads
and `KEPT_CHARS` characters of text, dropping the least recently used first; a thread deleted
or rewritten whole is forgotten in one call (`forget`).

A parsed history is hundreds of objects a thread (the dicts and lists of its decoded lines),
and the cyclic garbage collector walks every one of them at each full collection, which
stops every thread and the event loop meanwhile. Text it does not walk. So the parsed
histories are kept for the threads in use only (`PARSED_SECONDS`, `PARSED_LINES`); a thread
idle longer keeps its text, parsed again when next used (no read of the store).
Measured in benchmarks/results/collector-before.md and collector-after.md; why the text and
the version are kept at all in `Kept`'s docstring.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from telar_checkpoint.history import History

if TYPE_CHECKING:
    from telar_checkpoint.codec import CheckpointCodec
    from telar_checkpoint.steps import Steps
    from telar_checkpoint.stores.base import Change

KEPT_THREADS = 4096  # threads a saver keeps a record of, the most recently used
# ... and the characters of their texts at most (their memory is about twice that): a server's
# concurrent runs each find their thread kept (at 256 concurrent runs, 64 threads kept halved the
# throughput: each put read and parsed its whole thread again; benchmarks/results/load.md).
KEPT_CHARS = 32 * 1024 * 1024
# Parsed histories are kept for the threads in use: those used in the last `PARSED_SECONDS`
# (a run writes its thread every few hundred ms, under load too), within `PARSED_LINES` lines in
# all (about 11 objects the collector walks a line); a thread idle longer keeps its text only.
# A bound in count alone cannot serve both a server's runs and its idle threads: 8,192 lines made
# a full collection 2.1-2.7x InMemorySaver's with 2,000 threads of a 5-turn chat kept
# (collector-after-8192-lines.md), and 64 threads (collector-after-64-threads.md) made 256
# concurrent runs 0.26x as fast as InMemorySaver (each write parsed its thread again; 0.80x when
# all were kept, 0.78x with this rule). With it: collector-after.md, 0.76x.
PARSED_SECONDS = 1.0
PARSED_LINES = 64 * 1024

ExpiryMemo = tuple[float | None, float | None, float]
"""What a saver knows of a thread's expiry in the store: (the expiry, the time-to-live in
seconds it was recorded for, the last time a write leaves that expiry enough), see `lifetime`."""


@dataclass(slots=True, eq=False)
class Kept:
    """The thread's stored string at the store's `version` (None: not known): its `history`
    (None: not parsed, or no longer: parse `text`) and the text it stands for, when known:
    `text`, then the `suffixes` appended to it since (joined when next needed). Never changed
    once made but for the joining: a write makes a new one, so readers go on using theirs.

    Measured (benchmarks/results/ab.md): without the version a saver writing a thread alone
    is slower; without the text, two savers serving a thread in turn (as server replicas do)
    are 1.5-2.6 times slower."""

    version: Hashable | None
    history: History | None
    text: str | None
    suffixes: list[str] | None = None  # (None until something is appended: a list is an object the collector walks)
    pending: int = 0  # characters in `suffixes`
    latest: str | None = None  # once not parsed: `History.latest_alone` of the history, when there is one


@dataclass(slots=True, eq=False)
class ThreadRecord:
    """What a saver knows of one thread (see the module's docstring)."""

    kept: Kept | None = None
    terms: tuple[str, ...] = ()  # index terms the saver recorded for the thread (a tuple: the collector stops walking it)
    expiry: ExpiryMemo | None = None
    schema_current: bool = False  # stored at the schema's version (its writes need no upgrade first)
    upgraded: tuple[History, History] | None = None  # (a history read, as the schema reads it)
    chars: int = 0  # the characters counted for it in the table's bound
    lines: int = 0  # the parsed lines counted for it (0: none kept parsed)


class ThreadRecords:
    """The records of the most recently used threads (thread-safe, bounded: see the module).

    A thread's string is kept in one of three forms, each lighter than the one before: parsed
    (its `History`, and its text), its text alone, or its latest checkpoint alone
    (`History.latest_alone`, which a `get_tuple` of the latest checkpoint reads). Beyond
    `parsed_seconds` idle (by `clock`) or `parsed_lines` lines in all, the least recently used
    parsed threads keep their text; beyond `chars`, the least recently used texts give way to their latest
    checkpoint alone; beyond `threads`, the least recently used records go."""

    def __init__(
        self, threads: int = KEPT_THREADS, chars: int = KEPT_CHARS, parsed_lines: int = PARSED_LINES,
        parsed_seconds: float = PARSED_SECONDS, clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.threads, self.chars, self.parsed_lines, self.parsed_seconds = threads, chars, parsed_lines, parsed_seconds
        self.clock = clock
        # Least recently used first: every record, those whose kept string holds its text, and
        # those that hold its history (with when each was last used, by `clock`).
        self._records: OrderedDict[str, ThreadRecord] = OrderedDict()
        self._texts: OrderedDict[str, None] = OrderedDict()
        self._parsed: OrderedDict[str, float] = OrderedDict()
        self._lock = threading.Lock()
        self._chars = self._lines = 0

    # --- the table (under the lock) -------------------------------------------------------

    def _record(self, thread_id: str) -> ThreadRecord:
        """The thread's record, made if missing, now the most recently used."""
        record = self._records.get(thread_id)
        if record is None:
            record = self._records[thread_id] = ThreadRecord()
            while len(self._records) > self.threads:
                self._drop(*self._records.popitem(last=False))
        else:
            self._records.move_to_end(thread_id)
        return record

    def _drop(self, thread_id: str, record: ThreadRecord) -> None:
        """Stop counting a record that left the table."""
        self._count(thread_id, record, None)

    def _count(self, thread_id: str, record: ThreadRecord, kept: Kept | None) -> None:
        """Make `kept` the record's, counted in the bounds and placed in the orders of its form."""
        record.kept = kept
        if kept is None or kept.history is None:
            record.upgraded = None  # (it holds the history that goes)
        chars = lines = 0
        if kept is not None:
            chars = (len(kept.text) + kept.pending if kept.text is not None else 0) + len(kept.latest or "")
            lines = kept.history.line_count + 1 if kept.history is not None else 0
        self._chars += chars - record.chars
        self._lines += lines - record.lines
        record.chars, record.lines = chars, lines
        if kept is not None and kept.text is not None:
            self._texts[thread_id] = None
            self._texts.move_to_end(thread_id)
        else:
            self._texts.pop(thread_id, None)
        if lines:
            self._parsed[thread_id] = self.clock()
            self._parsed.move_to_end(thread_id)
        else:
            self._parsed.pop(thread_id, None)

    def _set_kept(self, thread_id: str, kept: Kept | None) -> None:
        """Make `kept` the thread's, the most recently used, then bring the table within its
        bounds, the least recently used threads first (see the class's docstring)."""
        if self.threads <= 0:
            return
        self._count(thread_id, self._record(thread_id), kept)
        idle = self.clock() - self.parsed_seconds
        while len(self._parsed) > 1 and (self._lines > self.parsed_lines or next(iter(self._parsed.values())) < idle):
            self._lighten(next(iter(self._parsed)), keep_text=True)
        while self._chars > self.chars and len(self._texts) > 1:
            self._lighten(next(iter(self._texts)), keep_text=False)
        while self._chars > self.chars and len(self._records) > 1:
            self._drop(*self._records.popitem(last=False))

    def _lighten(self, thread_id: str, keep_text: bool) -> None:
        """Keep the thread's string in a lighter form: without its history, with its text (when
        known and `keep_text`) and its latest checkpoint alone; nothing when neither is left."""
        record = self._records[thread_id]
        old = record.kept
        assert old is not None
        latest = old.history.latest_alone() if old.history is not None else old.latest
        text = self._joined(old) if keep_text else None
        self._count(thread_id, record, Kept(old.version, None, text, latest=latest) if text is not None or latest else None)

    def forget(self, thread_id: str) -> None:
        """Forget all that is known of the thread (deleted, or rewritten whole)."""
        with self._lock:
            record = self._records.pop(thread_id, None)
            if record is not None:
                self._drop(thread_id, record)

    def clear(self) -> None:
        """Forget every thread."""
        with self._lock:
            for thread_id, record in list(self._records.items()):
                self._drop(thread_id, record)
            self._records.clear()

    # --- the thread's string and history ------------------------------------------------

    def latest(self, thread_id: str) -> Kept | None:
        """What is kept of the thread, current or not, parsed (on every write); None when its
        text is not kept. A thread kept as text is parsed now; one whose text is damaged is
        forgotten (read again, and its error raised, when used)."""
        with self._lock:
            record = self._records.get(thread_id)
            kept = record.kept if record is not None else None
            if record is None or kept is None or (kept.history is None and kept.text is None):
                return None
            self._touch(thread_id, record)
            if kept.history is not None:
                return kept
            text = self._joined(kept)
        try:
            history = History.parse(thread_id, text)
        except Exception:
            self.forget(thread_id)
            return None
        kept = Kept(kept.version, history, text)
        with self._lock:
            record = self._records.get(thread_id)
            if record is not None and record.kept is not None and record.kept.version == kept.version:
                self._set_kept(thread_id, kept)
        return kept

    def get(self, thread_id: str, version: Hashable | None, latest: bool = False) -> History | None:
        """The history kept for the thread, if it is at `version`. `latest`: only its latest
        checkpoint is read, so a thread kept without its history may give the history of that
        checkpoint alone (`History.latest_alone`), parsed now and not kept, rather than be
        parsed whole."""
        if version is None:
            return None
        with self._lock:
            record = self._records.get(thread_id)
            kept = record.kept if record is not None else None
            if record is None or kept is None or kept.version != version:
                return None
            self._touch(thread_id, record)
            if kept.history is not None:
                return kept.history
            if latest and kept.latest is not None:
                alone = kept.latest
            elif kept.text is None:
                return None
            else:
                alone, text = None, self._joined(kept)
        if alone is not None:
            return History.parse(thread_id, alone)
        return self.parse(thread_id, text, version)

    def _touch(self, thread_id: str, record: ThreadRecord) -> None:
        """The thread, holding `record`, is now the most recently used (under the lock)."""
        self._records.move_to_end(thread_id)
        if record.chars and thread_id in self._texts:
            self._texts.move_to_end(thread_id)
        if record.lines:
            self._parsed[thread_id] = self.clock()
            self._parsed.move_to_end(thread_id)

    def parse(self, thread_id: str | None, text: str | None, version: Hashable | None = None) -> History:
        """The history of `text` (shared, read-only), kept with `version`: the store's version of
        that text, or None when it is not known (a read that raced a write). A text that is the
        one kept reuses its history, and one that extends it (another writer appended) parses
        only the new lines, into a copy."""
        text = text or ""
        if thread_id is None or self.threads <= 0:
            return History.parse(thread_id, text)
        with self._lock:
            record = self._records.get(thread_id)
            kept = record.kept if record is not None else None
            old = self._joined(kept) if kept is not None else None
        if kept is not None and old is not None and kept.history is not None:
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

    def _joined(self, kept: Kept) -> str | None:
        """The whole text `kept` stands for (None: not known), its suffixes joined (under the lock)."""
        if kept.text is not None and kept.suffixes:
            kept.text, kept.suffixes, kept.pending = kept.text + "".join(kept.suffixes), None, 0
        return kept.text

    def keep(self, thread_id: str, version: Hashable | None, history: History, text: str | None) -> None:
        """Remember that the thread's `version` (None: not known) is `history`, parsed from or
        rendered to `text` (None: not known); nobody may change that history any more."""
        with self._lock:
            self._set_kept(thread_id, Kept(version, history, text))

    def appended(self, thread_id: str, kept: Kept, version: Hashable, history: History, suffix: str) -> None:
        """The store appended `suffix` to the text of `kept`: its new `version` is `history`."""
        with self._lock:
            text, pending = kept.text, kept.pending + len(suffix)
            if text is not None and pending > len(text) + (1 << 16):
                text = None  # more appended than was read: the text is read again when needed (memory stays O(text))
            new = Kept(version, history, text)
            if text is not None:
                if kept.suffixes is None:
                    kept.suffixes = []
                kept.suffixes.append(suffix)  # (the old one is no longer read for its text: the list moves on)
                new.suffixes, new.pending = kept.suffixes, pending
            self._set_kept(thread_id, new)

    # --- what else the saver knows of the thread -----------------------------------------

    def terms(self, thread_id: str) -> tuple[str, ...]:
        """The index terms the saver recorded for the thread (as far as it remembers)."""
        record = self._records.get(thread_id)
        return record.terms if record is not None else ()

    def add_terms(self, thread_id: str, terms: set[str] | frozenset[str]) -> None:
        with self._lock:
            record = self._record(thread_id)
            record.terms = tuple({*record.terms, *terms})

    def clear_terms(self, thread_id: str | None = None) -> None:
        """Forget the terms recorded for the thread (None: for every thread)."""
        with self._lock:
            for record in self._records.values() if thread_id is None else filter(None, [self._records.get(thread_id)]):
                record.terms = ()

    def expiry(self, thread_id: str) -> ExpiryMemo | None:
        record = self._records.get(thread_id)
        return record.expiry if record is not None else None

    def set_expiry(self, thread_id: str, memo: ExpiryMemo | None) -> None:
        with self._lock:
            if memo is not None or thread_id in self._records:
                self._record(thread_id).expiry = memo

    def schema_current(self, thread_id: str) -> bool:
        record = self._records.get(thread_id)
        return record is not None and record.schema_current

    def set_schema_current(self, thread_id: str, current: bool) -> None:
        with self._lock:
            if current or thread_id in self._records:
                self._record(thread_id).schema_current = current

    def upgraded(self, thread_id: str, history: History) -> History | None:
        """The history as the schema reads it, when it was upgraded since it was read."""
        record = self._records.get(thread_id)
        pair = record.upgraded if record is not None else None
        return pair[1] if pair is not None and pair[0] is history else None

    def set_upgraded(self, thread_id: str, history: History, upgraded: History) -> None:
        with self._lock:
            self._record(thread_id).upgraded = (history, upgraded)


class SaverThreads(Protocol):
    """What a saver's thread policies (`state_schema.SchemaThreads`, `lifetime.Lifetime`) ask of it: a
    thread's history as stored, and its one whole-thread write, sync and async, in turn with its
    other writers (`TelarSaver.rewrite`). A protocol, so that they import no saver."""

    codec: CheckpointCodec

    def _stored_steps(self, thread_id: str) -> Steps[History]: ...

    def rewrite(self, thread_id: str, change: Change, *, text: str | None = None) -> str | None: ...

    async def arewrite(self, thread_id: str, change: Change, *, text: str | None = None) -> str | None: ...
