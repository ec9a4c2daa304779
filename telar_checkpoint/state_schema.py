"""Versioned state-schema migrations, their pure core: stored threads follow the graph when it changes.

A `Schema` names the state schema's current version and, for each version after 1, the steps
that bring a thread from the version before to it::

    schema = Schema(version=3, steps={
        2: [rename_channel("notes", "memo"), rename_node("ask", "ask_user")],
        3: [map_channel("memo", str.strip), drop_channel("scratch")],
    })
    saver = TelarSaver("threads/", schema=schema)

Each thread records the version it is stored at in its root namespace's `dropped` line
(`"schema"`, docs/FORMAT.md); a thread without one is at version 1. A step applies to every
kept checkpoint of every namespace and to the pending writes.

This module is the pure core: the steps, `Schema`, `upgrade_text(thread_id, text, schema,
values)`, which gives the upgraded text of a thread (or None when there is nothing to do), and
`SchemaThreads`, what a saver made with `schema=` keeps: it reads older threads through it,
upgraded in memory (a read never writes), and rewrites a thread at the current version before
its next write. It does no I/O and imports no saver, store or tool. The offline tool, which
rewrites every thread of a store now (`upgrade`, `aupgrade`, `status`, their backups), is
`telar_checkpoint.schema_upgrade`. Users import both from `telar_checkpoint.schema`. A thread stored at a newer version than the schema is
refused (`SchemaVersionError`), never downgraded. docs/SCHEMA.md says more.
"""

from __future__ import annotations

import binascii
import contextlib
import copy
import importlib
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import orjson

from telar_checkpoint.compaction import MAX_CHAIN
from telar_checkpoint.errors import StoredDataError, TelarError, UsageError
from telar_checkpoint.format import CheckpointLine, DroppedLine, is_same, render
from telar_checkpoint.history import History, Key, Write, WriteKey
from telar_checkpoint.steps import Steps, call
from telar_checkpoint.threads import SaverThreads, ThreadRecords
from telar_checkpoint.values import SERDE_TAG, ValueCodec

if TYPE_CHECKING:
    pass

__all__ = [
    "Schema",
    "SchemaError",
    "SchemaRefusedError",
    "SchemaStepError",
    "SchemaVersionError",
    "drop_channel",
    "load_schema",
    "map_channel",
    "rename_channel",
    "rename_class",
    "rename_node",
    "transform",
    "upgrade_history",
    "upgrade_text",
]

# LangGraph's names (langgraph/_internal/_constants.py), as stored.
_PULL, _PUSH = "__pregel_pull", "__pregel_push"
_INTERRUPT, _RESUME, _TASKS = "__interrupt__", "__resume__", "__pregel_tasks"
_NULL_TASK_ID = "00000000-0000-0000-0000-000000000000"
_CLASS_TAGS = ("$model", "$model_v1", "$dataclass", "$namedtuple", "$enum")


# --- errors ---------------------------------------------------------------------


class SchemaError(TelarError):
    """A thread that a schema cannot bring to its version; `thread_id` names it."""

    def __init__(self, message: str, *, thread_id: str | None) -> None:
        super().__init__(f"thread {thread_id!r}: {message}" if thread_id is not None else message)
        self.thread_id = thread_id


class SchemaVersionError(SchemaError):
    """A thread stored at a newer schema version than the saver's: refused, never downgraded."""

    def __init__(self, thread_id: str | None, stored: int, current: int) -> None:
        super().__init__(
            f"is stored at state schema version {stored}, newer than this schema's version {current}; "
            "refusing to read or write it (a newer release of the program wrote it: run that one)",
            thread_id=thread_id,
        )
        self.stored, self.current = stored, current


class SchemaStepError(SchemaError):
    """A step raised on a thread: the thread is left as stored. Names the checkpoint and the step."""

    def __init__(self, thread_id: str | None, checkpoint_id: str | None, step: str, exc: BaseException) -> None:
        where = f"checkpoint {checkpoint_id}" if checkpoint_id else "its pending writes"
        super().__init__(f"schema step {step} failed on {where}: {type(exc).__name__}: {exc}", thread_id=thread_id)
        self.checkpoint_id, self.step, self.exc = checkpoint_id, step, exc


class SchemaRefusedError(SchemaError):
    """A step that cannot keep the thread's paused run resumable (a node renamed while a subgraph
    inside it is paused, say): the thread is refused, and left as stored."""

    def __init__(self, thread_id: str | None, node: str, reason: str) -> None:
        super().__init__(f"cannot rename node {node!r}: {reason}; the thread is left as it is", thread_id=thread_id)
        self.node, self.reason = node, reason


