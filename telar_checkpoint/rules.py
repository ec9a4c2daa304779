"""The rules of a history: everything that decides what a change keeps, replaces or drops.

`apply(history, operation)` is the one entry: it changes a copy of `history` (readers may
hold the one given) and returns it with the edit that turns the string the history was
read from into the string of the new one, `Append(lines)` or `Rewrite(text)`, as
`compaction` decides from the facts the history gives it. Every rule of docs/FORMAT.md
("The rules of a history") lives here, beside the operation it serves:

- a put: its line built against its parent (lists that only grew stored as what they added,
  values LangGraph did not change stored by reference), the branch a run that moves on
  leaves behind replaced, finished subgraph calls dropped, then the last `max_history` kept;
- pending writes folded into their checkpoint (a `WritesLine` is the operation itself);
- trim, keep-latest and remove, each keeping what a `DeltaChannel` needs;
- a thread deleted, and the writes of its runs refused after it (`DeleteThread`).

Pure, like a sans-IO protocol: values in, values out. Operations are values: nothing changes
one once it is made (plain slotted dataclasses, not frozen ones, by convention only: a frozen
dataclass's init costs twice as much, on every put). `tests/test_rules.py` is their table.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from telar_checkpoint.compaction import MAX_CHAIN, Append, Edit, edit, trimmed
from telar_checkpoint.errors import ThreadDeletedError, UsageError
from telar_checkpoint.format import SAME, CheckpointLine, DroppedLine, WritesLine, write_checkpoint, write_writes
from telar_checkpoint.history import Entry, History, Key, merge_writes

REPLACED_IDS_KEPT = 1000  # replaced ids remembered per thread, to say "replaced" not "absent"
_FORKS = ("fork", "update")  # sources that start a branch
_MOVES_ON = ("loop", "input")  # sources that move a branch on

# --- operations ---------------------------------------------------------------------


@dataclass(slots=True)
class Put:
    """One put, from `TelarSaver.put` to its stored line: checkpoint `id` of namespace `ns`, child
    of `parent`, with what it holds encoded when it was given (`CheckpointCodec.prepare`).

    `metadata` is plain JSON; `checkpoint` the plain checkpoint fields (`PLAIN_CHECKPOINT_KEYS`);
    `extra` the other fields, encoded; `values` the channels encoded at once (those LangGraph
    changed). `channel_values` is the state as given: a channel not in `values` is stored as
    its parent's value when its version is the parent's, else encoded by `encode`. `writes`:
    its tasks' writes, a line a task. Then the last `max_history` checkpoints of each namespace
    are kept (None: all). `terms`: its metadata's index terms (None: the store keeps no index)."""

    ns: str
    id: str
    parent: str | None
    metadata: dict[str, Any]
    checkpoint: dict[str, Any]
    extra: dict[str, Any]
    values: dict[str, Any]
    channel_values: dict[str, Any] = field(default_factory=dict)
    writes: Sequence[WritesLine] = ()
    max_history: int | None = None
    terms: set[str] | None = None
    encode: Callable[[Any], Any] | None = None


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


@dataclass(slots=True)
class DeleteThread:
    """Delete the thread, leaving only its record (the root `dropped` line's `deleted_before` and
    `deleted_at`): a later write made by a run of the deleted thread is refused (which ones:
    `_refuse_if_deleted`, `add_writes`). `before` is the greatest checkpoint id a run could
    have made by then (`lifetime.deletion`), `at` its time."""

    before: str
    at: str


Operation = Put | WritesLine | Trim | Remove | KeepLatest | DeleteThread
"""A change of a history as a value; a `WritesLine` is one task's pending writes."""


def apply(history: History, operation: Operation, *, keep_finished_calls: bool = False) -> tuple[History, Edit]:
    """The history after `operation`, and the edit of its string. `history` is left as it was.
    `keep_finished_calls`: see `finished_calls`. The new history counts the lines the edit
    appends: it stands for the edited string."""
    new = history.clone()
    made: Edit
    if type(operation) is Put:
        made = _put(new, operation, keep_finished_calls)
    elif type(operation) is WritesLine:
        line = add_writes(new, operation)
        made = edit(new, [] if line is None else [write_writes(line)])
    elif isinstance(operation, Trim):
        cut = trim(new, operation.max_history, keep_finished_calls)
        made = edit(new, [], rewrite=bool(cut) or new.holds_trimmed)
    elif isinstance(operation, DeleteThread):
        new = delete_thread(history, operation)
        made = edit(new, [], rewrite=True)
    elif isinstance(operation, Remove):
        if not operation.keys:
            return new, Append()
        remove(new, set(operation.keys))
        made = edit(new, [], rewrite=True)
    else:
        assert isinstance(operation, KeepLatest)
        made = edit(new, [], rewrite=keep_latest(new, keep_finished_calls))
    if type(made) is Append and made.lines:
        new.count_appended(made.lines)
    return new, made


