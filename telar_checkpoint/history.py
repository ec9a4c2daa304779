"""A thread's history in memory: parsed lines, their lookups, and the facts the rules read.

`History.parse` reads a stored string (dropping a torn last line, one with no newline),
`render` writes the canonical string back (`format.render`). Once read, a history is
changed only by `rules.apply`, on a copy (`clone`), through the few primitives here
(`add_line`, `writes_for`, `drop`, `count_appended`); what a change keeps, replaces or
drops is decided in `rules`, and when a string is appended to or rewritten in `compaction`.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from telar_checkpoint.entries import Entries
from telar_checkpoint.errors import CorruptLineError
from telar_checkpoint.format import (
    CheckpointLine,
    DroppedLine,
    WritesLine,
    checkpoint_time,
    is_same,
    read_stored_line,
    render,
    write_checkpoint,
)

_ABSENT: Any = object()
RESIDUE_SECONDS = 300.0
"""How much older than its namespace's latest checkpoint a checkpoint not stored must be for its
pending writes to count as a crash's residue (`History.is_residue`): a put racing another run's
lands within seconds."""

WriteKey = tuple[str, int]  # (task_id, idx)
Write = tuple[str, Any, str]  # (channel, encoded value, task_path)
Key = tuple[str, str]  # (namespace, checkpoint id)


def is_call(ns: str) -> bool:
    """Whether `ns` is the namespace of one subgraph call: LangGraph names it after the node
    and the task (`node:<task id>`, nested with `|`). The root ("") and a persistent subgraph's
    namespace (compiled with `checkpointer=True`: no task id) hold state that later calls read."""
    return ":" in ns


@dataclass(slots=True, eq=False)
class Entry:
    """One stored checkpoint and its pending writes.

    `base` is the parent entry whose values the line builds on: the lists its `appended`
    channels extend, and the values it holds by reference (`is_same`).
    Entries are shared between a history and its copies, so none is changed once made (by
    convention: not a frozen dataclass, whose init costs twice as much on every put): a change
    makes a new entry (its `writes` dict is its own from then on, see `History.writes_for`).
    `_full` is a memo of what its values resolve to, filled as they are read; `list_json` the
    JSON text, length and depth of its list channels, left by the put that made it for the next
    put of its namespace to compare with (`take_list_json`).
    """

    line: CheckpointLine
    writes: dict[WriteKey, Write] = field(default_factory=dict)
    base: Entry | None = None
    _full: dict[str, Any] = field(default_factory=dict)
    list_json: dict[str, tuple[bytes, int, int]] = field(default_factory=dict)  # list channel -> (its JSON, length, depth)
    _depths: dict[str, int] = field(default_factory=dict)  # channel -> `depth` (a memo; it follows `base`)

    def has(self, channel: str) -> bool:
        return channel in self.line.values or channel in self.line.appended

    def _holds(self, channel: str) -> bool:
        """Whether the line itself holds the whole value of `channel` (not extends or repeats it)."""
        value = self.line.values.get(channel, _ABSENT)
        return value is not _ABSENT and not is_same(value)

    def value(self, channel: str) -> Any:
        """The encoded value of `channel`, resolved against its bases: an appended list, or a
        value repeated by reference."""
        if self._holds(channel):
            return self.line.values[channel]
        full = self._full.get(channel)
        if full is None:
            chain, entry = [], self
            while not entry._holds(channel):
                chain.append(entry)
                if entry.base is None:
                    raise KeyError(channel)
                entry = entry.base
                if channel in entry._full:
                    break
            start = entry._full.get(channel, _ABSENT)
            if start is _ABSENT:
                start = entry.line.values[channel]
            if type(start) is list:
                # Only the newest entry of a chain keeps its whole list: memory stays O(state), not O(history).
                entry._full.pop(channel, None)
                full = list(start)
                for link in reversed(chain):
                    full.extend(link.line.appended.get(channel, ()))
            else:  # a value repeated by reference: shared, never copied
                full = start
            self._full[channel] = full
        return full

    def take_list_json(self, channel: str) -> tuple[bytes, int, int] | None:
        """The JSON text of the (list) value of `channel`, as `orjson.dumps` writes it, its length
        and the entry's `depth` there: kept in `list_json` and handed over (only the newest
        entry keeps it, so memory stays O(state)), or made now; None when it holds no list there."""
        kept = self.list_json.pop(channel, None)
        if kept is not None or not self.has(channel):
            return kept
        value = self.value(channel)
        return (orjson.dumps(value), len(value), self.depth(channel)) if type(value) is list else None

    def depth(self, channel: str) -> int:
        """How many lines that extend or repeat `channel` stand between this entry and its whole
        value: walked back to the first entry that knows its own (each remembers it), so a put
        pays for the lines it adds, not for the chain behind its parent."""
        walked: list[Entry] = []
        entry: Entry | None = self
        depth = 0  # of the entry the walk stopped at (none: past the oldest)
        while entry is not None:
            known = entry._depths.get(channel)
            if known is not None:
                depth = known
                break
            if entry._holds(channel):
                entry._depths[channel] = depth = 0
                break
            walked.append(entry)
            entry = entry.base
        for link in reversed(walked):
            depth += 1
            link._depths[channel] = depth
        return self._depths[channel]

    def whole(self) -> Entry:
        """This entry with every value it builds on its base written whole (for when its base goes)."""
        building = [*self.line.appended, *(ch for ch, v in self.line.values.items() if is_same(v))]
        if not building:
            return self
        values = {**self.line.values, **{ch: self.value(ch) for ch in building}}
        line = replace(self.line, values=values, appended={})
        line.text = write_checkpoint(line)
        return Entry(line, self.writes)


def merge_writes(target: dict[WriteKey, Write], line: WritesLine) -> list[tuple[int, str, Any]]:
    """Fold a task's writes into `target`: regular ones are idempotent, special (negative idx)
    ones overwrite. Returns the writes that changed something."""
    changed = []
    task_id, path = line.task_id, line.task_path
    for idx, channel, value in line.writes:
        key = (task_id, idx)
        if idx >= 0 and key in target:
            continue
        if target.get(key) == (channel, value, path):
            continue
        target[key] = (channel, value, path)
        changed.append((idx, channel, value))
    return changed


class _Below:
    """Heaps of the ids a history holds, so that a floor it reads drops what stands below it
    without a pass over the history: per namespace, its checkpoints and its orphan writes, and
    the orphan writes of every subgraph call (a root floor trims them too). Each id is pushed
    when it is read and popped at most once. A history builds it at the first floor it reads
    (`History._apply_floor`); a copy starts without it."""

    def __init__(self, history: History) -> None:
        self.entries: dict[str, list[str]] = {}
        self.orphans: dict[str, list[str]] = {}
        self.call_orphans: list[tuple[str, str]] = []  # (id, namespace)
        for ns, cid in history.entries:
            self.entries.setdefault(ns, []).append(cid)
        for key in history.orphans:
            self.orphan(*key)
        for heap in self.entries.values():
            heapq.heapify(heap)

    def entry(self, ns: str, cid: str) -> None:
        heapq.heappush(self.entries.setdefault(ns, []), cid)

    def orphan(self, ns: str, cid: str) -> None:
        heapq.heappush(self.orphans.setdefault(ns, []), cid)
        if is_call(ns):
            heapq.heappush(self.call_orphans, (cid, ns))


class History:
    """The checkpoints of one thread, in stored order, with their writes."""

    def __init__(self, thread_id: str | None = None) -> None:
        self.thread_id = thread_id
        self.entries: Entries[Key, Entry] = Entries()
        self.orphans: dict[Key, dict[WriteKey, Write]] = {}  # writes that came before their put
        self.dropped: dict[str, DroppedLine] = {}
        self.torn: str | None = None  # an unterminated last line, dropped on read
        # Lines a development build wrote (version 3) read since the string was last rendered:
        # the next change rewrites the thread, so that it holds versions 1 and 2 only.
        self.development_lines = 0
        self._latest: dict[str, str] = {}  # namespace -> latest id, kept while only appending
        self.line_count = 0  # complete lines of the string this history was read from or rendered to
        self.size = 0  # characters of those lines, newlines included
        # Whether the entries stand in the order of their ids (LangGraph's ids grow with time, so
        # they do unless puts arrived out of order): then the newest are the last (`newest`).
        self.in_id_order = True
        self._max_id = ""
        self.holds_trimmed = False  # the string still holds lines a later floor trimmed (see `_apply_floor`)
        self.floors_appended = 0  # dropped lines read or appended after checkpoint lines
        self.calls: set[str] = set()  # subgraph-call namespaces seen (some may be gone since)
        self.awaited: set[Key] = set()  # parents named by a checkpoint before they were stored
        self._below: _Below | None = None  # built by the first floor read (see `_apply_floor`)

    def clone(self) -> History:
        """A copy to change while readers keep using this one: its fields as they are, and its
        containers copied (the entries on write, see `Entries`), so that no change of the copy
        reaches this one. Only `rules.apply` changes a history once it is read."""
        other = object.__new__(type(self))
        other.__dict__.update(self.__dict__)
        other.entries = self.entries.copy()
        # (Most threads hold no orphan writes, dropped records, calls or awaited parents: a new
        # empty container is cheaper than a copy of one.)
        other.orphans = {k: dict(v) for k, v in self.orphans.items()} if self.orphans else {}
        other.dropped = (
            {
                ns: DroppedLine(ns, d.floor, list(d.replaced), list(d.deleted), d.schema, d.deleted_before, d.deleted_at, d.ttl)
                for ns, d in self.dropped.items()
            }
            if self.dropped else {}
        )
        other._latest = self._latest.copy()
        other.calls = set(self.calls) if self.calls else set()
        other.awaited = set(self.awaited) if self.awaited else set()
        other._below = None
        return other

    # --- reading and writing -------------------------------------------------

    @classmethod
    def parse(cls, thread_id: str | None, text: str | None) -> History:
        history = cls(thread_id)
        history.extend(text or "")
        return history

    def extend(self, text: str) -> None:
        """Read `text`, the lines that follow those already read, into this history."""
        if self.torn is not None:
            raise ValueError("cannot extend a history whose last line is torn")
        lines = text.split("\n")  # "\n" only: JSON may hold U+2028 raw
        tail = lines.pop()
        if tail:
            self.torn = tail
        thread_id, history = self.thread_id, self
        first_line = self.line_count
        self.line_count += len(lines)
        self.size += len(text) - len(tail)
        for number, raw in enumerate(lines, first_line + 1):
            if not raw.strip():
                continue  # a blank line holds nothing (`echo >> thread.jsonl`); a rewrite drops it
            line, development = read_stored_line(raw, thread_id, number)
            self.development_lines += development
            if isinstance(line, CheckpointLine):
                if history._below is not None and (line.ns, line.id) not in history.entries:
                    history._below.entry(line.ns, line.id)
                history.add_line(line, number)
            elif isinstance(line, WritesLine):
                key = (line.ns, line.checkpoint_id)
                entry = history.entries.get(key)
                if entry is None and key not in history.orphans and history._below is not None:
                    history._below.orphan(*key)
                target = entry.writes if entry is not None else history.orphans.setdefault(key, {})
                merge_writes(target, line)
            else:
                history.dropped[line.ns] = line
                if line.floor is not None and history.entries:
                    history.floors_appended += 1
                    history._apply_floor(line.ns)

    def render(self) -> str:
        """The canonical stored string (`format.render`), which this history then stands for:
        settled first (a line whose base is gone is written whole, crash residue goes)."""
        made_whole: dict[int, Entry] = {}  # id of a line written whole instead -> its entry
        for (ns, cid), entry in list(self.entries.items()):  # entries made whole are set as it goes
            if entry.base is not None:
                whole_base = made_whole.get(id(entry.base.line))
                if whole_base is not None:  # same values, so it may go on extending them
                    self.entries[(ns, cid)] = replace(entry, base=whole_base, _depths={})
                elif not self._base_kept(entry):  # what it extends is not written
                    made_whole[id(entry.line)] = self.entries[(ns, cid)] = entry.whole()
        for key in self.crash_residue():
            del self.orphans[key]
        out = render(
            self.dropped.values(),
            ((e.line, self.writes_records(ns, cid, e.writes)) for (ns, cid), e in self.entries.items()),
            (w for (ns, cid), writes in self.orphans.items() for w in self.writes_records(ns, cid, writes)),
        )
        text = "".join(line + "\n" for line in out)
        self.line_count, self.size = len(out), len(text)
        self.torn, self.holds_trimmed, self.floors_appended, self.development_lines = None, False, 0, 0
        return text

    def latest_alone(self) -> str | None:
        """The text of a history holding what a read of this thread's latest checkpoint needs, and
        no more: the root namespace's record and its latest checkpoint, values written whole, with
        its writes. None when a read needs more (a subgraph's checkpoint is newer, or none is stored)."""
        entry = self.latest("")
        if entry is None or entry.line.id != self._max_id or len(self.namespaces()) != 1:
            return None
        whole = entry.whole()
        root = self.dropped.get("")
        out = render([root] if root is not None else [], [(whole.line, self.writes_records("", whole.line.id, whole.writes))], [])
        return "".join(line + "\n" for line in out)

    def in_current_versions(self, text: str) -> str:
        """`text`, the string this history was read from, with every line in format version 1 or
        2: written again (from a copy) when it holds lines of a development build, else as it is."""
        return self.clone().render() if self.development_lines else text

    @property
    def must_rewrite(self) -> bool:
        """Whether the next change must rewrite the string rather than append to it: its last
        line is torn, or it holds lines of a development build (`development_lines`)."""
        return self.torn is not None or self.development_lines > 0

    def crash_residue(self) -> list[Key]:
        """Pending writes of checkpoints that were never stored and never will be (`is_residue`).
        A rewrite drops them."""
        return [(ns, cid) for ns, cid in self.orphans if self.is_residue(ns, cid)]

    def is_residue(self, ns: str, cid: str) -> bool:
        """Whether writes for `cid`, not stored, are what a crash left: a process killed between a
        step's writes and its checkpoint (LangGraph's async durability). Their id is older than
        the namespace's latest checkpoint, by more than `RESIDUE_SECONDS` when both ids tell their
        time: writes that come before their own put may be for an older checkpoint than the
        latest when another run writes the thread at the same time, and its put is on its way."""
        head = self.latest(ns)
        if head is None or cid >= head.line.id:
            return False
        made, latest = checkpoint_time(cid), checkpoint_time(head.line.id)
        return made is None or latest is None or latest - made > RESIDUE_SECONDS

    @staticmethod
    def writes_records(ns: str, cid: str, writes: dict[WriteKey, Write]) -> list[WritesLine]:
        """The writes of a checkpoint as lines to store: one per task."""
        by_task: dict[tuple[str, str], list[tuple[int, str, Any]]] = {}
        for (task_id, idx), (channel, value, path) in writes.items():
            by_task.setdefault((task_id, path), []).append((idx, channel, value))
        return [WritesLine(ns, cid, task_id, path, items) for (task_id, path), items in by_task.items()]

    # --- lookups ---------------------------------------------------------------

    def add_line(self, line: CheckpointLine, number: int | None = None) -> None:
        key = (line.ns, line.id)
        old = self.entries.get(key)
        parent = self.entries.get((line.ns, line.parent)) if line.parent is not None else None
        base = None
        repeated = [ch for ch, value in line.values.items() if is_same(value)]
        if line.appended or repeated:
            base = parent if line.parent else None
            if base is None:
                raise CorruptLineError(
                    f"builds on the values of checkpoint {line.parent}, which is not stored before it",
                    thread_id=self.thread_id, line=number,
                )
            for channel in line.appended:
                if not (channel in base.line.appended or isinstance(base.line.values.get(channel), list)):
                    raise CorruptLineError(
                        f"appends to channel {channel!r} of checkpoint {line.parent}, which holds no list there",
                        thread_id=self.thread_id, line=number,
                    )
            for channel in repeated:
                if not base.has(channel):
                    raise CorruptLineError(
                        f"repeats channel {channel!r} of checkpoint {line.parent}, which holds no value there",
                        thread_id=self.thread_id, line=number,
                    )
        if line.parent is not None and parent is None:
            self.awaited.add((line.ns, line.parent))
        self.awaited.discard(key)
        if old is None:
            self.in_id_order = self.in_id_order and line.id > self._max_id
            self._max_id = max(self._max_id, line.id)
        self.entries[key] = Entry(line, old.writes if old else self.orphans.pop(key, {}), base)
        if is_call(line.ns):
            self.calls.add(line.ns)
        latest = self._latest.get(line.ns)
        if latest is None or line.id > latest:
            self._latest[line.ns] = line.id

    def writes_for(self, key: Key) -> dict[WriteKey, Write]:
        """The writes of `key`, safe to change: an entry's dict is copied first (readers may share it)."""
        entry = self.entries.get(key)
        if entry is None:
            return self.orphans.setdefault(key, {})
        entry = self.entries[key] = Entry(entry.line, dict(entry.writes), entry.base, entry._full, entry.list_json)
        return entry.writes

    def _base_kept(self, entry: Entry) -> bool:
        """False when `entry` extends lists of a line this history no longer holds as it was
        (dropped, or updated in place): it must then be written whole. Until then the
        entry reads its values through the line it was written on."""
        base = entry.base
        if base is None:
            return True
        current = self.entries.get((base.line.ns, base.line.id))
        return current is not None and current.line is base.line

    def newest(self) -> Iterator[Entry]:
        """Every entry, newest id first: walked from the end when the entries stand in id order,
        so taking the first few costs as much as they do, whatever the length of the thread."""
        if self.in_id_order:
            return (self.entries[key] for key in reversed(self.entries))
        return iter(sorted(self.entries.values(), key=lambda e: e.line.id, reverse=True))

    def in_ns(self, ns: str) -> list[Entry]:
        return [e for (n, _), e in self.entries.items() if n == ns]

    def namespaces(self) -> list[str]:
        return list(dict.fromkeys(ns for ns, _ in self.entries))

    def latest(self, ns: str) -> Entry | None:
        cid = self._latest.get(ns)
        entry = self.entries.get((ns, cid)) if cid is not None else None
        if entry is None:
            entry = max(self.in_ns(ns), key=lambda e: e.line.id, default=None)
            if entry is None:
                return None
            self._latest[ns] = entry.line.id
        return entry

    def get(self, ns: str, cid: str) -> Entry | None:
        return self.entries.get((ns, cid))

    def dropped_reason(self, ns: str, cid: str) -> str | None:
        """"replaced" or "trimmed" when the thread held `cid` and dropped it, else None."""
        here = self.dropped.get(ns)
        if here is not None and cid in here.replaced:
            return "replaced"
        floors = [here.floor if here else None]
        if is_call(ns):  # a call's checkpoints are older than the root checkpoint it ran under
            floors.append(self.dropped.get("", DroppedLine("", None)).floor)
        for floor in floors:
            if floor is not None and cid < floor:
                return "trimmed"
        return None

    def cycles(self) -> list[Key]:
        """The checkpoints whose parent links loop (a hand edit, or an import of one): a reader
        stops there, `verify` reports them."""
        looping: list[Key] = []
        for ns in self.namespaces():
            parent_of = {e.line.id: e.line.parent for e in self.in_ns(ns)}
            state: dict[str, int] = {}  # 1: on the walk under way, 2: done
            for start in parent_of:
                walk: list[str] = []
                cid: str | None = start
                while cid is not None and cid in parent_of and cid not in state:
                    state[cid] = 1
                    walk.append(cid)
                    cid = parent_of[cid]
                if cid is not None and state.get(cid) == 1:  # came back to this walk: a loop
                    looping.extend((ns, member) for member in walk[walk.index(cid):])
                for member in walk:
                    state[member] = 2
        return looping

    def parent_chain(self, ns: str, cid: str | None) -> list[str]:
        """`cid` and its stored ancestors in `ns`, newest first; stops at a cycle."""
        return list(self.ancestors(ns, cid))

    def ancestors(self, ns: str, cid: str | None) -> Iterator[str]:
        """`parent_chain`, walked as it is read (a caller that stops early pays for what it read)."""
        seen: set[str] = set()
        while cid is not None and cid not in seen:
            entry = self.entries.get((ns, cid))
            if entry is None:
                return
            seen.add(cid)
            yield cid
            cid = entry.line.parent

    # --- what a change of the rules is made of -----------------------------------

    def drop(self, keys: set[Key]) -> None:
        """Remove checkpoints and their pending writes (each namespace's latest known again after)."""
        if not keys:
            return
        for key in keys:
            del self.entries[key]
        for key in [k for k in self.orphans if k in keys]:
            del self.orphans[key]
        for ns in {ns for ns, _ in keys}:
            self._relearn_latest(ns)

    def _relearn_latest(self, ns: str) -> None:
        """Learn the namespace's latest id from its entries again, after some were dropped: an id
        left unknown would let the next line added pass for the latest, newer ones stored or not."""
        newest = max((e.line.id for e in self.in_ns(ns)), default=None)
        if newest is None:
            self._latest.pop(ns, None)
        else:
            self._latest[ns] = newest

    @property
    def schema_version(self) -> int:
        """The state schema version the thread is stored at: its `dropped` records' `schema`,
        else 1 (docs/SCHEMA.md; not the format version)."""
        return max((d.schema for d in self.dropped.values() if d.schema is not None), default=1)

    def was_deleted(self, ns: str, cid: str) -> bool:
        """True when `cid` was removed on request (it reads as absent, as LangGraph expects):
        by `delete_for_runs`, or with the whole thread (`in_deleted_thread`)."""
        here = self.dropped.get(ns)
        return (here is not None and cid in here.deleted) or self.in_deleted_thread(ns, cid)

    @property
    def deletion_record(self) -> DroppedLine | None:
        """The root record of the thread deleted under this thread id, if one was."""
        root = self.dropped.get("")
        return root if root is not None and root.deleted_before is not None else None

    @property
    def only_deleted(self) -> bool:
        """Whether the history is just the record of a deleted thread: no checkpoint since
        (every reader sees no thread; writes of checkpoints never stored may be waiting)."""
        return not self.entries and self.deletion_record is not None

    def in_deleted_thread(self, ns: str, cid: str) -> bool:
        """Whether checkpoint `cid` of `ns` was in a thread deleted under this id: not held, and
        not newer than the deletion (`DroppedLine.deleted_before`)."""
        record = self.deletion_record if self.dropped else None
        return record is not None and cid <= record.deleted_before and (ns, cid) not in self.entries  # type: ignore[operator]  # set on a record

    @property
    def newest_id(self) -> str:
        """The greatest checkpoint id put in this history since it was read ("" when none)."""
        return self._max_id

    @property
    def own_ttl(self) -> float | None:
        """The thread's own time-to-live in minutes (math.inf: never), None when it has none."""
        root = self.dropped.get("") if self.dropped else None
        return root.ttl if root is not None else None

    def max_id(self) -> str | None:
        """The greatest checkpoint id the history names: held, with writes waiting, or deleted."""
        ids = [cid for _ns, cid in self.entries] + [cid for _ns, cid in self.orphans]
        if (record := self.deletion_record) is not None:
            ids.append(record.deleted_before)  # type: ignore[arg-type]  # set on a record
        return max(ids, default=None)

    def needed_lines(self) -> int:
        """Lines of the canonical string: its dropped records, and each kept checkpoint with a
        line per task of its pending writes."""
        return len(self.dropped) + sum(1 + len({t for t, _ in e.writes}) for e in self.entries.values())

    def needed_size(self) -> int:
        """Characters of the checkpoint lines the kept checkpoints are read from: their own and
        the lines they extend or repeat (bases), each once."""
        seen: set[int] = set()
        size = 0
        for entry in self.entries.values():
            link: Entry | None = entry
            while link is not None and id(link.line) not in seen:
                seen.add(id(link.line))
                size += len(link.line.text) + 1
                link = link.base
        return size

    def count_appended(self, lines: Sequence[str]) -> None:
        """Count `lines`, appended to the string this history stands for."""
        self.line_count += len(lines)
        self.size += sum(map(len, lines)) + len(lines)  # each with its newline

    def _apply_floor(self, ns: str) -> None:
        """A `dropped` line read after checkpoint lines: what it says is trimmed goes (the
        checkpoints of `ns` below its floor, and the orphan writes that `dropped_reason` then
        calls trimmed). Lines that extend a trimmed line still read through it (see
        `_base_kept`). Each id is looked at once however many floors are read (`_Below`)."""
        floor = self.dropped[ns].floor
        assert floor is not None
        below = self._below = self._below or _Below(self)
        heap, dropped = below.entries.get(ns, []), False
        while heap and heap[0] < floor:
            key = (ns, heapq.heappop(heap))
            if key in self.entries:
                del self.entries[key]
                dropped = True
        if dropped:
            self._relearn_latest(ns)
            self.holds_trimmed = True
        replaced: dict[str, set[str]] = {}  # namespace -> its replaced ids, as a set, made when needed

        def forget(orphan_ns: str, cid: str) -> None:
            if (orphan_ns, cid) not in self.orphans:
                return
            if orphan_ns not in replaced:
                record = self.dropped.get(orphan_ns)
                replaced[orphan_ns] = set(record.replaced) if record is not None else set()
            if cid not in replaced[orphan_ns]:  # "trimmed", not "replaced" (see `dropped_reason`)
                del self.orphans[(orphan_ns, cid)]

        heap = below.orphans.get(ns, [])
        while heap and heap[0] < floor:
            forget(ns, heapq.heappop(heap))
        while ns == "" and below.call_orphans and below.call_orphans[0][0] < floor:
            cid, call_ns = heapq.heappop(below.call_orphans)
            forget(call_ns, cid)

