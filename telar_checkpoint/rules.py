"""The rules of a history: an operation applied to a history gives a new one and an edit.

`apply(history, operation)` never changes the history it is given (readers may hold it):
it changes a copy and returns it with the edit that turns the string the history was read
from into the string of the new one: `Append(lines)`, the common case, or `Rewrite(text)`,
as `compaction` decides from what the operation did. The codec applies edits to strings,
the saver appends or rewrites in its store; neither knows the rules. Like a sans-IO
protocol: values in, values out, no I/O.

Operations are values: nothing changes one once it is made. They are plain slotted
dataclasses, not frozen ones, by convention only: a frozen dataclass's init costs twice as
much, and a put makes several of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from telar_checkpoint.compaction import Append, Edit, edit, trimmed
from telar_checkpoint.format import CheckpointLine, WritesLine, write_writes
from telar_checkpoint.history import Entry, History, Key

# --- operations ---------------------------------------------------------------------


@dataclass(slots=True)
class Put:
    """Store a checkpoint line, with its tasks' writes (a `WritesLine` a task);
    `lists`: the JSON text, length and depth of its list channels, kept for the next put to compare with;
    then keep the last `max_history` checkpoints of each namespace (None: all)."""

    line: CheckpointLine
    writes: Sequence[WritesLine] = ()
    lists: dict[str, tuple[bytes, int, int]] | None = None
    max_history: int | None = None


@dataclass(slots=True)
class AddWrites:
    """Fold one task's pending writes into their checkpoint."""

    line: WritesLine


@dataclass(slots=True)
class Trim:
    """Keep the last `max_history` checkpoints of each namespace (and what they need)."""

    max_history: int


@dataclass(slots=True)
class Remove:
    """Remove these checkpoints on request: they read as absent afterwards."""

    keys: frozenset[Key]


@dataclass(slots=True)
class KeepLatest:
    """Keep the latest checkpoint of each namespace (and what it needs)."""


Operation = Put | AddWrites | Trim | Remove | KeepLatest


def apply(history: History, operation: Operation, *, keep_finished_calls: bool = False) -> tuple[History, Edit]:
    """The history after `operation`, and the edit of its string (`compaction.edit`). `history`
    is left as it was. `keep_finished_calls`: see `History.finished_calls`."""
    new = history.clone()
    if isinstance(operation, Put):
        return new, _put(new, operation, keep_finished_calls)
    if isinstance(operation, AddWrites):
        line = new.add_writes(operation.line)
        return new, edit(new, [] if line is None else [write_writes(line)])
    if isinstance(operation, Trim):
        cut = new.trim(operation.max_history, keep_finished_calls)
        return new, edit(new, [], rewrite=bool(cut) or new.holds_trimmed)
    if isinstance(operation, Remove):
        if not operation.keys:
            return new, Append()
        new.remove(set(operation.keys))
        return new, edit(new, [], rewrite=True)
    return new, edit(new, [], rewrite=new.keep_latest(keep_finished_calls))


def _put(history: History, put: Put, keep: bool) -> Edit:
    line = put.line
    rewrite = history.put(line, put.writes, keep_finished_calls=keep)
    entry: Entry | None = history.entries.get((line.ns, line.id))
    if entry is not None and entry.line is line and put.lists:
        entry.keep_list_json(put.lists)
    if rewrite or history.must_rewrite:
        if put.max_history is not None:
            history.trim(put.max_history, keep)
        return edit(history, [], rewrite=True)
    added = [line.text]
    if put.writes and entry is not None:
        tasks = {w.task_id for w in put.writes}
        mine = {k: v for k, v in entry.writes.items() if k[0] in tasks}
        added.extend(write_writes(w) for w in history.writes_records(line.ns, line.id, mine))
    appended = edit(history, added)
    if put.max_history is not None:
        before = dict(history.dropped)
        cut = history.trim(put.max_history, keep)
        if cut:  # trimming appends floors, and rewrites only once the string holds twice what it needs
            return trimmed(history, cut, before, added)
    return appended
