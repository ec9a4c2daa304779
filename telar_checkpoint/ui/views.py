"""What the thread viewer shows, made from a thread's stored text: pure, strings in, plain data out.

The pages (`telar_checkpoint.ui.app`) render these with templates that escape every string; nothing
here is HTML. Readable values come from `telar_checkpoint.inspection` (the code the CLI's `show`
and `diff` use), so a page and the command line say the same thing.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from langgraph.checkpoint.serde.types import ERROR
from orjson import dumps

from telar_checkpoint.codec import CheckpointCodec, entry_filter
from telar_checkpoint.errors import StoredDataError
from telar_checkpoint.format import is_same
from telar_checkpoint.history import Entry, History
from telar_checkpoint.inspection import (
    ChannelChange,
    CheckpointInfo,
    checkpoint_info,
    diff_states,
    find_entry,
    next_nodes,
    pending_interrupts,
    readable,
    state_values,
)
from telar_checkpoint.stores.common import stored_size

CUT = 2_000  # characters of a string shown before it is cut
ITEMS = 200  # items of a list or keys of a dict shown before the rest are cut
DEPTH = 12  # levels of a value shown before the rest is cut
TIMELINE = 200  # checkpoints of a namespace shown at once, the newest (the page asks for earlier ones)


# --- one thread in the list --------------------------------------------------------------------


@dataclass(slots=True)
class ThreadRow:
    """A thread as the list shows it; `status` is one of STATUSES."""

    thread_id: str
    checkpoints: int
    updated: str  # ts of the newest checkpoint ("" when none)
    size: int  # bytes stored
    status: str
    development: bool = False  # holds lines a development build wrote (`telar-checkpoint upgrade`)
    problem: str = ""  # why it is damaged


STATUSES = ("paused", "failed", "finished", "running", "damaged", "empty")


def thread_status(history: History) -> str:
    """paused: a task of a namespace's latest checkpoint asked a question not answered yet (in
    the root graph or a subgraph); failed: a task of the latest root checkpoint failed;
    finished: nothing runs next; running: nodes run next (the run goes on, or stopped without
    an error); empty: no checkpoint."""
    root = history.latest("")
    if root is None:
        return "empty"
    if any((latest := history.latest(ns)) is not None and pending_interrupts(latest) for ns in history.namespaces()):
        return "paused"
    if any(channel == ERROR for channel, _value, _path in root.writes.values()):
        return "failed"
    return "running" if next_nodes(root) else "finished"


def thread_row(thread_id: str, text: str, history: History | None = None) -> ThreadRow:
    """The list's row of one thread (`history`: `text` parsed before); a damaged one says why,
    and loses nothing (it is only read)."""
    try:
        history = History.parse(thread_id, text) if history is None else history
    except StoredDataError as exc:
        return ThreadRow(thread_id, 0, "", stored_size(text), "damaged", problem=str(exc))
    entries = list(history.entries.values())
    updated = max((str(e.line.checkpoint.get("ts", "")) for e in entries), default="")
    return ThreadRow(thread_id, len(entries), updated, stored_size(text), thread_status(history),
                     development=history.development_lines > 0)


def metadata_matches(history: History, filter: dict[str, Any]) -> bool:
    """Whether a checkpoint of the thread has every `filter` key at its value: `list`'s own test
    (`codec.entry_filter`)."""
    matches = entry_filter(None, None, None, filter)
    return any(matches(e) for e in history.entries.values())


# --- a value, cut to what a page can hold -------------------------------------------------------


@dataclass(slots=True)
class Node:
    """One value of a state tree: `kind` is "str", "scalar" (JSON text), "list", "dict" or "cut"
    (too deep: only a link); `children` are (label, node); `more` counts what was cut, and
    `pointer` (a JSON pointer into the channel's value) is where the whole is fetched."""

    kind: str
    text: str = ""
    children: list[tuple[str, Node]] = field(default_factory=list)
    more: int = 0
    size: int = 0  # items of a list or dict, characters of a string
    pointer: str = ""


def _escape_pointer(part: str) -> str:
    return part.replace("~", "~0").replace("/", "~1")


def tree(value: Any, pointer: str = "", depth: int = 0, start: int = 0) -> Node:
    """`value` (readable JSON) as a tree, strings past CUT characters, lists and dicts past
    ITEMS entries and levels past DEPTH cut; a list's items numbered from `start` (the items
    a list grew by, numbered as in the whole list)."""
    if isinstance(value, str):
        return Node("str", value[:CUT], more=max(len(value) - CUT, 0), size=len(value), pointer=pointer)
    if not isinstance(value, (list, dict)):
        try:
            text = dumps(value).decode()
        except TypeError:
            text = repr(value)
        return Node("scalar", text, pointer=pointer)
    if depth >= DEPTH:
        return Node("cut", size=len(value), pointer=pointer)
    items: Iterator[tuple[str, Any]] = (
        ((str(k), v) for k, v in value.items()) if isinstance(value, dict) else ((str(i), v) for i, v in enumerate(value, start))
    )
    node = Node("dict" if isinstance(value, dict) else "list", size=len(value), pointer=pointer)
    for n, (label, child) in enumerate(items):
        if n == ITEMS:
            node.more = len(value) - ITEMS
            break
        node.children.append((label, tree(child, f"{pointer}/{_escape_pointer(label)}", depth + 1)))
    return node


def at_pointer(value: Any, pointer: str) -> Any:
    """The part of `value` a JSON pointer names; KeyError when there is none."""
    if not pointer:
        return value
    for raw in pointer.split("/")[1:]:
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            raise KeyError(pointer)
    return value


# --- chat messages ------------------------------------------------------------------------------


@dataclass(slots=True)
class ToolCall:
    name: str
    args: Node
    call_id: str
    result: Message | None = None  # the tool's message that answered it


@dataclass(slots=True)
class Message:
    role: str  # human, ai, tool, system, or the class name of another message
    text: Node
    name: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_id: str = ""
    status: str = ""  # a tool message's "error"


_ROLES = {"HumanMessage": "human", "AIMessage": "ai", "ToolMessage": "tool", "SystemMessage": "system"}


def _message_fields(item: Any) -> tuple[str, dict[str, Any]] | None:
    """(class, fields) of a readable langchain-core message, else None."""
    model = item.get("$model") if isinstance(item, dict) else None
    if not isinstance(model, dict):
        return None
    cls, fields = model.get("class"), model.get("fields")
    if isinstance(cls, str) and "Message" in cls and isinstance(fields, dict) and "content" in fields:
        return cls, fields
    return None


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content blocks: their text
        return "\n".join(p if isinstance(p, str) else str(p.get("text", "")) for p in content if isinstance(p, (str, dict)))
    return str(content)


def chat(value: Any, pointer: str = "", start: int = 0) -> list[Message] | None:
    """The messages of a channel's value when it is a list of langchain-core messages (a tool's
    message joined to the call it answers), else None; numbered from `start` (see `tree`)."""
    if not isinstance(value, list) or not value:
        return None
    found = [_message_fields(item) for item in value]
    if any(f is None for f in found):
        return None
    messages: list[Message] = []
    calls: dict[str, ToolCall] = {}
    for i, (cls, fields) in enumerate((f for f in found if f is not None), start):
        text = tree(_text(fields.get("content")), f"{pointer}/{i}/$model/fields/content")
        message = Message(_ROLES.get(cls.removesuffix("Chunk"), cls), text, name=str(fields.get("name") or ""),
                          tool_call_id=str(fields.get("tool_call_id") or ""), status=str(fields.get("status") or ""))
        for n, call in enumerate(fields.get("tool_calls") or []):
            if isinstance(call, dict):
                made = ToolCall(str(call.get("name", "")), tree(call.get("args"), f"{pointer}/{i}/$model/fields/tool_calls/{n}/args"),
                                str(call.get("id") or ""))
                message.tool_calls.append(made)
                calls[made.call_id] = made
        answered = calls.get(message.tool_call_id) if message.role == "tool" else None
        if answered is not None and answered.result is None:
            answered.result = message
        else:
            messages.append(message)
    return messages


# --- a thread's timeline ------------------------------------------------------------------------


@dataclass(slots=True)
class Row:
    """One checkpoint of the timeline, and the subgraph calls its step made."""

    info: CheckpointInfo
    changed: list[str]  # channels this checkpoint's line stores anew ("messages +2" for appended items)
    writes: int  # pending writes
    failed: list[str]  # nodes of the tasks that failed, or their task ids
    calls: list[Timeline] = field(default_factory=list)
    branches_from: int | None = None  # the parent's step, when the parent is not the row before (a fork)


@dataclass(slots=True)
class Timeline:
    ns: str
    rows: list[Row]
    earlier: int = 0  # checkpoints before the first row shown
    first_id: str = ""  # the id of the first row shown (the page asks for those before it)


def internal(channel: str) -> bool:
    """Whether `channel` is one of LangGraph's own (``__start__``, ``__pregel_tasks``,
    ``branch:to:NODE``, ``join:...``): the pages show them apart from the graph's state."""
    return channel.startswith(("__", "branch:", "join:"))


def _changed(entry: Entry) -> list[str]:
    """The graph's channels the entry's line stores anew, "NAME +N" for N items appended."""
    line = entry.line
    changed = [channel for channel, value in line.values.items() if not is_same(value) and not internal(channel)]
    changed += [f"{channel} +{len(items)}" for channel, items in line.appended.items() if items and not internal(channel)]
    return sorted(changed)


def _failed(entry: Entry, tasks: dict[str, str]) -> list[str]:
    return sorted({tasks.get(task, task) for (task, _i), (channel, _v, _p) in entry.writes.items() if channel == ERROR})


def _task_names(entry: Entry) -> dict[str, str]:
    """task id -> node name, from the task paths of the entry's writes (("__pregel_pull", NODE))."""
    names: dict[str, str] = {}
    for (task, _i), (_channel, _value, path) in entry.writes.items():
        parts = [p.strip(" '\"") for p in str(path).strip("()").split(",")]
        if len(parts) >= 2 and parts[1]:
            names.setdefault(task, parts[1])
    return names


def _parent_ns(ns: str) -> str:
    return ns.rpartition("|")[0]


def calls_by_parent(history: History) -> dict[str, dict[str, list[str]]]:
    """namespace -> checkpoint id -> the subgraph namespaces whose first checkpoint names it as
    their parent (`metadata["parents"]`), sorted."""
    found: dict[str, dict[str, list[str]]] = {}
    for child in sorted(history.namespaces()):
        if not child:
            continue
        ns = _parent_ns(child)
        first = min(history.in_ns(child), key=lambda e: e.line.id, default=None)
        parents = first.line.metadata.get("parents") if first is not None else None
        parent_id = parents.get(ns) if isinstance(parents, dict) else None
        if isinstance(parent_id, str):
            found.setdefault(ns, {}).setdefault(parent_id, []).append(child)
    return found


def timeline(codec: CheckpointCodec, history: History, ns: str = "", before: str | None = None,
             after: str | None = None, limit: int = TIMELINE,
             calls: dict[str, dict[str, list[str]]] | None = None) -> Timeline:
    """The checkpoints of `ns` oldest first (only those after `after`, or the `limit` newest
    before `before`), each with the subgraph namespaces that started under it, nested (`calls`:
    `calls_by_parent` of the history, made when not given)."""
    calls = calls_by_parent(history) if calls is None else calls
    entries = sorted(history.in_ns(ns), key=lambda e: e.line.id)
    if after is not None:
        entries = [e for e in entries if e.line.id > after]
    if before is not None:
        entries = [e for e in entries if e.line.id < before]
    earlier = max(len(entries) - limit, 0) if after is None else 0
    shown = entries[earlier:]
    children = calls.get(ns, {})
    rows = []
    before_id = entries[earlier - 1].line.id if earlier else None
    for entry in shown:
        row = Row(checkpoint_info(codec, entry), _changed(entry), len(entry.writes), _failed(entry, _task_names(entry)))
        row.calls = [timeline(codec, history, child, limit=limit, calls=calls) for child in children.get(entry.line.id, [])]
        parent = history.get(ns, entry.line.parent) if entry.line.parent else None
        if parent is not None and entry.line.parent != before_id:
            row.branches_from = parent.line.step
        before_id = entry.line.id
        rows.append(row)
    return Timeline(ns, rows, earlier, shown[0].line.id if shown else "")


# --- one checkpoint -----------------------------------------------------------------------------


@dataclass(slots=True)
class Channel:
    name: str
    value: Node
    messages: list[Message] | None  # the channel as a conversation, when it holds messages


@dataclass(slots=True)
class Change:
    change: ChannelChange
    before: Node | None
    after: Node | None
    appended: list[Message] | None  # the messages a conversation grew by


@dataclass(slots=True)
class Write:
    task: str
    node: str  # the task's node, when its path names one
    channel: str
    value: Node  # its pointer starts with the write's place in `Detail.writes` (see `whole_value`)


@dataclass(slots=True)
class Detail:
    info: CheckpointInfo
    channels: list[Channel]
    changes: list[Change] | None  # of the graph's channels; None: the checkpoint has no parent stored
    own_changes: list[Change]  # of LangGraph's own channels (`internal`)
    metadata: Node
    writes: list[Write]
    parent_ns_id: tuple[str, str] | None  # the checkpoint of the parent graph a subgraph's call started under


def _change(c: ChannelChange) -> Change:
    """A channel's change as trees; the items a list grew by as messages or as the list's items."""
    if c.kind == "appended" and c.appended is not None:
        start = len(c.before) if isinstance(c.before, list) else 0
        return Change(c, None, tree(c.appended, start=start), chat(c.appended, start=start))
    return Change(c, None if c.before is None else tree(c.before), None if c.after is None else tree(c.after), None)


def _writes(codec: CheckpointCodec, entry: Entry) -> list[tuple[str, str, Any]]:
    """(task, channel, readable value) of the pending writes, in their stored order."""
    return [(task, channel, readable(codec, value)) for (task, _idx), (channel, value, _path) in sorted(entry.writes.items())]


def _parent_entry(history: History, entry: Entry) -> Entry | None:
    return history.get(entry.line.ns, entry.line.parent) if entry.line.parent else None


def detail(codec: CheckpointCodec, history: History, thread_id: str, checkpoint_id: str | None, ns: str | None) -> Detail:
    """A checkpoint's state as trees, the change from its parent (the CLI's `diff`), its
    metadata and pending writes. CheckpointNotFoundError / CheckpointDroppedError as `show`."""
    entry = find_entry(thread_id, history, checkpoint_id, ns)
    values = state_values(codec, entry)
    channels = [Channel(name, tree(value, ""), chat(value, "")) for name, value in sorted(values.items())]
    parent = _parent_entry(history, entry)
    changes, own = None, []
    if parent is not None:
        every = [_change(c) for c in diff_states(state_values(codec, parent), values)]
        changes = [c for c in every if not internal(c.change.channel)]
        own = [c for c in every if internal(c.change.channel)]
    tasks = _task_names(entry)
    writes = [Write(task, tasks.get(task, ""), channel, tree(value, f"/{n}"))
              for n, (task, channel, value) in enumerate(_writes(codec, entry))]
    parents = entry.line.metadata.get("parents")
    up = _parent_ns(entry.line.ns)
    parent_id = parents.get(up) if entry.line.ns and isinstance(parents, dict) else None
    return Detail(checkpoint_info(codec, entry), channels, changes, own, tree(dict(entry.line.metadata)), writes,
                  (up, parent_id) if isinstance(parent_id, str) else None)


def whole_value(codec: CheckpointCodec, history: History, thread_id: str, checkpoint_id: str, ns: str,
                channel: str, pointer: str) -> Any:
    """The whole readable value of `channel` at a checkpoint (or the part `pointer` names), for
    a value a page shows cut. "$metadata" is the checkpoint's metadata, "$writes" the values
    of its pending writes (a list, in `Detail.writes` order). KeyError when absent."""
    entry = find_entry(thread_id, history, checkpoint_id, ns)
    if channel == "$metadata":
        return at_pointer(dict(entry.line.metadata), pointer)
    if channel == "$writes":
        return at_pointer([value for _task, _channel, value in _writes(codec, entry)], pointer)
    values = state_values(codec, entry)
    if channel not in values:
        raise KeyError(channel)
    return at_pointer(values[channel], pointer)


def questions(codec: CheckpointCodec, history: History) -> list[tuple[str, Any]]:
    """(namespace, value) of every question a paused thread waits on: the pending interrupts of
    each namespace's latest checkpoint, each once, at the deepest namespace that holds it (a
    subgraph's question is pending in the graphs that called it too)."""
    found: dict[bytes, tuple[str, Any]] = {}
    for ns in sorted(history.namespaces(), key=lambda n: n.count("|") + bool(n)):
        latest = history.latest(ns)
        for value in checkpoint_info(codec, latest).interrupts if latest is not None else []:
            found[dumps(value, default=repr)] = (ns, value)
    return list(found.values())