# --- a put ----------------------------------------------------------------------------


def _put(history: History, put: Put, keep: bool) -> Edit:
    parent = history.entries.get((put.ns, put.parent)) if put.parent is not None else None
    if parent is None and history.dropped and history.deletion_record is not None:
        _refuse_if_deleted(history, put)
    line, lists = checkpoint_line(put, parent)
    changed = put_line(history, line, put.writes, keep)  # dropped or updated a stored line
    entry: Entry | None = history.entries.get((line.ns, line.id))
    if entry is not None and entry.line is line and lists:
        entry.list_json.update(lists)  # for the next put of the namespace to compare its lists with
    added = [] if changed else [line.text]
    if put.writes and entry is not None and not changed:
        tasks = {w.task_id for w in put.writes}
        mine = {k: v for k, v in entry.writes.items() if k[0] in tasks}
        added.extend(write_writes(w) for w in history.writes_records(line.ns, line.id, mine))
    if put.max_history is not None:
        before = dict(history.dropped)
        cut = trim(history, put.max_history, keep)
        if cut and not changed:  # trimming appends floors, and rewrites only once the string holds twice what it needs
            floors = _floors(history, cut, before)
            made = trimmed(history, added, floors)
            if floors is not None and type(made) is Append:
                history.floors_appended += len(floors)
            return made
    return edit(history, added, rewrite=changed)


def checkpoint_line(put: Put, parent: Entry | None) -> tuple[CheckpointLine, dict[str, tuple[bytes, int, int]]]:
    """The put's line, built against its stored `parent`: its values encoded, list channels that
    only grew since the parent stored as the items they added; and the JSON text, length and
    depth of the lists compared on the way (kept for the next put, `Entry.take_list_json`).

    `put.values` holds the channels encoded when the put was given. Another channel whose
    version is the parent's holds the parent's value: LangGraph gives a channel a new version
    whenever it updates it, and its own savers store a value once per version. So it is not
    encoded again: a list is stored as nothing added, an object as a reference to the parent's
    (`SAME`), a scalar as the parent's encoding. Every other value is encoded whole, and a list
    is then compared with the parent's as JSON (`_appended`): what is stored is the value given.
    """
    encoded = put.values
    values: dict[str, Any] = {}
    unchanged: dict[str, list[Any]] = {}
    versions = put.checkpoint.get("channel_versions") or {}
    parent_versions = (parent.line.checkpoint.get("channel_versions") or {}) if parent is not None else {}
    for channel, value in put.channel_values.items():
        if channel in encoded:
            values[channel] = encoded[channel]
            continue
        version = versions.get(channel)
        if version is not None and parent is not None and version == parent_versions.get(channel) and parent.has(channel):
            resolved = parent.value(channel)
            if parent.depth(channel) >= MAX_CHAIN:
                values[channel] = resolved  # whole again: a reader never walks back more than MAX_CHAIN lines
            elif type(resolved) is list and resolved:
                unchanged[channel] = []  # the parent's list, with nothing added
            elif type(resolved) is dict:
                values[channel] = SAME  # the parent's value, by reference: it may be large
            else:
                values[channel] = resolved  # a scalar or an empty list: as short as a reference
            continue
        if put.encode is None:
            raise UsageError(f"channel {channel!r} of checkpoint {put.id} is not encoded, and the put has no encoder")
        values[channel] = put.encode(value)
    appended, lists = _appended(values, parent) if parent is not None else ({}, {})
    appended.update(unchanged)
    # ns, id, parent, metadata, checkpoint, extra, values, appended (by position: keywords
    # make this init twice as slow, on every put)
    line = CheckpointLine(put.ns, put.id, put.parent, put.metadata, put.checkpoint, put.extra, values, appended)
    line.text = write_checkpoint(line)
    return line, lists


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


