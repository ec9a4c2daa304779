"""`CheckpointCodec`: the checkpoints of one thread as a string, and back.

Pure: strings in, strings out, no I/O and no locks. A history is one JSON line
per checkpoint, oldest first; pending writes may follow in lines of their own
and are folded into their checkpoint on read. The codec turns LangGraph's values
into the operations of `rules` (`prepare`, `writes_line`) and parsed entries back
into what LangGraph reads (`record`, `checkpoint_tuple`); its string API (`append`,
`add_writes`, `trim`, ...) is `edit`, one call of `rules.apply`, on a string.
See docs/FORMAT.md.
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
from telar_checkpoint.compaction import edited
from telar_checkpoint.errors import CheckpointDroppedError, StoredDataError, UsageError
from telar_checkpoint.format import OWN_CHECKPOINT_FIELDS, PLAIN_CHECKPOINT_KEYS, DroppedLine, WritesLine, is_same, plain_metadata
from telar_checkpoint.history import Entry, History
from telar_checkpoint.rules import DeleteThread, KeepLatest, Operation, Put, Remove, Trim, apply
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

    def __init__(
        self, serde: SerializerProtocol | None = None, *, keep_finished_subgraphs: bool = False
    ) -> None:
        self.values = ValueCodec(serde or JsonSerializer())
        # Keep a finished subgraph call's checkpoints while the checkpoint it ran under is kept
        # (see `History.finished_calls`); by default they go once the call is over.
        self.keep_finished_subgraphs = keep_finished_subgraphs

    # --- records <-> operations and lines -------------------------------------------

    def prepare(
        self,
        checkpoint: Checkpoint,
        metadata: dict[str, Any],
        ns: str = "",
        parent: str | None = None,
        changed: Collection[str] | None = None,
        max_history: int | None = None,
        writes: Sequence[WritesLine] = (),
    ) -> Put:
        """The put of `checkpoint` (`rules.Put`), with its metadata, other fields and the values of
        the `changed` channels (all when None) encoded now; the other channels are stored as
        their parent's value where their version is the parent's (LangGraph passes the channels
        it changed as `new_versions`), else encoded when the put is applied.

        Encoding now matters to a saver: it takes turns with the other writers of a thread
        before it stores a put, and LangGraph goes on changing the objects of its state
        meanwhile (with async durability the next node runs while the put waits). Encoding
        when the put is given stores the value as it was given, as LangGraph's own savers do."""
        encode = self.values.encode
        channel_values = checkpoint.get("channel_values", {})
        wanted = channel_values.keys() if changed is None else [ch for ch in changed if ch in channel_values]
        return Put(
            ns, checkpoint["id"], parent, plain_metadata(dict(metadata)),
            {k: checkpoint[k] for k in PLAIN_CHECKPOINT_KEYS if k in checkpoint},  # type: ignore[literal-required]  # Checkpoint keys, named in a tuple
            {k: encode(v) for k, v in checkpoint.items() if k not in OWN_CHECKPOINT_FIELDS},
            {ch: encode(channel_values[ch]) for ch in wanted},
            channel_values, writes, max_history, None, encode,
        )

    def put_of(self, record: CheckpointRecord, max_history: int | None = None) -> Put:
        """The put of a whole record (the string API's): its writes encoded now, its values as
        the put is applied (a channel whose version is its stored parent's holds the parent's)."""
        if max_history is not None:
            check_max_history(max_history)
        writes = self._writes_of(record) if record.writes else []
        return self.prepare(record.checkpoint, dict(record.metadata), record.checkpoint_ns, record.parent_id, (), max_history, writes)

    def _writes_of(self, record: CheckpointRecord) -> list[WritesLine]:
        by_task: dict[tuple[str, str], WritesLine] = {}
        for w in record.writes:
            task = by_task.get((w.task_id, w.task_path))
            if task is None:
                task = by_task[(w.task_id, w.task_path)] = WritesLine(record.checkpoint_ns, record.id, w.task_id, w.task_path, [])
            task.writes.append((w.idx, w.channel, self.values.encode(w.value)))
        return list(by_task.values())

    def writes_line(
        self, ns: str, checkpoint_id: str, task_id: str, writes: Sequence[tuple[int, str, Any]], task_path: str = ""
    ) -> WritesLine:
        """One task's pending writes `(idx, channel, value)`, their values encoded now (see
        `prepare`): the operation that folds them into their checkpoint, and the line stored."""
        encode = self.values.encode
        return WritesLine(ns, checkpoint_id, task_id, task_path, [(idx, ch, encode(v)) for idx, ch, v in writes])

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

    def edit(
        self, stored: str | None, operation: Operation, *, thread_id: str | None = None, history: History | None = None
    ) -> tuple[str, History]:
        """`stored` after `operation` (`rules.apply`), and the new history. `history`: the history
        of `stored`, parsed before (`thread_id` names the thread in the errors of a parse)."""
        new, made = apply(
            History.parse(thread_id, stored) if history is None else history, operation,
            keep_finished_calls=self.keep_finished_subgraphs,
        )
        return edited(stored, made), new

    def append(
        self, stored: str | None, record: CheckpointRecord, max_history: int | None = None, *, thread_id: str | None = None
    ) -> str:
        """`stored` with `record` added: replacing what it supersedes, then keeping the last `max_history`.
        `thread_id` only names the thread in errors."""
        return self.edit(stored, self.put_of(record, max_history), thread_id=thread_id)[0]

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
        """`stored` with pending writes `(idx, channel, value)` of one task added to a checkpoint
        (see `rules.add_writes`)."""
        return self.edit(stored, self.writes_line(checkpoint_ns, checkpoint_id, task_id, writes, task_path), thread_id=thread_id)[0]

    def trim(self, stored: str | None, max_history: int) -> str:
        """`stored` cut to its last `max_history` checkpoints (see `append`)."""
        check_max_history(max_history)
        return self.edit(stored, Trim(max_history))[0]

    def remove_runs(self, stored: str | None, run_ids: set[str]) -> str | None:
        """`stored` without the checkpoints (and writes) of the given runs; None when nothing is left."""
        history = History.parse(None, stored)
        doomed = frozenset(k for k, e in history.entries.items() if _run_id(e) in run_ids)
        if not doomed:
            return stored
        text, new = self.edit(stored, Remove(doomed), history=history)
        return text if new.entries or new.deletion_record else None

    def copied(self, thread_id: str | None, stored: str) -> str | None:
        """What a copy of the thread writes (`copy_thread`): its history in the current versions,
        without the record of a deletion (the copy's runs are its own); None when it is only that
        record, a thread no reader sees. StoredDataError when it is corrupt."""
        history = History.parse(thread_id, stored)
        if history.only_deleted:
            return None
        if history.deletion_record is None:
            return history.in_current_versions(stored)
        copy = history.clone()
        copy.dropped[""].deleted_before = copy.dropped[""].deleted_at = None
        return copy.render()

    def delete_thread(self, stored: str | None, deletion: DeleteThread) -> str | None:
        """`stored` as the record of a deleted thread (`rules.DeleteThread`); None (no thread)
        when nothing is stored."""
        if stored is None:
            return None
        try:
            history = History.parse(None, stored)
        except StoredDataError:  # a thread that cannot be read is deleted all the same
            history = History(None)
        return self.edit(stored, deletion, history=history)[0]

    def with_ttl(self, thread_id: str, stored: str | None, minutes: float | None) -> str:
        """`stored` with the thread's own time-to-live (`DroppedLine.ttl`: minutes, math.inf for
        never, None for the saver's default); UsageError when no thread is stored."""
        history = History.parse(thread_id, stored)
        if not history.entries:
            raise UsageError(f"thread {thread_id!r} is not stored, so it has no time-to-live to set")
        copy = history.clone()
        copy.dropped.setdefault("", DroppedLine("", None)).ttl = minutes
        return copy.render()

    def keep_latest(self, stored: str | None) -> str | None:
        """`stored` with only the latest checkpoint of each namespace (and what DeltaChannel needs)."""
        return self.edit(stored, KeepLatest())[0] if stored is not None else None

    @staticmethod
    def find(thread_id: str, history: History, checkpoint_ns: str | None, checkpoint_id: str | None) -> Entry | None:
        """The entry asked for: by id, in `checkpoint_ns` (None: in any namespace), else the latest
        of `checkpoint_ns` (None: the root one); None if the thread never held it. The saver reads
        through it, and the CLI and the viewer (`inspection.find_entry`).

        Raises CheckpointDroppedError for an id the thread held and dropped.
        """
        if checkpoint_id is None:
            return history.latest(checkpoint_ns or "")
        if checkpoint_ns is not None:
            namespaces = [checkpoint_ns]
        else:
            namespaces = list(dict.fromkeys([*history.namespaces(), *history.dropped])) or [""]
        for ns in namespaces:
            if (entry := history.get(ns, checkpoint_id)) is not None:
                return entry
        for ns in namespaces:
            if reason := history.dropped_reason(ns, checkpoint_id):
                raise CheckpointDroppedError(thread_id, ns, checkpoint_id, reason)
        return None

    def checkpoint_tuple(self, thread_id: str, entry: Entry, config: RunnableConfig | None = None) -> CheckpointTuple:
        """LangGraph's tuple of `entry`; its config is `config` when given (as LangGraph's savers
        return the caller's config when it named the checkpoint), else the checkpoint's own."""
        record, line = self.record(entry), entry.line
        return CheckpointTuple(
            config=config if config is not None else checkpoint_config(thread_id, line.ns, line.id),
            checkpoint=record.checkpoint,
            metadata=record.metadata,
            parent_config=checkpoint_config(thread_id, line.ns, line.parent) if line.parent else None,
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


def _run_id(entry: Entry) -> str | None:
    run_id = entry.line.metadata.get("run_id")
    return run_id if isinstance(run_id, str) else None


def check_max_history(max_history: int | None) -> None:
    """Refuse a history depth that is not a positive integer (None: unbounded)."""
    if max_history is not None and (not isinstance(max_history, int) or isinstance(max_history, bool) or max_history < 1):
        raise UsageError(f"max_history must be a positive integer or None, not {max_history!r}")
