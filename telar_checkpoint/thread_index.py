"""The index of threads a saver keeps in its store: which threads hold a run id or a metadata value.

`list(None, filter=...)` and `delete_for_runs` look threads up in it, where the store keeps one
(`Store.keeps_index`), instead of reading every thread. A thread is recorded under a
*term* for each run id and each plain metadata value of its checkpoints (`metadata_terms`, pure,
no I/O). The index may hold more than the threads do; callers check every thread it gives, so a
term only has to be equal for values that LangGraph's filter (``metadata.get(key) == value``)
calls equal. A put's terms are recorded before the write that holds them, so the index may name
a thread that no longer holds a term, never the reverse. `ThreadIndex` remembers the terms this
saver recorded, so that a put records only what is new; its operations are steps (steps.py),
run sync or async by the saver.
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import orjson

from telar_checkpoint.codec import CheckpointCodec, listed
from telar_checkpoint.errors import TelarError
from telar_checkpoint.history import Entry, History
from telar_checkpoint.steps import Call, Emit, Steps, Stream, call
from telar_checkpoint.stores.base import Store
from telar_checkpoint.threads import ThreadRecords

KEYS_PAGE = 100  # threads asked of the store at a time by `list(None, ...)`


# --- terms -------------------------------------------------------------------------

UNINDEXED_KEYS = frozenset({"step", "parents", "writes"})
"""Metadata keys not indexed: `step` changes at every checkpoint (an index write each put),
the others are not plain values. A filter on them alone reads every thread."""

LONGEST = 200  # characters; a longer term is kept as the hash of its text


def run_term(run_id: str) -> str:
    """The term of the checkpoints a run made."""
    return _bounded("run:" + run_id)


def _value_text(value: Any) -> str | None:
    """A text equal for values that compare equal (1, 1.0 and True alike, -0.0 and 0), None for a value no
    term stands for (None matches a missing key; NaN matches nothing; lists and dicts)."""
    if isinstance(value, str):
        return "s" + value
    if isinstance(value, (bool, int, float)):
        try:
            number = float(value)
        except OverflowError:  # an int beyond float range equals no float
            return "i" + str(value)
        if math.isnan(number):
            return None
        return "n" + repr(number + 0.0)  # + 0.0: -0.0 becomes 0.0, which it equals
    return None


def metadata_term(key: str, value: Any) -> str | None:
    """The term of `key` holding `value`, or None when no term stands for it."""
    if key in UNINDEXED_KEYS:
        return None
    return _plain_term(key, value) if type(value) in _PLAIN else _term(key, value)


_PLAIN = (str, int, bool)  # values whose equal values all have one term (1 and True share one)


@functools.lru_cache(maxsize=4096)
def _plain_term(key: str, value: str | int) -> str | None:
    """`_term`, remembered: every put asks it of the same few metadata values. (Not floats: NaN
    equals nothing, so each NaN would take a place of its own.)"""
    return _term(key, value)


def _term(key: str, value: Any) -> str | None:
    text = _value_text(value)
    return None if text is None else _bounded("meta:" + orjson.dumps([key, text]).decode())


def metadata_terms(metadata: Mapping[str, Any]) -> set[str]:
    """The terms of one checkpoint's metadata: its run id and each plain value."""
    terms = set()
    for key, value in metadata.items():
        if (term := metadata_term(key, value)) is not None:
            terms.add(term)
    run_id = metadata.get("run_id")
    if isinstance(run_id, str):
        terms.add(run_term(run_id))
    return terms


def filter_terms(filter: Mapping[str, Any]) -> list[str] | None:
    """The terms every thread matching `filter` holds, or None when no key of it is indexed
    (the caller then reads every thread)."""
    terms = [t for k, v in filter.items() if (t := metadata_term(k, v)) is not None]
    return terms or None


def history_terms(metadatas: Iterable[Mapping[str, Any]]) -> set[str]:
    """The terms of a thread whose checkpoints have these metadata."""
    terms: set[str] = set()
    for metadata in metadatas:
        terms |= metadata_terms(metadata)
    return terms


def _bounded(term: str) -> str:
    if len(term) <= LONGEST:
        return term
    digest = hashlib.sha256(term.encode("utf-8", "surrogatepass")).hexdigest()
    return term[: term.index(":") + 1] + "#" + digest


# --- the saver's side ----------------------------------------------------------------


