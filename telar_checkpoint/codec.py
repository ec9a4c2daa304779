"""`CheckpointCodec`: the checkpoints of one thread as a string, and back.

Pure: strings in, strings out, no I/O and no locks. A history is one JSON line
per checkpoint, oldest first; pending writes may follow in lines of their own
and are folded into their checkpoint on read. `append` applies the format's
rules: a checkpoint that moves a run on from a fork replaces what the fork
left behind, and `max_history` keeps the last N. See docs/FORMAT.md.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

import orjson
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    PendingWrite,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from telar_checkpoint._compat import writes_sort_key
from telar_checkpoint.compaction import MAX_CHAIN, Edit, edited
from telar_checkpoint.errors import CheckpointDroppedError, UsageError
from telar_checkpoint.format import (
    OWN_CHECKPOINT_FIELDS,
    PLAIN_CHECKPOINT_KEYS,
    SAME,
    CheckpointLine,
    WritesLine,
    is_same,
    plain_metadata,
    write_checkpoint,
)
from telar_checkpoint.history import Entry, History
from telar_checkpoint.rules import AddWrites, KeepLatest, Operation, Put, Remove, Trim, apply
from telar_checkpoint.serializer import JsonSerializer
from telar_checkpoint.values import ValueCodec


@dataclass(slots=True)
class WriteRecord:
    """One pending write: what a task wrote to a channel."""

    task_id: str
    channel: str
    value: Any
    task_path: str = ""
    idx: int = 0


@dataclass(slots=True)
class CheckpointRecord:
    """What LangGraph needs back for one checkpoint. The thread id is the storage key."""

    checkpoint: Checkpoint
    metadata: CheckpointMetadata
    checkpoint_ns: str = ""
    parent_id: str | None = None
    writes: list[WriteRecord] = field(default_factory=list)

    @property
    def id(self) -> str:
        return self.checkpoint["id"]


@dataclass(slots=True)
class PreparedRecord:
    """A record with what it holds encoded at once (`CheckpointCodec.prepare`).

    A saver takes turns with the other writers of a thread before it stores a put, and
    LangGraph goes on changing the objects of its state meanwhile (with async durability the
    next node runs while the put waits). Encoding when the put is given stores the value as
    it was given, as LangGraph's own savers do. Nothing changes it once made (by convention:
    not frozen, as a frozen dataclass's init costs twice as much, on every put)."""

    record: CheckpointRecord
    metadata: dict[str, Any]  # plain JSON
    extra: dict[str, Any]  # other checkpoint fields, encoded
    values: dict[str, Any]  # channel -> encoded value, for the channels encoded at once
    writes: list[WritesLine]  # a task's writes a line, encoded


