"""The rules of a history: an operation applied to a history gives a new one and an edit.

`apply(history, operation)` never changes the history it is given (readers may hold it):
it changes a copy and returns it with the edit that turns the string the history was read
from into the string of the new one: `Append(lines)`, the common case, or `Rewrite(text)`.
The codec applies edits to strings, the saver appends or rewrites in its store; neither
knows the rules. Like a sans-IO protocol: values in, values out, no I/O.

Edits and operations are values: nothing changes one once it is made. They are plain slotted
dataclasses, not frozen ones, by convention only: a frozen dataclass's init costs twice as
much, and a put makes several of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from telar_checkpoint.format import CheckpointLine, WritesLine, write_writes
from telar_checkpoint.history import Entry, History, Key

# --- edits: what an operation does to the stored string ---------------------------------


@dataclass(slots=True)
class Append:
    """Add these lines at the end of the string (none: the string stays as it is)."""

    lines: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        """The lines, each followed by a newline."""
        return "\n".join(self.lines) + "\n" if self.lines else ""


@dataclass(slots=True)
class Rewrite:
    """Replace the whole string with `text`."""

    text: str


Edit = Append | Rewrite


def edited(stored: str | None, edit: Edit) -> str:
    """The string `stored` after `edit`."""
    if isinstance(edit, Rewrite):
        return edit.text
    if not edit.lines:
        return stored or ""  # the very string given: a caller may tell "unchanged" by identity
    return (stored or "") + edit.text


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
    """The history after `operation`, and the edit of its string. `history` is left as it
    was. `keep_finished_calls`: see `History.finished_calls`."""
    new = history.clone()
    if isinstance(operation, Put):
        return new, _put(new, operation, keep_finished_calls)
    if isinstance(operation, AddWrites):
        line = new.add_writes(operation.line)
        if new.must_rewrite:
            return new, Rewrite(new.render())
        return new, _appended(new, [] if line is None else [write_writes(line)])
    if isinstance(operation, Trim):
        cut = new.trim(operation.max_history, keep_finished_calls)
        rewrite = bool(cut) or new.must_rewrite or new.holds_trimmed
    elif isinstance(operation, Remove):
        if not operation.keys:
            return new, Append()
        new.remove(set(operation.keys))
        rewrite = True
    else:
        rewrite = new.keep_latest(keep_finished_calls) or new.must_rewrite
    return new, Rewrite(new.render()) if rewrite else Append()


def _appended(history: History, lines: list[str]) -> Append:
    history.count_appended(lines)
    return Append(tuple(lines))


def _put(history: History, put: Put, keep: bool) -> Edit:
    line = put.line
    rewrite = history.put(line, put.writes, keep_finished_calls=keep)
    entry: Entry | None = history.entries.get((line.ns, line.id))
    if entry is not None and entry.line is line and put.lists:
        entry.keep_list_json(put.lists)
    if rewrite or history.must_rewrite:
        if put.max_history is not None:
            history.trim(put.max_history, keep)
        return Rewrite(history.render())
    added = [line.text]
    if put.writes and entry is not None:
        tasks = {w.task_id for w in put.writes}
        mine = {k: v for k, v in entry.writes.items() if k[0] in tasks}
        added.extend(write_writes(w) for w in history.writes_records(line.ns, line.id, mine))
    history.count_appended(added)
    if put.max_history is not None:
        before = dict(history.dropped)
        cut = history.trim(put.max_history, keep)
        if cut:
            # Trimming appends floors, and rewrites only once the string holds twice what it needs.
            floors = history.floor_lines(cut, before)
            if floors is None:
                return Rewrite(history.render())
            added.extend(floors)
            history.count_appended(floors)
    return Append(tuple(added))