def put_line(history: History, line: CheckpointLine, writes: Iterable[WritesLine] = (), keep_finished_calls: bool = False) -> bool:
    """Store a checkpoint line with its tasks' `writes`; True when others were dropped or one
    was updated in place (the string must then be rewritten).

    A checkpoint that moves a run on (a `loop` or `input` checkpoint whose parent is stored)
    replaces the branch it leaves behind (`_replace_for`), unless it moves on from the head,
    which no fork made (the common case). Then the subgraph calls that are over go
    (`finished_calls`)."""
    ns, parent = line.ns, line.parent
    key = (ns, line.id)
    in_place = key in history.entries
    if parent == line.id or ((in_place or key in history.awaited) and _would_cycle(history, line)):
        raise UsageError(f"checkpoint {line.id} cannot be its own ancestor (its parent is {parent})")
    head = history.latest(ns)  # before this put
    history.add_line(line)
    if writes:
        target = history.writes_for(key)
        for task_writes in writes:
            merge_writes(target, task_writes)
    replaced = False
    if not in_place and parent is not None and line.metadata.get("source") in _MOVES_ON:
        from_head = head is not None and head.line.id == parent and head.line.metadata.get("source") not in _FORKS
        if not from_head and (ns, parent) in history.entries:
            replaced = bool(_replace_for(history, line))
    finished = bool(history.calls) and bool(_drop_finished_calls(history, keep_finished_calls))
    return in_place or replaced or finished


def _would_cycle(history: History, line: CheckpointLine) -> bool:
    """Whether storing `line` closes a loop of parent links: its parent's ancestors lead back
    to it. Only a checkpoint already stored, or named as a parent by one (`History.awaited`), can."""
    chain = history.parent_chain(line.ns, line.parent)
    return line.id in chain or (bool(chain) and history.entries[(line.ns, chain[-1])].line.parent == line.id)


def _replace_for(history: History, line: CheckpointLine) -> set[Key]:
    """`line` moves a run on from a stored parent (see `put_line`): drop every checkpoint of its
    namespace that branches off its path, as the history is the path that led to the current
    state (see docs/FORMAT.md, "Replacement"); what went."""
    ns = line.ns
    path = history.parent_chain(ns, line.id)
    on_path = set(path)
    oldest = history.entries[(ns, path[-1])].line
    # Where the path's oldest stored checkpoint has a parent that is gone (trimmed), a
    # branch cannot be traced to it: what stands at or after that step branches off.
    cut_from = oldest.step if oldest.parent is not None and oldest.parent not in on_path else None
    members = history.in_ns(ns)
    parent_of = {e.line.id: e.line.parent for e in members}
    # A fork or update off the path that no run moved on from is a point travelled to and
    # left: it goes too, even where trimming hides what it branched from.
    moved_on: set[str] = set()
    for entry in members:
        if entry.line.source in _MOVES_ON:
            cid = entry.line.parent
            while cid is not None and cid in parent_of and cid not in moved_on:
                moved_on.add(cid)
                cid = parent_of[cid]
    reaches_path = dict.fromkeys(on_path, True)  # id -> whether its parent links reach the path
    doomed: set[Key] = set()
    for entry in members:
        cid = entry.line.id
        if cid in on_path:
            continue
        if (
            (cut_from is not None and entry.line.step >= cut_from)
            or (entry.line.source in _FORKS and cid not in moved_on)
            or _reaches(entry.line.parent, parent_of, reaches_path)
        ):
            doomed.add((ns, cid))
    history.drop(doomed)
    _remember(history, doomed, "replaced")
    return doomed


def _reaches(cid: str | None, parent_of: dict[str, str | None], known: dict[str, bool]) -> bool:
    """Whether following parents from `cid` reaches an id `known` says True for; what it
    learns on the way goes into `known`, so a pass over a namespace stays linear."""
    chain: list[str] = []
    while cid is not None and cid in parent_of and cid not in known:
        known[cid] = False  # provisional: a cycle ends here
        chain.append(cid)
        cid = parent_of[cid]
    result = known.get(cid, False) if cid is not None else False
    for walked in chain:
        known[walked] = result
    return result


def _remember(history: History, keys: Iterable[Key], kind: str) -> None:
    """List the ids of `keys` in their namespaces' `dropped` records (`kind` "replaced" or
    "deleted"), then keep the newest `REPLACED_IDS_KEPT` of that kind in the thread: the
    smallest ids go (the first of equal ones), in one pass over the records."""
    for ns, cid in sorted(keys):
        getattr(history.dropped.setdefault(ns, DroppedLine(ns, None)), kind).append(cid)
    lists = [getattr(d, kind) for d in history.dropped.values()]
    excess = sum(map(len, lists)) - REPLACED_IDS_KEPT
    if excess <= 0:
        return
    gone = {(i, j) for _cid, i, j in heapq.nsmallest(excess, ((cid, i, j) for i, ids in enumerate(lists) for j, cid in enumerate(ids)))}
    for i, ids in enumerate(lists):
        ids[:] = [cid for j, cid in enumerate(ids) if (i, j) not in gone]