class ThreadIndex:
    """A saver's view of its store's index: what it recorded, and the steps that use the index."""

    def __init__(self, store: Store, codec: CheckpointCodec, records: ThreadRecords) -> None:
        self.store, self.codec, self.records = store, codec, records
        self.indexed: Store | None = store if store.keeps_index else None  # the store, when it keeps an index
        self._checked = False  # whether the store's index was found ready (or rebuilt)

    def new_terms(self, thread_id: str, terms: set[str]) -> set[str]:
        """The terms of a put that this saver has not recorded for the thread yet."""
        return terms.difference(self.records.terms(thread_id))

    def recorded(self, thread_id: str, terms: set[str]) -> None:
        """Remember that `terms` are recorded for the thread."""
        self.records.add_terms(thread_id, terms)

    def history_terms(self, thread_id: str, text: str) -> set[str]:
        """The terms of a whole history (none for a damaged one: the scans that find it, verify
        and repair, read every thread)."""
        try:
            history = self.codec.parse(thread_id, text)
        except TelarError:
            return set()
        return history_terms(e.line.metadata for e in history.entries.values())

    def text_terms(self, thread_id: str, text: str | None) -> set[str] | None:
        """The terms to record before a rewrite stores `text` (None: nothing to record)."""
        if text is None or self.indexed is None:
            return None
        self.records.clear_terms(thread_id)
        return self.history_terms(thread_id, text)

    def stale_run_terms(self, thread_id: str, runs: set[str], new: str | None) -> set[str]:
        """The run terms a thread no longer needs once `delete_for_runs` left it `new`."""
        self.records.clear_terms(thread_id)
        if new is None or self.indexed is None:
            return set()
        return {run_term(r) for r in runs} - self.history_terms(thread_id, new)

    def rebuild_steps(self) -> Steps[int]:
        """Record the terms of every thread, then note the index ready; the threads read."""
        count = 0
        store, indexed = self.store, self.indexed
        if indexed is not None:
            for thread_id in (yield call(store.thread_keys, store.athread_keys)):
                text = yield call(store.read, store.aread, thread_id)
                if text is not None:
                    yield call(indexed.index, indexed.aindex, thread_id, self.history_terms(thread_id, text))
                    count += 1
            yield call(indexed.set_index_ready, indexed.aset_index_ready)
        self.records.clear_terms()
        self._checked = indexed is not None
        return count

    def usable_steps(self) -> Steps[bool]:
        """Whether to look threads up in the store's index, rebuilding it first when it is not
        ready (a store written by a release without one): once per saver."""
        indexed = self.indexed
        if indexed is None:
            return False
        if not self._checked:
            if not (yield call(indexed.index_ready, indexed.aindex_ready)):
                yield from self.rebuild_steps()
            self._checked = True
        return True

    def threads_steps(self, filter: dict[str, Any] | None) -> Stream:
        """The threads that may hold checkpoints matching `filter`, in order, emitted: those the
        index records under every term of the filter, else every thread, a page at a time."""
        store = self.store
        if not (yield from self.usable_steps()):
            for thread_id in (yield call(store.thread_keys, store.athread_keys)):
                yield Emit(thread_id)
            return
        terms = filter_terms(filter) if filter else None
        if terms is not None:
            assert self.indexed is not None  # (usable)
            yield from _intersection_steps(terms, self.indexed)
            return
        after = None
        while page := (yield call(store.sorted_keys, store.asorted_keys, after, KEYS_PAGE)):
            for thread_id in page:
                yield Emit(thread_id)
            after = page[-1]

    def list_steps(
        self, thread_id: str | None, filter: dict[str, Any] | None, matches: Callable[[Entry], bool], limit: int | None,
        history_steps: Callable[[str], Steps[History]], codec: CheckpointCodec,
    ) -> Stream:
        """`list`: the tuples of the entries that `matches`, newest first, emitted thread by thread,
        at most `limit`: of the thread `thread_id`, or of every thread that may match `filter`
        (`threads_steps`), each read by `history_steps` (as its readers see it) and decoded by
        `codec` (the saver's: a `with_allowlist` clone shares this index, not its codec)."""
        threads = self.threads_steps(filter) if thread_id is None else _one(thread_id)
        reply = None
        while True:  # the threads are emitted by `threads`, whose calls are passed on to the driver
            try:
                step = threads.send(reply)
            except StopIteration:
                return
            if isinstance(step, Call):
                reply = yield step
                continue
            reply = None
            if limit is not None and limit <= 0:
                return
            for entry in listed((yield from history_steps(step.value)), matches, limit):
                yield Emit(codec.checkpoint_tuple(step.value, entry))
                if limit is not None:
                    limit -= 1

    def runs_threads_steps(self, runs: set[str]) -> Steps[list[str]]:
        """The threads that may hold checkpoints of these runs."""
        store = self.store
        if not (yield from self.usable_steps()):
            return (yield call(store.thread_keys, store.athread_keys))
        threads: set[str] = set()
        indexed = self.indexed
        assert indexed is not None  # (usable)
        for run_id in runs:
            threads.update((yield call(indexed.indexed, indexed.aindexed, run_term(run_id))))
        return sorted(threads)


def _one(thread_id: str) -> Stream:
    yield Emit(thread_id)


def _intersection_steps(terms: list[str], store: Store) -> Stream:
    """The keys recorded under every term, in order, a page at a time, emitted. One term's keys
    come page by page; several terms' by seeking each in turn to the least key they could share
    (a zig-zag join), so the cost follows the keys found, not how many keys each term holds."""
    if len(terms) == 1:
        start: str | None = None
        while page := (yield call(store.indexed, store.aindexed, terms[0], start, KEYS_PAGE)):
            for key in page:
                yield Emit(key)
            start = page[-1] + "\x00"
        return
    candidate = ""
    while True:
        for term in terms:
            found = yield call(store.indexed, store.aindexed, term, candidate, 1)
            if not found:
                return
            if found[0] != candidate:
                candidate = found[0]
                break
        else:
            yield Emit(candidate)
            candidate += "\x00"
