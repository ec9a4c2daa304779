"""A memo of parsed histories, so that reading and appending do not re-parse a whole thread.

Parsing is a pure function of the stored string, so its result can be kept: for
each thread the last string seen and its parsed `History`. A string that is the
same object, or equal, reuses it; one that extends it (another writer appended)
parses only the new lines, into a copy. A change never changes a history (see
`rules.apply`), so readers in other threads can go on using it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable

from telar_checkpoint.history import History

CACHED_THREADS = 64


class _Recent:
    """(tag, history) for the most recently used threads: a bounded, thread-safe LRU."""

    def __init__(self, size: int = CACHED_THREADS) -> None:
        self.size = size
        self._items: OrderedDict[str, tuple[Hashable, History]] = OrderedDict()
        self._lock = threading.Lock()

    def _get(self, thread_id: str) -> tuple[Hashable, History] | None:
        with self._lock:
            cached = self._items.get(thread_id)
            if cached is not None:
                self._items.move_to_end(thread_id)
            return cached

    def keep(self, thread_id: str | None, tag: Hashable | None, history: History) -> None:
        """Remember that the thread's `tag` (its text, or the store's version of it) stands for
        `history`, which nobody may change any more (a None thread or tag: nothing to remember)."""
        if thread_id is None or tag is None or self.size <= 0:
            return
        with self._lock:
            self._items[thread_id] = (tag, history)
            self._items.move_to_end(thread_id)
            while len(self._items) > self.size:
                self._items.popitem(last=False)


class ParseCache(_Recent):
    """The parsed history of the last string seen, for the most recently used threads."""

    def parse(self, thread_id: str | None, text: str | None) -> History:
        """The history of `text`: shared, read-only."""
        text = text or ""
        if thread_id is None or self.size <= 0:
            return History.parse(thread_id, text)
        cached = self._get(thread_id)
        if cached is not None:
            old_text, history = cached
            assert isinstance(old_text, str)  # this cache's tag is the text parsed
            if old_text is text or old_text == text:
                return history
            if history.torn is None and old_text and text.startswith(old_text):
                history = history.clone()
                history.extend(text[len(old_text):])
                self.keep(thread_id, text, history)
                return history
        history = History.parse(thread_id, text)
        self.keep(thread_id, text, history)
        return history


class VersionedHistories(_Recent):
    """Parsed histories keyed by the store's version of each thread (see `Store.version`).

    A hit needs no read at all: the store vouches, by the version, that the value
    did not change since it was parsed or written by this process.
    """

    def get(self, thread_id: str, version: Hashable | None) -> History | None:
        """The history kept for the thread, if it is at `version`."""
        cached = self._get(thread_id) if version is not None else None
        return cached[1] if cached is not None and cached[0] == version else None

    latest = _Recent._get
    """The last (version, history) kept for the thread, current or not (on every write: no layer of its own)."""
