"""`CheckpointCodec`: the checkpoints of one thread as a string, and back.

Pure: strings in, strings out, no I/O and no locks. A history is one JSON line
per checkpoint, oldest first; pending writes may follow in lines of their own
and are folded into their checkpoint on read. `append` applies the format's
rules: a checkpoint that moves a run on from a fork replaces what the fork
left behind, and `max_history` keeps the last N. See docs/FORMAT.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import operator

import orjson

from langgraph.checkpoint.base import Checkpoint, CheckpointMetadata
from langgraph.checkpoint.serde.base import SerializerProtocol

from telar_checkpoint._compat import writes_sort_key
from telar_checkpoint.errors import CheckpointDroppedError, UsageError
from telar_checkpoint.format import (
    PLAIN_CHECKPOINT_KEYS,
    CheckpointLine,
    plain_metadata,
    write_checkpoint,
    write_writes,
)
from telar_checkpoint.history import MAX_CHAIN, Entry, History
from telar_checkpoint.parse_cache import ParseCache
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


class CheckpointCodec:
    """Encodes checkpoint records as JSON lines, state values through `serde` (default: `JsonSerializer`)."""

    def __init__(self, serde: SerializerProtocol | None = None, *, cache_size: int = 64) -> None:
        self.values = ValueCodec(serde or JsonSerializer())
        # Parsing is pure, so its results for the last string of recent threads are memoized.
        self.cache = ParseCache(cache_size)

    # --- records <-> lines ----------------------------------------------------

    def _line(self, record: CheckpointRecord, history: History | None = None) -> tuple[CheckpointLine, dict[str, list[Any]]]:
        """The record's line, and the items of each list channel it was encoded from."""
        cp = record.checkpoint
        parent = history.get(record.checkpoint_ns, record.parent_id) if history and record.parent_id else None
        written = history.written.pop(record.checkpoint_ns, frozenset()) if history else frozenset()
        values, appended, sources = self._values(cp.get("channel_values", {}), parent, written)
        plain = {k: cp[k] for k in PLAIN_CHECKPOINT_KEYS if k in cp}
        extra = {
            k: self.values.encode(v)
            for k, v in cp.items()
            if k not in PLAIN_CHECKPOINT_KEYS and k not in ("id", "channel_values")
        }
        line = CheckpointLine(
            ns=record.checkpoint_ns,
            id=cp["id"],
            parent=record.parent_id,
            metadata=plain_metadata(dict(record.metadata)),
            checkpoint=plain,
            extra=extra,
            values=values,
            appended=appended,
        )
        line.text = write_checkpoint(line)
        return line, sources

    def _values(
        self, channel_values: dict[str, Any], parent: Entry | None, written: frozenset[int] = frozenset()
    ) -> tuple[dict[str, Any], dict[str, list[Any]], dict[str, list[Any]]]:
        """Encoded values, the list channels that only grew since `parent` (as the items
        added), and the items each list was encoded from.

        A list whose first items are the very objects the parent's list was encoded
        from encodes only the items after them: LangGraph updates state with the values
        tasks return, so an object encodes the same unless it was handed back in a
        pending write since (`written`, ids), say edited in place and returned, as
        `add_messages` allows by id. Any other list is encoded whole and compared with
        the parent's as JSON.
        """
        values: dict[str, Any] = {}
        appended: dict[str, list[Any]] = {}
        sources: dict[str, list[Any]] = {}
        for channel, value in channel_values.items():
            if type(value) is list and value and self.values.lists_by_item:
                sources[channel] = list(value)
                # Taken, not shared: only the newest entry keeps its items (memory stays O(state)).
                before = parent.sources.pop(channel, None) if parent is not None else None
                if (
                    before is not None
                    and len(before) <= len(value)
                    and all(map(operator.is_, before, value))
                    and not (written and any(map(written.__contains__, map(id, before))))
                ):
                    added = self.values.encode(value[len(before) :])
                    if parent.depth(channel) < MAX_CHAIN:  # type: ignore[union-attr]
                        appended[channel] = added
                    else:  # written whole again, from what the parent holds
                        values[channel] = [*parent.value(channel), *added]  # type: ignore[union-attr]
                    continue
            values[channel] = self.values.encode(value)
        if parent is not None:
            appended.update(_appended(values, parent))
        return values, appended, sources

    def _writes_of(self, record: CheckpointRecord) -> list[tuple[str, int, str, Any, str]]:
        return [(w.task_id, w.idx, w.channel, self.values.encode(w.value), w.task_path) for w in record.writes]

    def record(self, entry: Entry) -> CheckpointRecord:
        """The record of a parsed entry, with its state values decoded."""
        line = entry.line
        # A fresh copy: the parsed line is shared (memoized), and LangGraph changes what it gets.
        checkpoint: dict[str, Any] = orjson.loads(orjson.dumps(line.checkpoint))
        checkpoint["id"] = line.id
        values = checkpoint["channel_values"] = {k: self.values.decode(v) for k, v in line.values.items()}
        for channel in line.appended:
            values[channel] = self.values.decode(entry.value(channel))
        if self.values.lists_by_item:
            # LangGraph builds the next checkpoint from these objects: remember them (see `_values`).
            entry.sources.update((ch, list(v)) for ch, v in values.items() if type(v) is list and v)
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
        """The parsed history, values still encoded (cheap to query). Shared: do not change it."""
        return self.cache.parse(thread_id, data)

    def _result(self, thread_id: str | None, history: History, stored: str | None, lines: list[str] | None) -> str:
        """The string after a change: `stored` and the appended lines, or the history rewritten."""
        if lines == [] and stored is not None:
            return stored
        text = history.render() if lines is None else (stored or "") + "".join(line + "\n" for line in lines)
        self.cache.keep(thread_id, text, history)
        return text

    def decode(self, thread_id: str | None, data: str | None) -> CheckpointRecord | None:
        """The latest checkpoint of the root namespace (or of the only one), or None."""
        history = History.parse(thread_id, data)
        entry = history.latest("") or max(history.entries.values(), key=lambda e: e.line.id, default=None)
        return self.record(entry) if entry else None

    def decode_history(self, thread_id: str | None, data: str | None) -> list[CheckpointRecord]:
        """Every checkpoint, oldest first, with its pending writes folded in."""
        return [self.record(e) for e in History.parse(thread_id, data).entries.values()]

    def put_lines(self, history: History, record: CheckpointRecord, max_history: int | None = None) -> list[str] | None:
        """Put `record` into `history` (an editable clone); the lines to append to its string,
        or None when the string must be rewritten whole (`history.render()`)."""
        check_max_history(max_history)
        line, sources = self._line(record, history)
        rewrite = history.put(line, self._writes_of(record))
        entry = history.get(line.ns, line.id)
        if sources and entry is not None:
            entry.sources = sources  # the entry was made by this put: nobody shares it yet
        if rewrite or history.torn is not None:
            if max_history is not None:
                history.trim(max_history)
            return None
        added = [line.text]
        if record.writes and entry is not None:
            tasks = {w.task_id for w in record.writes}
            added.extend(History._writes_lines(line.ns, line.id, {k: v for k, v in entry.writes.items() if k[0] in tasks}))
        history.line_count += len(added)
        if max_history is not None:
            before = dict(history.dropped)
            cut = history.trim(max_history)
            if cut:
                # Trimming appends floors, and rewrites only once the string holds twice what it needs.
                floors = history.floor_lines(cut, before)
                if floors is None:
                    return None
                added.extend(floors)
                history.line_count += len(floors)
        return added

    def writes_lines(
        self, history: History, checkpoint_ns: str, checkpoint_id: str, task_id: str,
        writes: Sequence[tuple[int, str, Any]], task_path: str = "",
    ) -> list[str] | None:
        """Add pending writes `(idx, channel, value)` of one task to `history` (an editable clone);
        the lines to append ([] when nothing changed), or None when it must be rewritten whole."""
        encoded = [(idx, ch, self.values.encode(v)) for idx, ch, v in writes]
        handed = {id(v) for _, _, v in writes} | {id(item) for _, _, v in writes if type(v) is list for item in v}
        history.written[checkpoint_ns] = history.written.get(checkpoint_ns, frozenset()) | handed
        line = history.add_writes(checkpoint_ns, checkpoint_id, task_id, task_path, encoded)
        if history.torn is not None:
            return None
        if line is None:
            return []
        history.line_count += 1
        return [write_writes(line)]

    def append(
        self, stored: str | None, record: CheckpointRecord, max_history: int | None = None, *, thread_id: str | None = None
    ) -> str:
        """`stored` with `record` added: replacing what it supersedes, then keeping the last `max_history`.

        `thread_id` only names the thread in errors and keys the parse memo.
        """
        history = self.cache.editable(thread_id, stored)
        return self._result(thread_id, history, stored, self.put_lines(history, record, max_history))

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
        history = self.cache.editable(thread_id, stored)
        lines = self.writes_lines(history, checkpoint_ns, checkpoint_id, task_id, writes, task_path)
        return self._result(thread_id, history, stored, lines)

    def trim(self, stored: str | None, max_history: int) -> str:
        """`stored` cut to its last `max_history` checkpoints (see `append`)."""
        check_max_history(max_history)
        history = History.parse(None, stored)
        cut = history.trim(max_history)
        return history.render() if cut or history.torn or history.holds_trimmed else stored or ""

    def remove_runs(self, stored: str | None, run_ids: set[str]) -> str | None:
        """`stored` without the checkpoints (and writes) of the given runs; None when nothing is left."""
        history = History.parse(None, stored)
        doomed = {k for k, e in history.entries.items() if _run_id(e) in run_ids}
        if not doomed:
            return stored
        history.remove(doomed)
        return history.render() if history.entries else None

    def keep_latest(self, stored: str | None) -> str | None:
        """`stored` with only the latest checkpoint of each namespace (and what DeltaChannel needs)."""
        history = History.parse(None, stored)
        return history.render() if history.keep_latest() or history.torn else stored

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


def _run_id(entry: Entry) -> str | None:
    run_id = entry.line.metadata.get("run_id")
    return run_id if isinstance(run_id, str) else None


def _appended(values: dict[str, Any], parent: Entry) -> dict[str, list[Any]]:
    """The list channels that only grew since `parent`: moved out of `values`, as the items added.

    Compared as JSON text, so that a change of type (1 to 1.0 or true) is never taken for no change.
    """
    appended = {}
    for channel, value in values.items():
        if type(value) is not list or not value or not parent.has(channel):
            continue
        before = parent.value(channel)
        if (
            type(before) is list
            and 0 < len(before) <= len(value)
            and parent.depth(channel) < MAX_CHAIN
            and orjson.dumps(value[: len(before)]) == orjson.dumps(before)
        ):
            appended[channel] = value[len(before) :]
    for channel in appended:
        del values[channel]
    return appended


def check_max_history(max_history: int | None) -> None:
    """Refuse a history depth that is not a positive integer (None: unbounded)."""
    if max_history is not None and (not isinstance(max_history, int) or max_history < 1):
        raise UsageError(f"max_history must be a positive integer or None, not {max_history!r}")