# --- finished subgraph calls ----------------------------------------------------------


def finished_calls(history: History, keep_finished_calls: bool = False) -> list[str]:
    """The subgraph-call namespaces to drop: those whose call is over, because a graph that
    encloses the call (`parents`) stored a checkpoint after the call's latest one: it moved
    on (or forked) since. LangGraph never resumes such a call; the enclosing checkpoint holds
    its result. (A replay on langgraph 1.0 runs a call under an old checkpoint without
    storing a newer one first: the call is newer than everything, so it is not over.)

    With `keep_finished_calls`, a call that is over stays while every checkpoint it ran
    under is stored, so the subgraph state of a past step can be inspected (LangGraph's
    `StateSnapshot.tasks[i].state`), as LangGraph's savers allow."""
    finished = []
    for ns in sorted(history.calls):
        entry = history.latest(ns)
        if entry is None:
            history.calls.discard(ns)
            continue
        over, under_stored = False, True
        for outer, cid in (entry.line.metadata.get("parents") or {}).items():
            head = history.latest(outer) if outer != ns else None
            over = over or (head is not None and head.line.id > entry.line.id)
            under_stored = under_stored and (outer, cid) in history.entries
        if over and not (keep_finished_calls and under_stored):
            finished.append(ns)
    return finished


def _drop_finished_calls(history: History, keep_finished_calls: bool = False) -> set[Key]:
    """Drop the namespaces of `finished_calls`, with their writes and records; what went."""
    finished = set(finished_calls(history, keep_finished_calls)) if history.calls else set()
    if not finished:
        return set()
    gone = {key for key in history.entries if key[0] in finished}
    history.drop(gone)
    for key in [k for k in history.orphans if k[0] in finished]:
        del history.orphans[key]
    for ns in finished:
        history.dropped.pop(ns, None)
        history.calls.discard(ns)
    return gone


# --- pending writes -------------------------------------------------------------------


def add_writes(history: History, line: WritesLine) -> WritesLine | None:
    """Fold a task's writes into their checkpoint; the line to append (the writes that
    changed something), or None if nothing changed.

    Regular writes (idx >= 0) already stored are kept as they are; special ones (negative
    idx: errors, interrupts, resumes) overwrite. Writes that arrive after their checkpoint was
    dropped (trimmed or replaced while they were on their way, with async durability) are not
    stored: nothing reads them."""
    ns, cid = line.ns, line.checkpoint_id
    if (ns, cid) not in history.entries:
        if history.in_deleted_thread(ns, cid):
            raise ThreadDeletedError(
                history.thread_id, ns, cid, history.dropped[""].deleted_at,
                f"task {line.task_id}'s writes are for checkpoint {cid}, which was in it",
            )
        if history.dropped_reason(ns, cid) is not None:
            return None
    changed = merge_writes(history.writes_for((ns, cid)), line)
    if not changed:
        return None
    return line if len(changed) == len(line.writes) else WritesLine(ns, cid, line.task_id, line.task_path, changed)


def _refuse_if_deleted(history: History, put: Put) -> None:
    """ThreadDeletedError when the put was made by a run of the deleted thread: its parent is a
    checkpoint the thread does not hold that was in it (up to the mark) or that it never held
    (nor dropped), made by that run after the deletion; or a subgraph's enclosing checkpoint
    (`parents`) was in it. (An enclosing checkpoint newer than the mark may be on its way.)"""
    root = history.dropped[""]
    mark = root.deleted_before or ""
    under = []
    if put.parent is not None and (put.parent <= mark or history.dropped_reason(put.ns, put.parent) is None):
        under.append(put.parent)
    parents = put.metadata.get("parents")
    if type(parents) is dict:
        under.extend(cid for ns, cid in parents.items() if type(cid) is str and history.in_deleted_thread(ns, cid))
    if under:
        raise ThreadDeletedError(
            history.thread_id, put.ns, put.id, root.deleted_at,
            f"checkpoint {put.id} continues checkpoint {under[0]}, of the deleted thread",
        )