# --- the steps ------------------------------------------------------------------


class _Refused(Exception):
    """Raised inside a step: the step cannot be applied to this thread (why, in the message)."""


@dataclass(eq=False)
class _Thread:
    """A thread's history as its steps change it: its lines and writes, copied from a parsed
    `History` (which still resolves the values as they were before the step)."""

    thread_id: str | None
    history: History
    values: ValueCodec
    lines: dict[Key, CheckpointLine] = field(default_factory=dict)
    writes: dict[Key, dict[WriteKey, Write]] = field(default_factory=dict)  # entries' and orphans'
    orphans: set[Key] = field(default_factory=set)
    where: str | None = None  # the checkpoint being changed, for errors

    @classmethod
    def of(cls, thread_id: str | None, text: str, values: ValueCodec) -> _Thread:
        history = History.parse(thread_id, text)
        thread = cls(thread_id, history, values)
        for key, entry in history.entries.items():
            line = entry.line
            thread.lines[key] = CheckpointLine(
                line.ns, line.id, line.parent, orjson.loads(orjson.dumps(line.metadata)),
                orjson.loads(orjson.dumps(line.checkpoint)), dict(line.extra), dict(line.values), dict(line.appended),
            )
            thread.writes[key] = dict(entry.writes)
        for key, writes in history.orphans.items():
            thread.writes[key] = dict(writes)
            thread.orphans.add(key)
        return thread

    def render(self) -> str:
        checkpoints = ((line, History.writes_records(*key, self.writes[key])) for key, line in self.lines.items())
        orphans = (w for key in self.orphans for w in History.writes_records(*key, self.writes[key]))
        return "".join(line + "\n" for line in render(self.history.dropped.values(), checkpoints, orphans))

    def full(self, key: Key, channel: str) -> Any:
        """The encoded value of `channel` at `key` before this step (resolved against its bases)."""
        return self.history.entries[key].value(channel)

    def set_values(self, new: dict[Key, dict[str, Any]], removed: dict[Key, set[str]] | None = None) -> None:
        """Give checkpoints new values: `new[key][channel]`, encoded and whole, for every line that
        holds a channel it names; `removed[key]`, channels to take out. A value is stored as a put
        stores it: a list that only grew since its parent's as the items added (within
        `MAX_CHAIN`), a value equal to its parent's, where it was a reference, as a reference;
        else whole."""
        for key, channels in (removed or {}).items():
            line = self.lines[key]
            for channel in channels:
                line.values.pop(channel, None)
                line.appended.pop(channel, None)
        order = {key: i for i, key in enumerate(self.lines)}
        depth: dict[tuple[Key, str], int] = {}
        for key, given in sorted(new.items(), key=lambda item: order[item[0]]):
            line = self.lines[key]
            parent_key: Key = (line.ns, line.parent or "")
            parent = self.lines.get(parent_key) if line.parent and order.get(parent_key, len(order)) < order[key] else None
            for channel, value in given.items():
                was_same = is_same(line.values.get(channel))
                line.appended.pop(channel, None)
                line.values[channel] = value
                depth[(key, channel)] = 0
                start = new.get(parent_key, {}).get(channel, _NONE) if parent is not None else _NONE
                if start is _NONE or (parent_key, channel) not in depth:
                    continue
                assert parent is not None
                chain = depth[(parent_key, channel)] + 1
                if chain >= MAX_CHAIN:
                    continue
                if was_same and orjson.dumps(start) == orjson.dumps(value):
                    line.values[channel] = {"$same": None}
                    depth[(key, channel)] = chain
                elif (
                    type(value) is list and type(start) is list and 0 < len(start) <= len(value)
                    and (channel in parent.appended or type(parent.values.get(channel)) is list)
                    and orjson.dumps(value[: len(start)]) == orjson.dumps(start)
                ):
                    del line.values[channel]
                    line.appended[channel] = value[len(start) :]
                    depth[(key, channel)] = chain


_NONE: Any = object()


class Step:
    """One change of a thread's stored state; made by the functions below."""

    def apply(self, thread: _Thread) -> None:
        raise NotImplementedError

    def __repr__(self) -> str:
        return self.describe()

    def describe(self) -> str:
        return type(self).__name__


def _rename_keys(mapping: dict[str, Any], rename: Callable[[str], str]) -> dict[str, Any]:
    return {rename(k): v for k, v in mapping.items()}