class CheckpointCodec:
    """Encodes checkpoint records as JSON lines, state values through `serde` (default: `JsonSerializer`)."""

    def __init__(
        self, serde: SerializerProtocol | None = None, *, keep_finished_subgraphs: bool = False
    ) -> None:
        self.values = ValueCodec(serde or JsonSerializer())
        # Keep a finished subgraph call's checkpoints while the checkpoint it ran under is kept
        # (see `History.finished_calls`); by default they go once the call is over.
        self.keep_finished_subgraphs = keep_finished_subgraphs

    # --- records <-> lines ----------------------------------------------------

    def prepare(self, record: CheckpointRecord, changed: Collection[str] | None = None) -> PreparedRecord:
        """`record` with its metadata, writes, other fields and the values of the `changed`
        channels (all when None) encoded now; the other channels hold their parent's value
        (LangGraph passes the channels it changed as `new_versions`)."""
        cp, encode = record.checkpoint, self.values.encode
        channel_values = cp.get("channel_values", {})
        wanted = channel_values.keys() if changed is None else [ch for ch in changed if ch in channel_values]
        return PreparedRecord(
            record,
            plain_metadata(dict(record.metadata)),
            {k: encode(v) for k, v in cp.items() if k not in OWN_CHECKPOINT_FIELDS},
            {ch: encode(channel_values[ch]) for ch in wanted},
            self._writes_of(record) if record.writes else [],
        )

    def _line(self, prepared: PreparedRecord, history: History | None = None) -> tuple[CheckpointLine, dict[str, tuple[bytes, int, int]]]:
        """The record's line, list channels that only grew since the parent stored as what they
        added; and the JSON text of the whole lists compared on the way (`Entry.take_list_json`)."""
        record = prepared.record
        cp = record.checkpoint
        parent = history.entries.get((record.checkpoint_ns, record.parent_id)) if history and record.parent_id else None
        plain = {k: cp[k] for k in PLAIN_CHECKPOINT_KEYS if k in cp}  # type: ignore[literal-required]  # Checkpoint keys, named in a tuple
        values, appended, lists = self._values(cp.get("channel_values", {}), prepared.values, plain.get("channel_versions") or {}, parent)
        # ns, id, parent, metadata, checkpoint, extra, values, appended (by position: keywords
        # make this init twice as slow, on every put)
        line = CheckpointLine(record.checkpoint_ns, cp["id"], record.parent_id, prepared.metadata, plain, prepared.extra, values, appended)
        line.text = write_checkpoint(line)
        return line, lists

    def _values(
        self, channel_values: dict[str, Any], encoded: dict[str, Any], versions: dict[str, Any], parent: Entry | None
    ) -> tuple[dict[str, Any], dict[str, list[Any]], dict[str, tuple[bytes, int, int]]]:
        """Encoded values, the list channels that only grew since `parent` (as the items added),
        and the JSON text of the lists compared with the parent's.

        `encoded` holds the channels encoded when the put was given (`prepare`). Another
        channel whose version is the parent's holds the parent's value: LangGraph gives a
        channel a new version whenever it updates it, and its own savers store a value once
        per version. So it is not encoded again: a list is stored as nothing added, an object
        as a reference to the parent's (`SAME`), a scalar as the parent's encoding. Every other
        value is encoded whole, and a list is then compared with the parent's as JSON
        (`_appended`): what is stored is the value given.
        """
        values: dict[str, Any] = {}
        unchanged: dict[str, list[Any]] = {}
        parent_versions = (parent.line.checkpoint.get("channel_versions") or {}) if parent is not None else {}
        for channel, value in channel_values.items():
            if channel in encoded:
                values[channel] = encoded[channel]
                continue
            version = versions.get(channel)
            if version is not None and version == parent_versions.get(channel) and parent.has(channel):  # type: ignore[union-attr]
                resolved = parent.value(channel)  # type: ignore[union-attr]
                if parent.depth(channel) >= MAX_CHAIN:  # type: ignore[union-attr]
                    values[channel] = resolved  # whole again: a reader never walks back more than MAX_CHAIN lines
                elif type(resolved) is list and resolved:
                    unchanged[channel] = []  # the parent's list, with nothing added
                elif type(resolved) is dict:
                    values[channel] = SAME  # the parent's value, by reference: it may be large
                else:
                    values[channel] = resolved  # a scalar or an empty list: as short as a reference
                continue
            values[channel] = self.values.encode(value)
        appended, lists = _appended(values, parent) if parent is not None else ({}, {})
        appended.update(unchanged)
        return values, appended, lists

    def _writes_of(self, record: CheckpointRecord) -> list[WritesLine]:
        by_task: dict[tuple[str, str], WritesLine] = {}
        for w in record.writes:
            task = by_task.get((w.task_id, w.task_path))
            if task is None:
                task = by_task[(w.task_id, w.task_path)] = WritesLine(record.checkpoint_ns, record.id, w.task_id, w.task_path, [])
            task.writes.append((w.idx, w.channel, self.values.encode(w.value)))
        return list(by_task.values())

    def record(self, entry: Entry) -> CheckpointRecord:
        """The record of a parsed entry, with its state values decoded."""
        line = entry.line
        # A fresh copy: the parsed line is shared (memoized), and LangGraph changes what it gets.
        checkpoint: dict[str, Any] = orjson.loads(orjson.dumps(line.checkpoint))
        checkpoint["id"] = line.id
        values = checkpoint["channel_values"] = {
            k: self.values.decode(entry.value(k) if is_same(v) else v) for k, v in line.values.items()
        }
        for channel in line.appended:
            values[channel] = self.values.decode(entry.value(channel))
        for k, v in line.extra.items():
            checkpoint[k] = self.values.decode(v)
        writes = [
            WriteRecord(task_id, channel, self.values.decode(value), path, idx)
            for (task_id, idx), (channel, value, path) in entry.writes.items()
        ]
        writes.sort(key=lambda w: writes_sort_key(w.task_path, w.task_id, w.idx))
        metadata = orjson.loads(orjson.dumps(line.metadata))
        return CheckpointRecord(checkpoint, metadata, line.ns, line.parent, writes)  # type: ignore[arg-type]

    # --- the public, pure API ---------------------------------------------------

    def encode(self, record: CheckpointRecord) -> str:
        """One checkpoint, with its writes, as a history of its own (one line, then writes lines)."""
        return self.append(None, record)

    def parse(self, thread_id: str | None, data: str | None) -> History:
        """The parsed history, values still encoded (cheap to query). `thread_id` names the
        thread in errors."""
        return History.parse(thread_id, data)

    def decode(self, thread_id: str | None, data: str | None) -> CheckpointRecord | None:
        """The latest checkpoint of the root namespace (or of the only one), or None."""
        history = History.parse(thread_id, data)
        entry = history.latest("") or max(history.entries.values(), key=lambda e: e.line.id, default=None)
        return self.record(entry) if entry else None

    def decode_history(self, thread_id: str | None, data: str | None) -> list[CheckpointRecord]:
        """Every checkpoint, oldest first, with its pending writes folded in."""
        return [self.record(e) for e in History.parse(thread_id, data).entries.values()]

    def put_edit(
        self, history: History, record: CheckpointRecord | PreparedRecord, max_history: int | None = None
    ) -> tuple[History, Edit]:
        """`history` with `record` put (see `rules.Put`), and the edit of its string."""
        if max_history is not None:
            check_max_history(max_history)
        prepared = record if isinstance(record, PreparedRecord) else self.prepare(record, _changed(record, history))
        line, lists = self._line(prepared, history)
        put = Put(line, prepared.writes, lists, max_history)
        return apply(history, put, keep_finished_calls=self.keep_finished_subgraphs)

    def encode_writes(self, writes: Sequence[tuple[int, str, Any]]) -> list[tuple[int, str, Any]]:
        """Pending writes `(idx, channel, value)` with their values encoded (see `PreparedRecord`)."""
        return [(idx, ch, self.values.encode(v)) for idx, ch, v in writes]

    def writes_edit(self, history: History, line: WritesLine) -> tuple[History, Edit]:
        """`history` with one task's pending writes (values encoded: `encode_writes`) added,
        and the edit of its string (no lines when nothing changed)."""
        return apply(history, AddWrites(line))

    def append(
        self,
        stored: str | None,
        record: CheckpointRecord | PreparedRecord,
        max_history: int | None = None,
        *,
        thread_id: str | None = None,
    ) -> str:
        """`stored` with `record` added: replacing what it supersedes, then keeping the last `max_history`.

        `thread_id` only names the thread in errors and keys the parse memo.
        """
        return self.apply(stored, lambda history: self.put_edit(history, record, max_history), thread_id=thread_id)[0]

    def add_writes(
        self,
        stored: str | None,
        checkpoint_ns: str,
        checkpoint_id: str,
        task_id: str,
        writes: Sequence[tuple[int, str, Any]],
        task_path: str = "",
        *,
        thread_id: str | None = None,
    ) -> str:
        """`stored` with pending writes `(idx, channel, value)` of one task added to a checkpoint.

        Regular writes (idx >= 0) already stored are kept as they are; special ones
        (negative idx: errors, interrupts, resumes) overwrite. Appends one line.
        """
        encoded = self.encode_writes(writes)
        return self.apply(
            stored,
            lambda history: self.writes_edit(history, WritesLine(checkpoint_ns, checkpoint_id, task_id, task_path, encoded)),
            thread_id=thread_id,
        )[0]

    def apply(
        self,
        stored: str | None,
        make_edit: Callable[[History], tuple[History, Edit]],
        *,
        thread_id: str | None = None,
        history: History | None = None,
    ) -> tuple[str, History]:
        """`stored` after the edit `make_edit` gives for its history, and the new history.
        `history`: the history of `stored`, parsed before (`thread_id` names the thread in
        the errors of a parse)."""
        new, edit = make_edit(History.parse(thread_id, stored) if history is None else history)
        return edited(stored, edit), new

    def _rule(self, stored: str | None, operation: Operation) -> str:
        """`stored` after `operation` (see `rules`)."""
        return self.apply(stored, lambda history: apply(history, operation, keep_finished_calls=self.keep_finished_subgraphs))[0]

    def trim(self, stored: str | None, max_history: int) -> str:
        """`stored` cut to its last `max_history` checkpoints (see `append`)."""
        check_max_history(max_history)
        return self._rule(stored, Trim(max_history))

    def remove_runs(self, stored: str | None, run_ids: set[str]) -> str | None:
        """`stored` without the checkpoints (and writes) of the given runs; None when nothing is left."""
        history = History.parse(None, stored)
        doomed = frozenset(k for k, e in history.entries.items() if _run_id(e) in run_ids)
        if not doomed:
            return stored
        new, edit = apply(history, Remove(doomed))
        return edited(stored, edit) if new.entries else None

    def keep_latest(self, stored: str | None) -> str | None:
        """`stored` with only the latest checkpoint of each namespace (and what DeltaChannel needs)."""
        return self._rule(stored, KeepLatest()) if stored is not None else None

    def find(self, thread_id: str, history: History, checkpoint_ns: str, checkpoint_id: str | None) -> Entry | None:
        """The entry asked for (the latest of the namespace when no id), or None if never held.

        Raises CheckpointDroppedError for an id the thread held and dropped.
        """
        if checkpoint_id is None:
            return history.latest(checkpoint_ns)
        entry = history.get(checkpoint_ns, checkpoint_id)
        if entry is None and (reason := history.dropped_reason(checkpoint_ns, checkpoint_id)):
            raise CheckpointDroppedError(thread_id, checkpoint_ns, checkpoint_id, reason)
        return entry

    def checkpoint_tuple(self, thread_id: str, entry: Entry, config: RunnableConfig | None = None) -> CheckpointTuple:
        """LangGraph's tuple of `entry`; its config is `config` when given (as LangGraph's savers
        return the caller's config when it named the checkpoint), else the checkpoint's own."""
        record = self.record(entry)
        ns = record.checkpoint_ns
        return CheckpointTuple(
            config=config if config is not None else checkpoint_config(thread_id, ns, record.id),
            checkpoint=record.checkpoint,
            metadata=record.metadata,
            parent_config=checkpoint_config(thread_id, ns, record.parent_id) if record.parent_id else None,
            pending_writes=[(w.task_id, w.channel, w.value) for w in record.writes],
        )

    def delta_history(
        self, thread_id: str, history: History, ns: str, checkpoint_id: str | None, channels: Sequence[str]
    ) -> dict[str, DeltaChannelHistory]:
        """`get_delta_channel_history` of the checkpoint asked for: per channel, the writes on the
        path to it (oldest first) and the nearest value stored on that path (the seed)."""
        target = self.find(thread_id, history, ns, checkpoint_id)
        collected: dict[str, list[PendingWrite]] = {c: [] for c in channels}
        seeds: dict[str, Any] = {}
        remaining = set(channels)
        for cid in history.parent_chain(ns, target.line.parent) if target else []:
            if not remaining:
                break
            record = self.record(history.entries[(ns, cid)])
            for w in reversed(record.writes):
                if w.channel in remaining:
                    collected[w.channel].append((w.task_id, w.channel, w.value))
            for ch in list(remaining):
                if ch in record.checkpoint["channel_values"]:
                    seeds[ch] = record.checkpoint["channel_values"][ch]
                    remaining.discard(ch)
        result: dict[str, DeltaChannelHistory] = {}
        for ch in channels:
            result[ch] = {"writes": list(reversed(collected[ch]))}
            if ch in seeds:
                result[ch]["seed"] = seeds[ch]
        return result


