"""Read-only views of stored threads, for people and tools: the library under the CLI.

`list_threads` summarizes every thread of a store; the other functions are pure
(a thread id and its stored text in, plain data out): `thread_history` lists the
checkpoints oldest first, `show_checkpoint` decodes one, `diff_checkpoints` says
what changed between two. State values are decoded through the codec's
serializer and shown as readable JSON (`JsonSerializer.to_jsonable`); a value
that does not load (a class not on the allowlist) is shown as stored.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from langgraph.checkpoint.serde.base import SerializerProtocol

from telar_checkpoint._compat import writes_sort_key
from telar_checkpoint.codec import CheckpointCodec
from telar_checkpoint.errors import StoredDataError, TelarError
from telar_checkpoint.format import line_version
from telar_checkpoint.history import Entry, History
from telar_checkpoint.progress import Progress
from telar_checkpoint.serializer import JsonSerializer
from telar_checkpoint.stores.base import Store
from telar_checkpoint.stores.common import stored_size

INTERRUPT = "__interrupt__"
_BRANCH = "branch:to:"
_START = "__start__"
_SENDS = "__pregel_tasks"
_READABLE = JsonSerializer()


SUGGEST_FROM = 10_000
"""At most this many ids of a store (the first, and those from the missing id's first letters on)
are compared with a missing thread id to suggest the closest."""


class ThreadNotFoundError(TelarError, LookupError):
    """The store holds no thread with this id; `suggestions` are the closest ids it holds."""

    def __init__(self, thread_id: str, suggestions: Sequence[str] = ()) -> None:
        hint = f"did you mean {' or '.join(map(repr, suggestions))}? " if suggestions else ""
        super().__init__(f"no thread {thread_id!r} in this store; {hint}`telar-checkpoint threads URL` lists them")
        self.thread_id = thread_id
        self.suggestions = list(suggestions)


def closest_threads(store: Store, thread_id: str, n: int = 3) -> list[str]:
    """The ids `store` holds that are closest to `thread_id` (`difflib`), compared among at most
    2 × `SUGGEST_FROM` of them: the first in order, and those from its first two characters on."""
    found = set(store.sorted_keys(limit=SUGGEST_FROM))
    if len(found) >= SUGGEST_FROM:
        found.update(store.sorted_keys(after=thread_id[:2], limit=SUGGEST_FROM))
    return difflib.get_close_matches(thread_id, sorted(found), n=n, cutoff=0.6)


class CheckpointNotFoundError(TelarError, LookupError):
    """The thread never held a checkpoint with this id (or holds none at all)."""

    def __init__(self, thread_id: str, checkpoint_id: str | None, ns: str | None = None) -> None:
        where = f" in namespace {ns!r}" if ns else ""
        what = f"no checkpoint {checkpoint_id}" if checkpoint_id else "no checkpoint"
        super().__init__(
            f"thread {thread_id!r}: {what}{where}; `telar-checkpoint history URL {thread_id}` lists them"
        )
        self.thread_id = thread_id
        self.checkpoint_id = checkpoint_id


# --- the threads of a store ------------------------------------------------------


@dataclass(slots=True)
class ThreadSummary:
    thread_id: str
    checkpoints: int  # in every namespace
    latest_step: int | None  # of the latest root checkpoint
    updated: str | None  # ts of the newest checkpoint
    size: int  # bytes of stored UTF-8
    torn: bool = False  # ends with an unterminated line (dropped on read)


@dataclass(slots=True)
class CorruptThread:
    thread_id: str
    error: str


@dataclass(slots=True)
class ThreadListing:
    threads: list[ThreadSummary] = field(default_factory=list)
    corrupt: list[CorruptThread] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)  # the records of deleted threads (`History.only_deleted`)
    expired: list[str] = field(default_factory=list)  # threads past their time-to-live (with `expired=`), not in `threads`


def is_deletion_record(thread_id: str, text: str) -> bool:
    """Whether `text` is only the record of a deleted thread (`History.only_deleted`); False
    for a corrupt one."""
    if '"deleted_before"' not in text:
        return False
    try:
        return History.parse(thread_id, text).only_deleted
    except StoredDataError:
        return False


def read_thread(store: Store, thread_id: str) -> str:
    """The stored text of `thread_id`; ThreadNotFoundError when there is none, or only the
    record of its deletion."""
    text = store.read(thread_id)
    if text is None or is_deletion_record(thread_id, text):
        raise ThreadNotFoundError(thread_id, closest_threads(store, thread_id))
    return text


def summarize_thread(thread_id: str, text: str, history: History | None = None) -> ThreadSummary:
    """Counts, latest step and last update of one thread (`history`: `text` parsed before);
    StoredDataError when it is corrupt."""
    history = History.parse(thread_id, text) if history is None else history
    entries = list(history.entries.values())
    root = history.latest("")
    return ThreadSummary(
        thread_id=thread_id,
        checkpoints=len(entries),
        latest_step=root.line.step if root else None,
        updated=max((str(e.line.checkpoint.get("ts", "")) for e in entries), default=None) or None,
        size=stored_size(text),
        torn=history.torn is not None,
    )


def list_threads(
    store: Store, *, progress: Progress | None = None, expired: Callable[[str], bool] | None = None
) -> ThreadListing:
    """Every thread of `store`, sorted by id; corrupt ones, the records of deleted ones and
    foreign entries listed apart, and, given `expired` (a saver's `is_expired`), the threads
    past their time-to-live.
    `progress(done, total, thread_id)`: called after each thread (telar_checkpoint/progress.py)."""
    listing = ThreadListing(foreign=store.foreign())
    thread_ids = store.thread_keys()
    for done, thread_id in enumerate(thread_ids, 1):
        text = store.read(thread_id)
        if text is not None:  # deleted while we walked
            try:
                history = History.parse(thread_id, text)
                if history.only_deleted:
                    listing.deleted.append(thread_id)
                elif expired is not None and expired(thread_id):
                    listing.expired.append(thread_id)
                else:
                    listing.threads.append(summarize_thread(thread_id, text, history))
            except StoredDataError as exc:
                listing.corrupt.append(CorruptThread(thread_id, str(exc)))
        if progress is not None:
            progress(done, len(thread_ids), thread_id)
    return listing


# --- the checkpoints of a thread ---------------------------------------------------


@dataclass(slots=True)
class CheckpointInfo:
    id: str
    ns: str
    step: int
    source: str | None
    ts: str | None
    format: int  # the line's format version: 2 in a subgraph namespace, else 1
    parent: str | None
    next: list[str]  # nodes that run next (see `next_nodes`)
    interrupts: list[Any]  # values of the interrupts not yet answered, readable JSON


def _newer(version: Any, seen: Any) -> bool:
    if seen is None:
        return True
    if type(version) is not type(seen):
        return str(version) > str(seen)
    return bool(version > seen)


def next_nodes(entry: Entry) -> list[str]:
    """The nodes LangGraph runs next from this checkpoint, from what is stored.

    A node is next when one of its trigger channels (``branch:to:NODE``, or
    ``__start__`` for the input) holds a value whose version the node has not seen
    (`channel_versions` against `versions_seen`); each pending `Send` names one
    more. Join edges (``join:a+b:c``) and custom triggers are not followed.
    """
    line = entry.line
    versions = line.checkpoint.get("channel_versions") or {}
    seen = line.checkpoint.get("versions_seen") or {}
    nodes = []
    sends = entry.value(_SENDS) if entry.has(_SENDS) else None
    if isinstance(sends, list):
        for send in sends:
            payload = send.get("$send") if isinstance(send, dict) else None
            if isinstance(payload, dict) and isinstance(payload.get("node"), str):
                nodes.append(payload["node"])
    for channel, version in versions.items():
        if channel.startswith(_BRANCH):
            node = channel[len(_BRANCH):]
        elif channel == _START:
            node = _START
        else:
            continue
        found_seen = seen.get(node)
        node_seen: dict[str, Any] = found_seen if isinstance(found_seen, dict) else {}
        if entry.has(channel) and _newer(version, node_seen.get(channel)):
            nodes.append(node)
    return nodes


def readable(codec: CheckpointCodec, stored: Any) -> Any:
    """A stored value decoded through `codec` and shown as JSON; as stored if it does not load."""
    try:
        return _READABLE.to_jsonable(codec.values.decode(stored))
    except Exception:  # a serializer's own error, whatever its class: show the stored form
        return stored


def pending_interrupts(entry: Entry) -> list[Any]:
    """The stored values of the interrupts still pending: written by a task that has not
    finished since (no write of it with an index of 0 or more)."""
    finished = {task_id for task_id, idx in entry.writes if idx >= 0}
    return [value for (task_id, _idx), (channel, value, _path) in entry.writes.items()
            if channel == INTERRUPT and task_id not in finished]


def _interrupts(codec: CheckpointCodec, entry: Entry) -> list[Any]:
    """The values of the interrupts still pending (`pending_interrupts`), readable."""
    found: list[Any] = []
    for value in pending_interrupts(entry):
        try:
            decoded = codec.values.decode(value)
            items = decoded if isinstance(decoded, (list, tuple)) else [decoded]
            found.extend(_READABLE.to_jsonable(getattr(i, "value", i)) for i in items)
        except Exception:  # not loadable here: show the stored form
            found.append(value)
    return found


def checkpoint_info(codec: CheckpointCodec, entry: Entry) -> CheckpointInfo:
    line = entry.line
    return CheckpointInfo(
        id=line.id,
        ns=line.ns,
        step=line.step,
        source=line.source,
        ts=line.checkpoint.get("ts"),
        format=line_version(line),
        parent=line.parent,
        next=next_nodes(entry),
        interrupts=_interrupts(codec, entry),
    )


def thread_history(
    thread_id: str, text: str, *, ns: str | None = None, serde: SerializerProtocol | None = None
) -> list[CheckpointInfo]:
    """The checkpoints of a thread oldest first (by id), of every namespace or only `ns`."""
    codec = CheckpointCodec(serde)
    history = History.parse(thread_id, text)
    entries = [e for e in history.entries.values() if ns is None or e.line.ns == ns]
    return [checkpoint_info(codec, e) for e in sorted(entries, key=lambda e: e.line.id)]


# --- one checkpoint, and the difference between two ----------------------------------


@dataclass(slots=True)
class CheckpointView:
    info: CheckpointInfo
    values: dict[str, Any]  # channel -> readable JSON
    metadata: dict[str, Any]
    writes: list[dict[str, Any]]  # {"task", "path", "channel", "value"}
    schema: int = 1  # the thread's state schema version (`History.schema_version`; 1 when none is recorded)


def state_values(codec: CheckpointCodec, entry: Entry) -> dict[str, Any]:
    """The channel values of a checkpoint, readable (lists stored as appended items resolved whole)."""
    channels = [*entry.line.values, *entry.line.appended]
    return {channel: readable(codec, entry.value(channel)) for channel in channels}


def find_entry(thread_id: str, history: History, checkpoint_id: str | None, ns: str | None = None) -> Entry:
    """`CheckpointCodec.find`, for a command or page that names a checkpoint: one the thread
    never held is a CheckpointNotFoundError (a dropped one a CheckpointDroppedError)."""
    entry = CheckpointCodec.find(thread_id, history, ns, checkpoint_id)
    if entry is None:
        raise CheckpointNotFoundError(thread_id, checkpoint_id, ns)
    return entry


def show_checkpoint(
    thread_id: str,
    text: str,
    checkpoint_id: str | None = None,
    *,
    ns: str | None = None,
    serde: SerializerProtocol | None = None,
) -> CheckpointView:
    """One checkpoint's state, metadata and pending writes, decoded (the latest root one by default)."""
    codec = CheckpointCodec(serde)
    history = History.parse(thread_id, text)
    entry = find_entry(thread_id, history, checkpoint_id, ns)
    ordered = sorted(entry.writes.items(), key=lambda w: writes_sort_key(w[1][2], w[0][0], w[0][1]))
    writes = [
        {"task": task_id, "path": path, "channel": channel, "value": readable(codec, value)}
        for (task_id, _idx), (channel, value, path) in ordered
    ]
    return CheckpointView(
        info=checkpoint_info(codec, entry),
        values=state_values(codec, entry),
        metadata=dict(entry.line.metadata),
        writes=writes,
        schema=history.schema_version,
    )


@dataclass(slots=True)
class ChannelChange:
    channel: str
    kind: Literal["added", "removed", "changed", "appended"]
    before: Any = None
    after: Any = None
    appended: list[Any] | None = None  # for "appended": the items a list grew by


def diff_states(before: dict[str, Any], after: dict[str, Any]) -> list[ChannelChange]:
    """What changed from `before` to `after` (channel -> JSON value), by channel name."""
    changes = []
    for channel in sorted(before.keys() | after.keys()):
        if channel not in after:
            changes.append(ChannelChange(channel, "removed", before=before[channel]))
        elif channel not in before:
            changes.append(ChannelChange(channel, "added", after=after[channel]))
        elif before[channel] != after[channel]:
            old, new = before[channel], after[channel]
            if isinstance(old, list) and isinstance(new, list) and len(new) > len(old) and new[: len(old)] == old:
                changes.append(ChannelChange(channel, "appended", old, new, appended=new[len(old):]))
            else:
                changes.append(ChannelChange(channel, "changed", old, new))
    return changes


def diff_checkpoints(
    thread_id: str,
    text: str,
    a: str,
    b: str,
    *,
    ns: str | None = None,
    serde: SerializerProtocol | None = None,
) -> list[ChannelChange]:
    """What changed in the state from checkpoint `a` to checkpoint `b` of one thread."""
    codec = CheckpointCodec(serde)
    history = History.parse(thread_id, text)
    first, second = (find_entry(thread_id, history, cid, ns) for cid in (a, b))
    return diff_states(
        state_values(codec, first),
        state_values(codec, second),
    )