def _rename_channels(thread: _Thread, rename: Callable[[str], str], namespaces: Callable[[str], bool] = lambda ns: True) -> None:
    """Rename channels everywhere a checkpoint or a write names them."""
    for key, line in thread.lines.items():
        if not namespaces(key[0]):
            continue
        line.values = _rename_keys(line.values, rename)
        line.appended = _rename_keys(line.appended, rename)
        cp = line.checkpoint
        if isinstance(cp.get("channel_versions"), dict):
            cp["channel_versions"] = _rename_keys(cp["channel_versions"], rename)
        if isinstance(cp.get("versions_seen"), dict):
            cp["versions_seen"] = {node: _rename_keys(seen, rename) for node, seen in cp["versions_seen"].items()}
        if isinstance(cp.get("updated_channels"), list):
            cp["updated_channels"] = [rename(c) for c in cp["updated_channels"]]
    for key, writes in thread.writes.items():
        if namespaces(key[0]):
            thread.writes[key] = {wk: (rename(ch), value, path) for wk, (ch, value, path) in writes.items()}


def _channels_of(thread: _Thread) -> set[str]:
    names: set[str] = set()
    for line in thread.lines.values():
        names.update(line.values, line.appended, line.checkpoint.get("channel_versions") or {})
    return names


@dataclass(frozen=True, repr=False)
class _RenameChannel(Step):
    old: str
    new: str

    def describe(self) -> str:
        return f"rename_channel({self.old!r}, {self.new!r})"

    def apply(self, thread: _Thread) -> None:
        if self.old != self.new and self.new in _channels_of(thread):
            raise _Refused(f"channel {self.new!r} exists already")
        _rename_channels(thread, lambda ch: self.new if ch == self.old else ch)


@dataclass(frozen=True, repr=False)
class _DropChannel(Step):
    name: str

    def describe(self) -> str:
        return f"drop_channel({self.name!r})"

    def apply(self, thread: _Thread) -> None:
        name = self.name
        for line in thread.lines.values():
            line.values.pop(name, None)
            line.appended.pop(name, None)
            cp = line.checkpoint
            (cp.get("channel_versions") or {}).pop(name, None)
            for seen in (cp.get("versions_seen") or {}).values():
                seen.pop(name, None)
            if isinstance(cp.get("updated_channels"), list):
                cp["updated_channels"] = [c for c in cp["updated_channels"] if c != name]
        for key, writes in thread.writes.items():
            kept = {wk: w for wk, w in writes.items() if w[0] != name}
            tasks = {task for task, _ in writes}
            if tasks - {task for task, _ in kept}:
                # A task with no writes left would run again when the thread resumes.
                raise _Refused(f"a task's only pending writes are to {name!r}: dropping them would run it again")
            thread.writes[key] = kept


@dataclass(frozen=True, repr=False)
class _MapChannel(Step):
    name: str
    fn: Callable[[Any], Any]
    writes: bool = True

    def describe(self) -> str:
        return f"map_channel({self.name!r}, {getattr(self.fn, '__name__', self.fn)!r})"

    def apply(self, thread: _Thread) -> None:
        codec, name = thread.values, self.name
        new: dict[Key, dict[str, Any]] = {}
        for key, line in thread.lines.items():
            if name in line.appended or name in line.values:
                thread.where = line.id
                new[key] = {name: codec.encode(self.fn(codec.decode(thread.full(key, name))))}
        thread.where = None
        thread.set_values(new)
        if self.writes:
            for key, writes in thread.writes.items():
                thread.writes[key] = {
                    wk: (ch, codec.encode(self.fn(codec.decode(v))) if ch == name else v, path)
                    for wk, (ch, v, path) in writes.items()
                }