def checkpoint_config(thread_id: str, ns: str, checkpoint_id: str) -> RunnableConfig:
    """The config that names one checkpoint, as LangGraph's savers return it."""
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}}


def entry_filter(
    ns: str | None, checkpoint_id: str | None, before_id: str | None, filter: dict[str, Any] | None
) -> Callable[[Entry], bool]:
    """What `list` keeps of a thread's entries: of namespace `ns` (None: any), the checkpoint
    `checkpoint_id` (None: any), older than `before_id`, whose metadata holds `filter`'s values
    (compared as LangGraph's savers compare them, with ``==``)."""

    def matches(entry: Entry) -> bool:
        line = entry.line
        return (
            (ns is None or line.ns == ns)
            and (not checkpoint_id or line.id == checkpoint_id)
            and (not before_id or line.id < before_id)
            and (not filter or all(line.metadata.get(k) == v for k, v in filter.items()))
        )

    return matches


def listed(history: History, matches: Callable[[Entry], bool], limit: int | None) -> list[Entry]:
    """The entries that match, newest first, at most `limit` (cost independent of the thread's
    length when the entries stand in id order, see `History.newest`)."""
    found = (e for e in history.newest() if matches(e))
    return list(found if limit is None else islice(found, max(limit, 0)))


def _changed(record: CheckpointRecord, history: History) -> list[str]:
    """The channels whose version differs from the parent checkpoint's (all, with no parent stored):
    what LangGraph passes a put as `new_versions`, for a record given without them."""
    cp = record.checkpoint
    parent = history.get(record.checkpoint_ns, record.parent_id) if record.parent_id else None
    if parent is None:
        return list(cp.get("channel_values", {}))
    versions = cp.get("channel_versions") or {}
    before = parent.line.checkpoint.get("channel_versions") or {}
    return [ch for ch in cp.get("channel_values", {}) if versions.get(ch) is None or versions.get(ch) != before.get(ch)]