def delete_thread(history: History, operation: DeleteThread) -> History:
    """The history of the deleted thread: only its record (see `DeleteThread`), its mark never
    lower than an id `history` named."""
    deleted = History(history.thread_id)
    before = max(operation.before, history.max_id() or "")
    deleted.dropped[""] = DroppedLine("", None, deleted_before=before, deleted_at=operation.at)
    return deleted


# --- remove, keep latest, trim ----------------------------------------------------------


def remove(history: History, keys: set[Key]) -> None:
    """Remove checkpoints and their writes on request: they read as absent afterwards, and
    are listed as `deleted` so that a check knows a dangling parent is no damage."""
    history.drop(keys)
    _remember(history, keys, "deleted")


def keep_latest(history: History, keep_finished_calls: bool = False) -> bool:
    """Keep the latest checkpoint of each namespace (and its DeltaChannel ancestors); what
    goes counts as trimmed. Whether anything went."""
    cut: set[Key] = set()
    for ns in history.namespaces():
        _keep_last(history, ns, history.in_ns(ns), 1, cut)
    if cut:
        history.drop(cut)
        _set_floors(history, {ns for ns, _ in cut})
    return bool(_drop_finished_calls(history, keep_finished_calls)) or bool(cut)


def trim(history: History, max_history: int, keep_finished_calls: bool = False) -> set[Key]:
    """Keep the last `max_history` checkpoints of each namespace, and the ancestors a kept
    checkpoint needs to rebuild `DeltaChannel` state. Returns what was cut.

    The namespaces a thread holds are the root, each persistent subgraph's and the
    subgraph calls still in progress (`finished_calls` go on every put), so this bounds
    the whole thread (see docs/FORMAT.md, "History depth")."""
    cut: set[Key] = set()
    by_ns: dict[str, list[Entry]] = {}
    for (ns, _), entry in history.entries.items():
        by_ns.setdefault(ns, []).append(entry)
    for ns, members in by_ns.items():
        _keep_last(history, ns, members, max_history, cut)
    if not cut:
        return set()
    history.drop(cut)
    _set_floors(history, {ns for ns, _ in cut})
    for key in [k for k in history.orphans if history.dropped_reason(*k) == "trimmed"]:
        del history.orphans[key]
    if keep_finished_calls:  # the calls that ran under what was cut go with it
        cut |= _drop_finished_calls(history, True)
    return cut


def _floors(history: History, cut: set[Key], before: dict[str, DroppedLine]) -> list[DroppedLine] | None:
    """After `trim` cut `cut` from a history whose `dropped` records were `before`: the
    `dropped` records whose lines, appended, trim the stored string as it did the history (see
    `History.apply_floor`), or None when only a rewrite can say it: something cut is not below
    its namespace's floor, or a namespace's record went away."""
    touched = {ns for ns, _ in cut}
    for ns, cid in cut:
        record = history.dropped.get(ns)
        if record is None or record.floor is None or not cid < record.floor:
            return None
    for ns, record in before.items():
        if ns not in touched and history.dropped.get(ns) is not record:
            return None
    return [history.dropped[ns] for ns in touched]


def _set_floors(history: History, namespaces: set[str]) -> None:
    for ns in namespaces:
        remaining = history.in_ns(ns)
        record = history.dropped.setdefault(ns, DroppedLine(ns, None))
        record.floor = min((e.line.id for e in remaining), default=record.floor)


def _keep_last(history: History, ns: str, members: list[Entry], n: int, cut: set[Key]) -> set[str]:
    ordered = sorted(members, key=lambda e: e.line.id)
    keep = {e.line.id for e in ordered[-n:]} if n > 0 else set()
    for entry in ordered[-n:] if n > 0 else []:
        keep.update(_delta_ancestors(history, ns, entry))
    cut.update((ns, e.line.id) for e in ordered if e.line.id not in keep)
    return keep


def _delta_ancestors(history: History, ns: str, entry: Entry) -> list[str]:
    """Ancestors back to the nearest stored value of each DeltaChannel `entry` rebuilds."""
    counters = entry.line.metadata.get("counters_since_delta_snapshot") or {}
    needed = {ch for ch in counters if not entry.has(ch)}
    chain: list[str] = []
    for cid in history.ancestors(ns, entry.line.parent) if needed else ():
        ancestor = history.entries[(ns, cid)].line
        chain.append(cid)
        needed -= ancestor.values.keys() | ancestor.appended.keys()
        if not needed:
            break
    return chain