@dataclass(frozen=True, repr=False)
class _Transform(Step):
    fn: Callable[[dict[str, Any]], dict[str, Any]]

    def describe(self) -> str:
        return f"transform({getattr(self.fn, '__name__', self.fn)!r})"

    def apply(self, thread: _Thread) -> None:
        codec = thread.values
        new: dict[Key, dict[str, Any]] = {}
        removed: dict[Key, set[str]] = {}
        for key, line in thread.lines.items():
            thread.where = line.id
            channels = [*line.values, *line.appended]
            state = {ch: codec.decode(thread.full(key, ch)) for ch in channels}
            result = self.fn(dict(state))
            if not isinstance(result, dict):
                raise TypeError(f"a transform returns the state as a dict, not {type(result).__name__}")
            new[key] = {ch: codec.encode(value) for ch, value in result.items()}
            removed[key] = set(channels) - set(result)
        thread.where = None
        self.versions(thread, new, removed)
        thread.set_values(new, removed)

    @staticmethod
    def versions(thread: _Thread, new: dict[Key, dict[str, Any]], removed: dict[Key, set[str]]) -> None:
        """Keep each checkpoint's channel versions to its values: LangGraph restores and carries
        on only the channels a checkpoint versions, so a channel the transform added (a key
        renamed, split) gets one: its parent's where its value is the same, else the newest
        version of the checkpoint (one it has used, so no node sees a trigger it has not seen);
        a channel it removed loses its versions as `drop_channel` takes them."""
        given: dict[tuple[Key, str], Any] = {}
        for key, line in thread.lines.items():  # (parents before children, as stored)
            cp = line.checkpoint
            versions = cp.get("channel_versions")
            if not isinstance(versions, dict):
                continue
            for channel in removed.get(key, ()):
                versions.pop(channel, None)
                for seen in (cp.get("versions_seen") or {}).values():
                    if isinstance(seen, dict):
                        seen.pop(channel, None)
                if isinstance(cp.get("updated_channels"), list):
                    cp["updated_channels"] = [c for c in cp["updated_channels"] if c != channel]
            added = [ch for ch in new.get(key, {}) if ch not in versions]
            if not added:
                continue
            try:
                newest = max(versions.values()) if versions else 1
            except TypeError:  # versions of mixed types: any of them will do
                newest = next(iter(versions.values()))
            parent_key: Key = (line.ns, line.parent or "")
            for channel in added:
                same = (parent_key, channel) in given and orjson.dumps(new[parent_key][channel]) == orjson.dumps(new[key][channel])
                versions[channel] = given[(key, channel)] = given[(parent_key, channel)] if same else newest