def _run_id(entry: Entry) -> str | None:
    run_id = entry.line.metadata.get("run_id")
    return run_id if isinstance(run_id, str) else None


def _appended(values: dict[str, Any], parent: Entry) -> tuple[dict[str, list[Any]], dict[str, tuple[bytes, int, int]]]:
    """The list channels that only grew since `parent`: moved out of `values`, as the items
    added; and the JSON text, length and depth (`Entry.depth`) of each list compared.

    Compared as JSON text, so that a change of type (1 to 1.0 or true) is never taken for no
    change. A list's text is ``[`` and its items' texts joined by ``,`` then ``]``, and an
    item's text ends where it ends whatever follows, so the first items of `value` are the
    parent's list exactly when its text, less the ``]``, starts `value`'s, followed by ``,``
    or ``]``: one dump of the new list, the parent's kept from its own put (`Entry.take_list_json`).
    """
    appended, lists = {}, {}
    for channel, value in values.items():
        if type(value) is not list or not value:
            continue
        kept = parent.take_list_json(channel)
        if kept is None:
            continue
        prefix, count, depth = kept
        if not 0 < count <= len(value) or depth >= MAX_CHAIN:
            continue
        text = orjson.dumps(value)
        end = len(prefix) - 1  # where the parent's "]" is
        if text.startswith(prefix[:end]) and text[end : end + 1] in (b",", b"]"):
            appended[channel] = value[count:]
            lists[channel] = (text, len(value), depth + 1)
        else:
            lists[channel] = (text, len(value), 0)  # stored whole
    for channel in appended:
        del values[channel]
    return appended, lists


def check_max_history(max_history: int | None) -> None:
    """Refuse a history depth that is not a positive integer (None: unbounded)."""
    if max_history is not None and (not isinstance(max_history, int) or isinstance(max_history, bool) or max_history < 1):
        raise UsageError(f"max_history must be a positive integer or None, not {max_history!r}")
