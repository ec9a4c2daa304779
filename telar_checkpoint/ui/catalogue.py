"""The thread list of the viewer: every thread of a store as a small row, read in the background.

A store holds no "last update" to sort by, and reading 100,000 threads takes longer than a page
may: the catalogue reads them on a thread of its own, one at a time, and a page shows the rows
read so far (and says how far it is). A new reading starts when a page is asked for after
`refresh` seconds; the rows of the last one serve until it ends. Per thread it keeps its row
and the terms of its checkpoints' metadata (`thread_index.history_terms`), so that a search by
metadata reads only the threads that hold every term of the filter, then checks each as
`list(None, filter=...)` does.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

from telar_checkpoint.errors import StoredDataError, TelarError
from telar_checkpoint.history import History
from telar_checkpoint.stores.base import Store
from telar_checkpoint.thread_index import filter_terms, history_terms
from telar_checkpoint.ui.views import ThreadRow, metadata_matches, thread_row

PAGE = 50  # threads a page lists
FIRST_WAIT = 0.5  # seconds the first page waits for the first reading


@dataclass(slots=True)
class Page:
    rows: list[ThreadRow]
    matched: int  # threads that match, of those read so far (with a filter: at most the page's end, and one more)
    offset: int
    read: int  # threads read by the catalogue so far
    total: int  # threads the store held when the reading began
    reading: bool  # a reading is under way
    searched: int = 0  # threads read again to check a metadata filter
    limit: int = PAGE
    problem: str | None = None  # why the last reading of the store failed


class Catalogue:
    """Rows of the threads of `store`, sorted by last update (newest first)."""

    def __init__(self, store: Store, *, refresh: float = 30.0) -> None:
        self.store = store
        self.refresh = refresh
        self._rows: dict[str, ThreadRow] = {}
        self._terms: dict[str, frozenset[str]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._worker: threading.Thread | None = None
        self._finished_at: float | None = None
        self._read = 0
        self._total = 0
        self._sorted: list[ThreadRow] | None = None  # a memo of the rows by update, dropped on change
        self._problem: str | None = None  # why the last reading stopped, when it failed

    # --- reading ---------------------------------------------------------------------------------

    def start(self) -> None:
        """Begin a reading, unless one is under way or the last ended less than `refresh` ago."""
        with self._lock:
            if self._worker is not None and self._worker.is_alive():
                return
            if self._finished_at is not None and time.monotonic() - self._finished_at < self.refresh:
                return
            self._worker = threading.Thread(target=self._read_all, name="telar-ui-catalogue", daemon=True)
            self._worker.start()

    def wait(self, timeout: float) -> bool:
        """Wait at most `timeout` seconds for the reading under way; whether it ended."""
        worker = self._worker
        if worker is not None:
            worker.join(timeout)
            return not worker.is_alive()
        return True

    def close(self, timeout: float = 5.0) -> None:
        """Stop the reading (within `timeout` seconds, the time of one thread's read)."""
        self._stop.set()
        self.wait(timeout)

    def _read_all(self) -> None:
        try:
            self._read_keys()
        except TelarError as exc:  # the store could not be reached: the pages say so
            with self._lock:
                self._problem = str(exc)
                self._finished_at = time.monotonic()

    def _read_keys(self) -> None:
        keys = self.store.thread_keys()
        with self._lock:
            self._total, self._read, self._problem = len(keys), 0, None
        seen = set()
        for thread_id in keys:
            if self._stop.is_set():
                return
            self._read_one(thread_id)
            seen.add(thread_id)
            with self._lock:
                self._read += 1
        with self._lock:
            for gone in self._rows.keys() - seen:
                del self._rows[gone]
                self._terms.pop(gone, None)
            self._sorted = None
            self._finished_at = time.monotonic()

    def _read_one(self, thread_id: str) -> None:
        text = self.store.read(thread_id)
        row: ThreadRow | None = None
        terms: frozenset[str] = frozenset()
        if text is not None:
            try:
                history = History.parse(thread_id, text)
            except StoredDataError:
                row = thread_row(thread_id, text)  # damaged: the row says why
            else:
                if not history.only_deleted:
                    row = thread_row(thread_id, text, history)
                    terms = frozenset(sys.intern(t) for t in history_terms(e.line.metadata for e in history.entries.values()))
        with self._lock:
            if row is None:
                self._rows.pop(thread_id, None)
                self._terms.pop(thread_id, None)
            else:
                self._rows[thread_id] = row
                self._terms[thread_id] = terms
            self._sorted = None

    # --- pages -----------------------------------------------------------------------------------

    def _by_update(self) -> list[ThreadRow]:
        with self._lock:
            if self._sorted is None:
                rows = sorted(self._rows.values(), key=lambda r: r.thread_id)
                self._sorted = sorted(rows, key=lambda r: r.updated, reverse=True)
            return self._sorted

    def page(self, query: str = "", filter: dict[str, Any] | None = None, offset: int = 0, limit: int = PAGE) -> Page:
        """The rows matching `query` (a part of the thread id, any case) and `filter` (metadata
        values, as `list(None, filter=...)`), newest first, from `offset`."""
        self.start()
        if self._finished_at is None:
            self.wait(FIRST_WAIT)  # a small store is listed whole on the first page
        rows = self._by_update()
        if query:
            folded = query.casefold()
            rows = [r for r in rows if folded in r.thread_id.casefold()]
        searched = 0
        if filter:
            rows, searched = self._filtered(rows, filter, offset + limit + 1)
        with self._lock:
            read, total, reading = self._read, self._total, self._worker is not None and self._worker.is_alive()
            problem = self._problem
        return Page(rows[offset:offset + limit], len(rows), offset, read, total, reading, searched, limit, problem)

    def _filtered(self, rows: list[ThreadRow], filter: dict[str, Any], enough: int) -> tuple[list[ThreadRow], int]:
        """The rows whose thread matches `filter`: candidates by their terms, each then read and
        checked; reading stops once `enough` match (the page and whether there is a next)."""
        terms = filter_terms(filter)
        with self._lock:
            candidates = [r for r in rows if terms is None or self._terms.get(r.thread_id, frozenset()).issuperset(terms)]
        found: list[ThreadRow] = []
        searched = 0
        for row in candidates:
            if len(found) >= enough:
                break
            text = self.store.read(row.thread_id)
            searched += 1
            if text is None:
                continue
            try:
                if metadata_matches(History.parse(row.thread_id, text), filter):
                    found.append(row)
            except StoredDataError:
                continue
        return found, searched