def _renamed_classes(value: Any, old: str, new: str) -> Any:
    """`value` (encoded JSON) with every stored class named `old` named `new`."""
    if isinstance(value, list):
        return [_renamed_classes(v, old, new) for v in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:
        (tag, payload), = value.items()
        if tag in _CLASS_TAGS and isinstance(payload, dict):
            payload = {k: (new if k == "class" and v == old else _renamed_classes(v, old, new)) for k, v in payload.items()}
            return {tag: payload}
        if tag == "$dict" and isinstance(payload, dict):
            return {tag: {k: _renamed_classes(v, old, new) for k, v in payload.items()}}
        if tag == SERDE_TAG:
            module, _, name = old.partition(":")
            try:
                data = binascii.a2b_base64(payload[1]) if isinstance(payload, list) and len(payload) == 2 else b""
            except (binascii.Error, TypeError):
                data = b""
            if module.encode() in data and name.encode() in data:
                raise _Refused(f"a {SERDE_TAG} value may name {old}, and rename_class reads only the JSON serializer's values")
            return value
    return {k: _renamed_classes(v, old, new) for k, v in value.items()}


@dataclass(frozen=True, repr=False)
class _RenameClass(Step):
    old: str
    new: str

    def describe(self) -> str:
        return f"rename_class({self.old!r}, {self.new!r})"

    def apply(self, thread: _Thread) -> None:
        old, new = self.old, self.new
        for line in thread.lines.values():
            thread.where = line.id
            line.values = {ch: v if is_same(v) else _renamed_classes(v, old, new) for ch, v in line.values.items()}
            line.appended = {ch: _renamed_classes(items, old, new) for ch, items in line.appended.items()}
            line.extra = {k: _renamed_classes(v, old, new) for k, v in line.extra.items()}
        thread.where = None
        for key, writes in thread.writes.items():
            thread.writes[key] = {wk: (ch, _renamed_classes(v, old, new), path) for wk, (ch, v, path) in writes.items()}


# --- renaming a node: LangGraph's task and interrupt ids ---------------------------------


def _task_id(checkpoint: dict[str, Any], checkpoint_id: str, *parts: str) -> str:
    """A task id as LangGraph derives it (langgraph/pregel/_algo.py, `_xxhash_str` from
    checkpoint version 2 on, `_uuid5_str` before)."""
    namespace = binascii.unhexlify(checkpoint_id.replace("-", ""))
    joined = "".join(parts).encode()
    if checkpoint.get("v", 1) > 1:
        from xxhash import xxh3_128_hexdigest  # (langgraph's dependency: a renamed node's graph runs on langgraph)

        hex_ = xxh3_128_hexdigest(namespace + joined)
    else:
        import hashlib

        sha = hashlib.sha1(namespace, usedforsecurity=False)
        sha.update(joined)
        hex_ = sha.hexdigest()
    return f"{hex_[:8]}-{hex_[8:12]}-{hex_[12:16]}-{hex_[16:20]}-{hex_[20:32]}"


def _interrupt_id(ns: str, answered: int) -> str:
    """An interrupt id as LangGraph derives it from its task's namespace (langgraph/types.py)."""
    from xxhash import xxh3_128_hexdigest

    return xxh3_128_hexdigest((f"{ns}|{answered}" if answered else ns).encode())


# A Send's task path as LangGraph stores it (`task_path_str((PUSH, idx, False))`: numbers, the
# bool too, as 10 digits, "~__pregel_push, 0000000002, 0000000000"); "True"/"False" also read.
_PUSH_PATH = re.compile(r"~__pregel_push, (\d+), (?:True|False|\d+)$")


@dataclass(frozen=True, repr=False)
class _RenameNode(Step):
    old: str
    new: str

    def describe(self) -> str:
        return f"rename_node({self.old!r}, {self.new!r})"

    def channel(self, name: str) -> str:
        """A channel name with the node's name in it renamed (`branch:to:ask`, `join:a+ask:b`)."""
        old, new = self.old, self.new
        if name == f"branch:to:{old}":
            return f"branch:to:{new}"
        if name.startswith("join:") and name.count(":") == 2:
            _, starts, end = name.split(":")
            starts = "+".join(new if s == old else s for s in starts.split("+"))
            return f"join:{starts}:{new if end == old else end}"
        return name

    def apply(self, thread: _Thread) -> None:
        old, new = self.old, self.new
        if old == new:
            return
        for key in [*thread.lines, *thread.writes]:
            ns = key[0]
            if ns and ns.split("|")[0].split(":")[0] == old:
                raise _Refused(f"the thread holds the state of a subgraph inside it (namespace {ns!r})")
        # A Functional API task called by the node (an entrypoint's @task): LangGraph derives its id
        # from the caller's path, which names the node ("~__pregel_push, ~__pregel_pull, <node>, ..."),
        # and from the task's own name, which is not stored: its id cannot be recomputed.
        called = f"~{_PULL}, {old}, "
        for key, writes in thread.writes.items():
            for (task, _), (_, _, path) in writes.items():
                if not key[0] and path.startswith(f"~{_PUSH}, ") and called in path:
                    raise _Refused(f"a Functional API task it called (task {task}) has an id derived from its name")
        if any(ch == f"branch:to:{new}" for ch in _channels_of(thread)):
            raise _Refused(f"the thread has a node {new!r} already")
        # Task ids first: they are checked against the names they were derived from.
        task_ids: dict[Key, dict[str, str]] = {}
        for key, writes in thread.writes.items():
            if key[0]:
                continue
            tasks = {(task, path) for task, _ in writes for path in [writes[(task, _)][2]]}
            for task, path in tasks:
                if path == f"~{_PULL}, {old}" or _PUSH_PATH.match(path):
                    renamed = self.task(thread, key, task, path)
                    if renamed is not None:
                        task_ids.setdefault(key, {})[task] = renamed
        interrupts: dict[str, str] = {}
        for key, renames in task_ids.items():
            writes = thread.writes[key]
            moved: dict[WriteKey, Write] = {}
            for (task, idx), (ch, value, path) in writes.items():
                if task in renames:
                    if path == f"~{_PULL}, {old}":
                        path = f"~{_PULL}, {new}"
                    if ch == _INTERRUPT:
                        value = self.interrupts(thread, value, f"{old}:{task}", f"{new}:{renames[task]}", interrupts)
                    task = renames[task]
                moved[(task, idx)] = (ch, value, path)
            thread.writes[key] = moved
        for key, writes in thread.writes.items():
            for wk, (ch, value, path) in list(writes.items()):
                if wk[0] == _NULL_TASK_ID and ch == _RESUME and interrupts:
                    writes[wk] = (ch, self.resume_map(thread, value, interrupts), path)
                elif ch == _TASKS:
                    writes[wk] = (ch, self.sends(thread, value), path)
        _rename_channels(thread, self.channel)
        for line in thread.lines.values():
            seen = line.checkpoint.get("versions_seen")
            if isinstance(seen, dict) and old in seen:
                line.checkpoint["versions_seen"] = {new if n == old else n: v for n, v in seen.items()}
            writes_meta = line.metadata.get("writes")
            if isinstance(writes_meta, dict) and old in writes_meta:
                line.metadata["writes"] = {new if n == old else n: v for n, v in writes_meta.items()}
            if _TASKS in line.values and not is_same(line.values[_TASKS]):
                line.values[_TASKS] = self.sends(thread, line.values[_TASKS])

    def task(self, thread: _Thread, key: Key, task: str, path: str) -> str | None:
        """The new id of `task` (pending writes of checkpoint `key`) when it is a task of the
        node; None when it is another node's; refused when it cannot be told."""
        old, new = self.old, self.new
        line = thread.lines.get(key)
        if line is None:
            if path == f"~{_PULL}, {old}":
                raise _Refused(f"task {task} wrote for checkpoint {key[1]}, which is not stored: its id cannot be recomputed")
            return None
        cp, step = line.checkpoint, str(line.step + 1)
        push = _PUSH_PATH.match(path)
        if push is not None:
            index = str(int(push.group(1)))  # LangGraph derives the id from str(idx), unpadded
            if _task_id(cp, line.id, old, step, old, _PUSH, index) != task:
                return None  # a Send to another node
            return _task_id(cp, line.id, new, step, new, _PUSH, index)
        pointing = sorted(ch for ch in cp.get("channel_versions") or {} if self.channel(ch) != ch)
        seen = sorted((cp.get("versions_seen") or {}).get(old) or {})
        for triggers in dict.fromkeys((tuple(pointing), tuple(seen), *((ch,) for ch in pointing))):
            if _task_id(cp, line.id, old, step, old, _PULL, *triggers) == task:
                renamed = tuple(sorted(self.channel(ch) for ch in triggers))
                return _task_id(cp, line.id, new, step, new, _PULL, *renamed)
        raise _Refused(f"the id of its task {task} (checkpoint {line.id}) is not the one LangGraph derives, so it cannot be recomputed")

    def interrupts(self, thread: _Thread, value: Any, old_ns: str, new_ns: str, renamed: dict[str, str]) -> Any:
        """An `__interrupt__` write's interrupts, with the ids LangGraph derives for the new task."""
        from langgraph.types import Interrupt  # (a renamed node's graph runs on langgraph)

        codec = thread.values
        decoded = codec.decode(value)
        items = list(decoded) if isinstance(decoded, (list, tuple)) else [decoded]
        out = []
        for item in items:
            if not isinstance(item, Interrupt):
                raise _Refused(f"an interrupt write holds a {type(item).__name__}, not an Interrupt")
            answered = next((n for n in range(1000) if _interrupt_id(old_ns, n) == item.id), None)
            if answered is None:
                raise _Refused(f"interrupt {item.id} was not raised by the node's own task (a subgraph's?)")
            item = copy.copy(item)
            item.id = renamed[item.id] = _interrupt_id(new_ns, answered)
            out.append(item)
        return codec.encode(type(decoded)(out) if isinstance(decoded, (list, tuple)) else out[0])

    def resume_map(self, thread: _Thread, value: Any, renamed: dict[str, str]) -> Any:
        """A resume written for no task (`Command(resume={interrupt id: value})`): its ids renamed."""
        decoded = thread.values.decode(value)
        if isinstance(decoded, dict) and any(k in renamed for k in decoded):
            return thread.values.encode({renamed.get(k, k): v for k, v in decoded.items()})
        return value

    def sends(self, thread: _Thread, value: Any) -> Any:
        """`Send` packets (encoded) to the node, sent to its new name."""
        if isinstance(value, dict) and SERDE_TAG in value and len(value) == 1:
            decoded = thread.values.decode(value)
            if self.old in repr(decoded):
                raise _Refused("a pending Send is stored by a serializer whose values cannot be renamed in place")
            return value
        if isinstance(value, list):
            return [self.sends(thread, v) for v in value]
        if isinstance(value, dict):
            if len(value) == 1 and "$send" in value and isinstance(value["$send"], dict) and value["$send"].get("node") == self.old:
                return {"$send": {**value["$send"], "node": self.new}}
            return {k: self.sends(thread, v) for k, v in value.items()}
        return value


def rename_channel(old: str, new: str) -> Step:
    """A state key (channel) renamed: in every checkpoint's values, versions and pending writes."""
    return _RenameChannel(_name(old), _name(new))


def drop_channel(name: str) -> Step:
    """A state key (channel) removed from every checkpoint and pending write."""
    return _DropChannel(_name(name))


def map_channel(name: str, fn: Callable[[Any], Any], *, writes: bool = True) -> Step:
    """Every stored value of a channel passed through `fn` (decoded value -> new value); with
    `writes`, the pending writes to it too (for a channel without a reducer, a write is the value)."""
    if not callable(fn):
        raise UsageError(f"map_channel: fn must be callable, not {type(fn).__name__}")
    return _MapChannel(_name(name), fn, writes)


def transform(fn: Callable[[dict[str, Any]], dict[str, Any]]) -> Step:
    """Every checkpoint's state (channel -> decoded value) passed through `fn`, which returns the
    new state (a channel left out is removed). Pending writes are left as they are."""
    if not callable(fn):
        raise UsageError(f"transform: fn must be callable, not {type(fn).__name__}")
    return _Transform(fn)


def rename_node(old: str, new: str) -> Step:
    """A graph node renamed: its task ids (as LangGraph derives them from the name), its
    interrupts' ids, its channels (`branch:to:<node>`), `versions_seen` and Sends, so that a run
    paused in it resumes in the graph where it has the new name."""
    return _RenameNode(_name(old), _name(new))


def rename_class(old: str, new: str) -> Step:
    """A stored class renamed: values naming ``module:qualname`` `old` name `new` (as the
    JSON serializer stores them; a short alias such as ``AIMessage`` is its own name)."""
    return _RenameClass(_name(old), _name(new))


def _name(value: object) -> str:
    if not isinstance(value, str) or not value:
        raise UsageError(f"a schema step takes non-empty names, not {value!r}")
    return value


@dataclass(frozen=True)
class Schema:
    """The state schema's `version` (1 for a schema never changed) and, for each later version,
    the steps that bring a thread from the version before to it."""

    version: int
    steps: Mapping[int, Sequence[Step]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if type(self.version) is not int or self.version < 1:
            raise UsageError(f"Schema(version=...) is a positive integer, not {self.version!r}")
        for number, steps in self.steps.items():
            if type(number) is not int or not 2 <= number <= self.version:
                raise UsageError(f"Schema steps are keyed by the version they bring a thread to, 2 to {self.version}, not {number!r}")
            for step in steps:
                if not isinstance(step, Step):
                    raise UsageError(f"schema step {number} holds {step!r}, not a step (rename_channel, map_channel, ...)")


# --- the pure core --------------------------------------------------------------


def upgrade_text(thread_id: str | None, text: str | None, schema: Schema, values: ValueCodec) -> str | None:
    """The text of the thread `text` brought to `schema.version`, or None when it is there already
    (or there is no thread). Raises `SchemaVersionError` for a thread at a newer version,
    `SchemaStepError` or `SchemaRefusedError` when a step fails on it."""
    if text is None:
        return None
    history = History.parse(thread_id, text)
    stored = history.schema_version
    if stored > schema.version:
        raise SchemaVersionError(thread_id, stored, schema.version)
    if stored == schema.version:
        return None
    text = history.render()  # canonical: every base stored, crash residue gone
    steps = [(n, i, step) for n in range(stored + 1, schema.version + 1) for i, step in enumerate(schema.steps.get(n, ()), 1)]
    # Each text is parsed once: what a step made is parsed as the next step's thread, which is
    # the check that it reads; what the last step made, as the history stamped below.
    thread = _Thread.of(thread_id, text, values) if steps else None
    history = History.parse(thread_id, text) if thread is None else thread.history
    for done, (number, i, step) in enumerate(steps, 1):
        assert thread is not None
        try:
            step.apply(thread)
            text = thread.render()
            if done < len(steps):
                thread = _Thread.of(thread_id, text, values)  # what a step made must read
            else:
                history = History.parse(thread_id, text)
        except _Refused as exc:
            if isinstance(step, _RenameNode):
                raise SchemaRefusedError(thread_id, step.old, str(exc)) from None
            raise SchemaStepError(thread_id, thread.where, f"{number} #{i} {step.describe()}", exc) from None
        except StoredDataError as exc:
            raise SchemaStepError(thread_id, thread.where, f"{number} #{i} {step.describe()}", exc) from exc
        except Exception as exc:  # the user's function: whatever it raises
            raise SchemaStepError(thread_id, thread.where, f"{number} #{i} {step.describe()}", exc) from exc
    root = history.dropped.get("")
    if root is None:
        root = history.dropped[""] = DroppedLine("", None)
        history.dropped = {"": root, **{ns: d for ns, d in history.dropped.items() if ns}}
    root.schema = schema.version
    return history.render()


def upgrade_history(thread_id: str | None, history: History, schema: Schema, values: ValueCodec) -> History:
    """`history` brought to `schema.version` in memory (the history itself when it is there)."""
    stored = history.schema_version
    if stored == schema.version or (stored < schema.version and not history.entries and not history.orphans):
        return history
    if stored > schema.version:
        raise SchemaVersionError(thread_id, stored, schema.version)
    text = upgrade_text(thread_id, history.clone().render(), schema, values)
    return History.parse(thread_id, text) if text is not None else history


def stamped(thread_id: str | None, schema: Schema, values: ValueCodec, old: str | None) -> str | None:
    """The change a saver makes before its first write of a thread below the schema's version:
    the thread upgraded (an absent one made holding only its record), or as it is."""
    if old is None or not old.strip():
        return upgrade_text(thread_id, "", schema, values)
    new = upgrade_text(thread_id, old, schema, values)
    return old if new is None else new


class SchemaThreads:
    """The state schema at work in a saver made with `schema=`, one of its thread policies
    (`writing.ThreadPolicy`): a history read is upgraded in memory (never in the stored text),
    and a thread is brought to the schema's version before the saver's first write of it. What
    it knows of each thread (the upgraded history, whether it is stored at the schema's version)
    is in the saver's `ThreadRecords`."""

    def __init__(self, schema: Schema, threads: SaverThreads, records: ThreadRecords) -> None:
        self.schema, self.records = schema, records
        self._threads = threads  # its codec's values are read when used (`with_allowlist` replaces them)

    def read(self, thread_id: str, history: History) -> History:
        """`history` as the schema reads it: upgraded in memory when stored at an older version;
        a thread at a newer version is refused (`SchemaVersionError`)."""
        upgraded = self.records.upgraded(thread_id, history)
        if upgraded is None:
            upgraded = upgrade_history(thread_id, history, self.schema, self._threads.codec.values)
            if upgraded is history:
                if history.entries:  # an empty thread is stamped by its first write
                    self.records.set_schema_current(thread_id, True)
                return history
            self.records.set_schema_current(thread_id, False)
            self.records.set_upgraded(thread_id, history, upgraded)
        return upgraded

    def read_steps(self, thread_id: str, history: History) -> Steps[History]:
        """`read`, as a policy's steps on a read."""
        return self.read(thread_id, history)
        yield  # (a generator: its steps are none)

    def before_write(self, thread_id: str, now: float) -> Steps[None] | None:
        """Before the saver's first write of a thread: the steps that bring it to the schema's
        version (one rewrite), or refuse it when it is newer; None when the thread is known to be
        at that version (read through `read`, which notes it)."""
        if self.records.schema_current(thread_id):
            return None
        return self._upgrade_steps(thread_id)

    def after_write(self, thread_id: str, now: float) -> None:
        """Nothing to do after a write."""

    def _upgrade_steps(self, thread_id: str) -> Steps[None]:
        threads = self._threads
        self.read(thread_id, (yield from threads._stored_steps(thread_id)))
        if not self.records.schema_current(thread_id):
            change = partial(stamped, thread_id, self.schema, threads.codec.values)
            yield call(threads.rewrite, threads.arewrite, thread_id, change)
            self.records.set_schema_current(thread_id, True)


def load_schema(spec: str) -> Schema:
    """The `Schema` named ``module:NAME`` (``NAME`` may be dotted: ``module:Class.attr``),
    imported from the current directory or `sys.path`. Every way it can fail is a `UsageError`
    saying which."""
    module_name, colon, name = spec.partition(":")
    if not colon or not module_name or not name:
        raise UsageError(f"--schema {spec!r}: name the schema as module:NAME, e.g. myapp.schema:SCHEMA")
    added = os.getcwd() not in sys.path and "" not in sys.path
    if added:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        where = "the current directory or sys.path"
        missing = exc.name or module_name
        detail = "" if missing == module_name else f" (it imports {missing!r}, which is missing)"
        raise UsageError(f"--schema {spec!r}: cannot import module {module_name!r} from {where}{detail}") from None
    except Exception as exc:  # the user's module raised while it was imported
        raise UsageError(f"--schema {spec!r}: importing module {module_name!r} failed: {type(exc).__name__}: {exc}") from None
    finally:
        if added:
            with contextlib.suppress(ValueError):
                sys.path.remove(os.getcwd())
    value: Any = module
    for part in name.split("."):
        if not hasattr(value, part):
            raise UsageError(f"--schema {spec!r}: module {module_name!r} has no {name!r}")
        value = getattr(value, part)
    if not isinstance(value, Schema):
        raise UsageError(
            f"--schema {spec!r}: {name} is a {type(value).__name__}, not a telar_checkpoint.schema.Schema"
        )
    return value
