"""The line format: one JSON object per line, readers chosen by format version.

Three kinds of line exist. A ``checkpoint`` line holds one checkpoint; a
``writes`` line holds the pending writes of one task for one checkpoint (so
`put_writes` is an append); a ``dropped`` line remembers, per namespace, which
checkpoint ids were replaced or trimmed. A line saved inside a subgraph carries
its namespace (and, for checkpoints, the parents map) and is format version 2;
every other line is version 1. There is no other version: lines that
development builds wrote as version 3 are read (as 1 or 2), and written again as
1 or 2 by the next write of their thread. Every field is
known: a line with a field its version does not have is refused. `step` and
`source` on a checkpoint line are projections for people and tools: they are
written, and ignored on read. docs/FORMAT.md is the full specification.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson

from telar_checkpoint.errors import CorruptLineError, SerializationError, UnknownFormatError

FORMAT_V1 = 1  # root-namespace lines (no subgraph); readable by every release
FORMAT_V2 = 2  # lines saved inside a subgraph: adds "ns" and "parents"
# What development builds wrote for a line with "appended", "$same" or "deleted" (in any namespace,
# "ns" optional). Not a version of the format: read as the version 1 or 2 line it stands for, never
# written (see `History.development_lines`).
_DEVELOPMENT_BUILD = 3
# orjson reads 1024 levels of nesting but writes 255: a line's metadata and plain checkpoint
# fields are written again (a rewrite, a record handed to LangGraph), so deeper ones are refused.
MAX_FIELD_DEPTH = 200
# Plain fields of a LangGraph checkpoint kept as they are; others go to "extra".
PLAIN_CHECKPOINT_KEYS = ("v", "ts", "channel_versions", "versions_seen", "updated_channels")
# The checkpoint fields a line holds in fields of its own: "extra" never holds them.
OWN_CHECKPOINT_FIELDS = frozenset({*PLAIN_CHECKPOINT_KEYS, "id", "channel_values"})


@dataclass(slots=True)
class CheckpointLine:
    ns: str
    id: str
    parent: str | None
    metadata: dict[str, Any]  # plain JSON, with "parents"
    checkpoint: dict[str, Any]  # the plain fields, without id and channel_values
    extra: dict[str, Any]  # other checkpoint fields, encoded values
    values: dict[str, Any]  # channel -> encoded value
    appended: dict[str, list[Any]] = field(default_factory=dict)  # channel -> items added to the parent's list
    text: str = ""  # the line as stored, without its newline

    @property
    def step(self) -> int:
        step = self.metadata.get("step")
        return step if isinstance(step, int) else -1

    @property
    def source(self) -> str | None:
        return self.metadata.get("source")


@dataclass(slots=True)
class WritesLine:
    ns: str
    checkpoint_id: str
    task_id: str
    task_path: str
    writes: list[tuple[int, str, Any]]  # (idx, channel, encoded value)


@dataclass(slots=True)
class DroppedLine:
    ns: str
    floor: str | None  # ids below this were trimmed
    replaced: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)  # removed on request (delete_for_runs): read as absent
    # The state schema version the thread is stored at (telar_checkpoint.schema), on the root
    # namespace's record; None: not recorded (version 1).
    schema: int | None = None
    # On the root namespace's record of a thread that was deleted (`delete_thread`, an expiry):
    # every checkpoint id up to `deleted_before` the thread does not hold was in the deleted
    # thread, and a write for one is refused (`ThreadDeletedError`); `deleted_at` is when (ISO 8601).
    deleted_before: str | None = None
    deleted_at: str | None = None
    # On the root namespace's record: the thread's own time-to-live in minutes, set by
    # `TelarSaver.set_thread_ttl` (math.inf: it never expires; None: the saver's default).
    ttl: float | None = None


Line = CheckpointLine | WritesLine | DroppedLine

# A channel value written as {"$same": null}: the parent checkpoint's value of that channel,
# unchanged (its version is the parent's), so a large value is not stored again with every
# checkpoint. It is no value a serializer writes: their one-key `$` objects are escaped.
SAME_TAG = "$same"
SAME: dict[str, None] = {SAME_TAG: None}


def is_same(value: Any) -> bool:
    """Whether a stored channel value is the `SAME` reference to the parent's value."""
    return type(value) is dict and len(value) == 1 and SAME_TAG in value


def _head(kind: str, ns: str) -> dict[str, Any]:
    """The start of every line: its format version (`line_version`), kind and namespace."""
    if ns:
        return {"format": FORMAT_V2, "kind": kind, "ns": ns}
    return {"format": FORMAT_V1, "kind": kind}


def line_version(line: Line) -> int:
    """The format version of `line`: 2 inside a subgraph (a namespace), else 1."""
    return FORMAT_V2 if line.ns else FORMAT_V1


def _dumps(obj: dict[str, Any]) -> str:
    try:
        return orjson.dumps(obj).decode("utf-8")
    except TypeError as exc:
        raise SerializationError(f"cannot write a line as JSON: {exc}") from exc


def plain_metadata(metadata: dict[str, Any]) -> dict[str, Any]:
    """Metadata as plain JSON (tuples become lists, as in LangGraph's SQL savers); what JSON
    cannot hold (a lone surrogate, NaN or an infinity, which orjson would write as null) is
    refused, never stored as something else."""
    try:
        text = orjson.dumps(metadata)
    except TypeError as exc:
        raise SerializationError(f"checkpoint metadata must be JSON: {exc}") from exc
    if b"null" in text and (where := _not_finite(metadata)):
        raise SerializationError(f"checkpoint metadata must be JSON: {where!r} is NaN or an infinity, which JSON cannot hold")
    plain: dict[str, Any] = orjson.loads(text)  # a dict written and read back
    return plain


def _not_finite(value: Any) -> str:
    """The path (`key.key[0]`) of the first float in `value` that is NaN or infinite, or ""."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, path = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return path
        if isinstance(item, dict):
            stack.extend((v, f"{path}.{k}" if path else str(k)) for k, v in item.items())
        elif isinstance(item, (list, tuple)):
            stack.extend((v, f"{path}[{i}]") for i, v in enumerate(item))
    return ""


def write_checkpoint(line: CheckpointLine) -> str:
    """The JSON text of a checkpoint line (no newline)."""
    doc = _head("checkpoint", line.ns)
    doc["step"] = line.metadata.get("step")
    doc["source"] = line.metadata.get("source")
    doc["id"] = line.id
    doc["parent"] = line.parent
    metadata = line.metadata
    if line.ns:
        doc["parents"] = metadata.get("parents", {})
        metadata = {k: v for k, v in metadata.items() if k != "parents"}
    doc["metadata"] = metadata
    doc["checkpoint"] = line.checkpoint
    if line.extra:
        doc["extra"] = line.extra
    doc["values"] = line.values
    if line.appended:
        doc["appended"] = line.appended
    return _dumps(doc)


def write_writes(line: WritesLine) -> str:
    doc = _head("writes", line.ns)
    doc["checkpoint"] = line.checkpoint_id
    doc["task"] = line.task_id
    doc["path"] = line.task_path
    doc["writes"] = line.writes  # (idx, channel, value) tuples: orjson writes a tuple as an array
    return _dumps(doc)


def write_dropped(line: DroppedLine) -> str:
    doc = _head("dropped", line.ns)
    doc["floor"] = line.floor
    doc["replaced"] = line.replaced
    if line.deleted:
        doc["deleted"] = line.deleted
    if line.schema is not None:
        doc["schema"] = line.schema
    if line.deleted_before is not None:
        doc["deleted_before"] = line.deleted_before
        doc["deleted_at"] = line.deleted_at
    if line.ttl is not None:
        doc["ttl"] = None if line.ttl == math.inf else line.ttl
    return _dumps(doc)


def render(
    dropped: Iterable[DroppedLine], checkpoints: Iterable[tuple[CheckpointLine, Iterable[WritesLine]]], orphans: Iterable[WritesLine]
) -> list[str]:
    """The lines of a history in canonical order: the records of dropped checkpoints (those
    that say something), then each checkpoint followed by its writes, then the writes of
    checkpoints not stored (yet). Join them with a newline after each to store them."""
    out = [
        write_dropped(d) for d in dropped
        if d.floor or d.replaced or d.deleted or d.schema is not None or d.deleted_before is not None or d.ttl is not None
    ]
    for line, writes in checkpoints:
        out.append(line.text or write_checkpoint(line))
        out.extend(write_writes(w) for w in writes)
    out.extend(write_writes(w) for w in orphans)
    return out


# --- reading ------------------------------------------------------------------


class _Fields:
    """Typed access to a parsed line's fields, raising CorruptLineError with the place."""

    def __init__(self, doc: dict[str, Any], thread_id: str | None, line_no: int) -> None:
        self.doc = doc
        self.thread_id = thread_id
        self.line_no = line_no

    def fail(self, message: str) -> CorruptLineError:
        return CorruptLineError(message, thread_id=self.thread_id, line=self.line_no)

    def get(self, key: str, *types: type, optional: bool = False) -> Any:
        if key not in self.doc:
            if optional:
                return None
            raise self.fail(f"field {key!r} is missing")
        value = self.doc[key]
        if value is None and optional:
            return None
        if types and not isinstance(value, types):
            raise self.fail(f"field {key!r} should be {'/'.join(t.__name__ for t in types)}")
        return value


def _read_checkpoint(f: _Fields, ns: str) -> CheckpointLine:
    metadata = f.get("metadata", dict)
    if ns:
        metadata = {**metadata, "parents": f.get("parents", dict)}
    # The fields the history's rules read must have their types: a namespace -> id map, and
    # DeltaChannel counters keyed by channel.
    parents = metadata.get("parents", {})
    if not (isinstance(parents, dict) and all(isinstance(v, str) for v in parents.values())):
        raise f.fail("'parents' should map namespaces to checkpoint ids")
    if not isinstance(metadata.get("counters_since_delta_snapshot", {}), dict):
        raise f.fail("metadata 'counters_since_delta_snapshot' should be an object")
    step = metadata.get("step")
    if step is not None and type(step) is not int:
        raise f.fail("metadata 'step' should be an integer")
    checkpoint = f.get("checkpoint", dict)
    _check_checkpoint_fields(f, checkpoint)
    for name, value in (("metadata", metadata), ("checkpoint", checkpoint)):
        if _depth(value) > MAX_FIELD_DEPTH:
            raise f.fail(f"field {name!r} is nested more than {MAX_FIELD_DEPTH} levels deep")
    extra = f.get("extra", dict, optional=True) or {}
    if overriding := extra.keys() & OWN_CHECKPOINT_FIELDS:
        raise f.fail(f"field 'extra' holds {min(overriding)!r}, a checkpoint field the line holds itself")
    values = f.get("values", dict)
    appended = f.get("appended", dict, optional=True) or {}
    if not all(isinstance(items, list) for items in appended.values()):
        raise f.fail("field 'appended' should map channels to lists")
    if appended.keys() & values.keys():
        raise f.fail("a channel is both in 'values' and in 'appended'")
    if appended and f.doc.get("parent") is None:
        raise f.fail("field 'appended' needs a parent checkpoint to append to")
    if f.doc.get("parent") is None and any(map(is_same, values.values())):
        raise f.fail(f"a value {SAME_TAG} needs a parent checkpoint to repeat")
    return CheckpointLine(
        ns=ns,
        id=f.get("id", str),
        parent=f.get("parent", str, optional=True),
        metadata=metadata,
        checkpoint=checkpoint,
        extra=extra,
        values=values,
        appended=appended,
    )


def _is_version(value: Any) -> bool:
    return type(value) in (int, float, str)


def _check_checkpoint_fields(f: _Fields, checkpoint: dict[str, Any]) -> None:
    """The plain checkpoint fields LangGraph reads must have its types (see PLAIN_CHECKPOINT_KEYS)."""
    if type(checkpoint.get("v")) is not int:
        raise f.fail("checkpoint.v (LangGraph's checkpoint version) should be an integer")
    if "ts" in checkpoint and not isinstance(checkpoint["ts"], str):
        raise f.fail("checkpoint.ts (when the checkpoint was made) should be text")
    versions = checkpoint.get("channel_versions", {})
    if not (isinstance(versions, dict) and all(map(_is_version, versions.values()))):
        raise f.fail("checkpoint.channel_versions should map channels to versions (integers or text)")
    seen = checkpoint.get("versions_seen", {})
    if not (isinstance(seen, dict) and all(isinstance(v, dict) and all(map(_is_version, v.values())) for v in seen.values())):
        raise f.fail("checkpoint.versions_seen should map nodes to channel versions")
    updated = checkpoint.get("updated_channels")
    if updated is not None and not (isinstance(updated, list) and all(isinstance(c, str) for c in updated)):
        raise f.fail("checkpoint.updated_channels should be a list of channel names or null")


def _depth(value: Any) -> int:
    """How deeply `value` (parsed JSON) nests objects and arrays."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, level)
            if level <= MAX_FIELD_DEPTH:  # deeper is refused anyway: stop there
                stack.extend((child, level + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def _read_writes(f: _Fields, ns: str) -> WritesLine:
    writes = []
    for item in f.get("writes", list):
        if not (isinstance(item, list) and len(item) == 3 and isinstance(item[0], int) and isinstance(item[1], str)):
            raise f.fail("each write should be [idx, channel, value]")
        writes.append((item[0], item[1], item[2]))
    return WritesLine(ns, f.get("checkpoint", str), f.get("task", str), f.get("path", str), writes)


def _read_dropped(f: _Fields, ns: str) -> DroppedLine:
    replaced = f.get("replaced", list)
    deleted = f.get("deleted", list, optional=True) or []
    if not all(isinstance(r, str) for r in replaced + deleted):
        raise f.fail("fields 'replaced' and 'deleted' should hold checkpoint ids")
    schema = f.get("schema", int, optional=True)
    if schema is not None and (type(schema) is not int or schema < 1):
        raise f.fail("field 'schema' (the thread's state schema version) should be a positive integer")
    deleted_before = f.get("deleted_before", str, optional=True)
    deleted_at = f.get("deleted_at", str, optional=True)
    if (deleted_before is None) != (deleted_at is None):
        raise f.fail("fields 'deleted_before' and 'deleted_at' (a deleted thread's record) go together")
    if deleted_at is not None and not _is_time(deleted_at):
        raise f.fail(f"field 'deleted_at' should be a time in ISO 8601 (as 2026-12-07T01:56:42+00:00), not {deleted_at[:40]!r}")
    ttl: float | None = None
    if "ttl" in f.doc:
        given = f.doc["ttl"]
        if given is not None and (type(given) not in (int, float) or not math.isfinite(given) or given <= 0):
            raise f.fail(f"field 'ttl' (the thread's time-to-live) should be a positive number of minutes or null, not {given!r}")
        ttl = math.inf if given is None else float(given)
    return DroppedLine(ns, f.get("floor", str, optional=True), replaced, deleted, schema, deleted_before, deleted_at, ttl)


def _is_time(text: str) -> bool:
    try:
        return datetime.fromisoformat(text).tzinfo is not None
    except ValueError:
        return False


_KINDS: dict[str, Callable[[_Fields, str], Line]] = {
    "checkpoint": _read_checkpoint,
    "writes": _read_writes,
    "dropped": _read_dropped,
}


# The fields each kind of line may carry in the root namespace (version 1); a subgraph's line
# (version 2) adds "ns" and, on checkpoints, "parents". A line with any other field is refused, not
# read without it (it may mean what this release cannot tell). Once the format is released, a new
# field comes with a new version and its own table (until then, docs/FORMAT.md specifies 1 and 2).
ROOT_FIELDS: dict[str, frozenset[str]] = {
    "checkpoint": frozenset(
        {"format", "kind", "step", "source", "id", "parent", "metadata", "checkpoint", "extra", "values", "appended"}
    ),
    "writes": frozenset({"format", "kind", "checkpoint", "task", "path", "writes"}),
    "dropped": frozenset({"format", "kind", "floor", "replaced", "deleted", "schema", "deleted_before", "deleted_at", "ttl"}),
}
# (A deleted thread and a thread's own time-to-live are recorded on the root namespace's dropped line only.)
SUBGRAPH_FIELDS: dict[str, frozenset[str]] = {
    kind: (fields - {"deleted_before", "deleted_at", "ttl"}) | {"ns"} | ({"parents"} if kind == "checkpoint" else set())
    for kind, fields in ROOT_FIELDS.items()
}
# Fields written for people and tools (jq, grep): known, and ignored on read.
PROJECTIONS: dict[str, frozenset[str]] = {"checkpoint": frozenset({"step", "source"})}


def _read_kind(f: _Fields, version: int, ns: str) -> Line:
    kind = f.get("kind", str)
    unknown = f.doc.keys() - (SUBGRAPH_FIELDS if ns else ROOT_FIELDS)[kind]
    if unknown:
        where = "a subgraph's" if ns else "a root"
        raise UnknownFormatError(
            f"a version {version} {kind} line has field {min(unknown)!r}, which {where} {kind} line of that "
            "version does not have; refusing to read the line without it (a newer release may have "
            "written it: upgrade telar-checkpoint; a field added by hand can be removed)",
            thread_id=f.thread_id,
            line=f.line_no,
        )
    return _KINDS[kind](f, ns)


def _read_v1(f: _Fields) -> Line:
    if "ns" in f.doc:
        raise f.fail("a version 1 line has no namespace; lines saved inside a subgraph are version 2")
    return _read_kind(f, FORMAT_V1, "")


def _read_v2(f: _Fields) -> Line:
    ns = f.get("ns", str)
    if not ns:
        raise f.fail("a version 2 line carries a non-empty namespace")
    return _read_kind(f, FORMAT_V2, ns)


def _read_development_build(f: _Fields) -> Line:
    """A development build's version 3 line: the version 1 line it stands for, or version 2 with a
    namespace (it has the fields of those). The caller writes it again as 1 or 2."""
    ns = f.get("ns", str, optional=True)
    if ns == "" or (ns is None and "ns" in f.doc):
        raise f.fail("a development build's version 3 line's namespace, when it has one, is non-empty text")
    return _read_kind(f, FORMAT_V2 if ns else FORMAT_V1, ns or "")


# Readers by format version. Never delete one: every stored version stays readable.
READERS: dict[int, Callable[[_Fields], Line]] = {FORMAT_V1: _read_v1, FORMAT_V2: _read_v2}
# What a reader reads besides the format's versions: lines of development builds (see `_DEVELOPMENT_BUILD`).
_STORED_ONLY: dict[int, Callable[[_Fields], Line]] = {_DEVELOPMENT_BUILD: _read_development_build}


def read_line(text: str, thread_id: str | None, line_no: int) -> Line:
    """Parse one stored line, refusing unknown or missing format versions."""
    return read_stored_line(text, thread_id, line_no)[0]


def read_stored_line(text: str, thread_id: str | None, line_no: int) -> tuple[Line, bool]:
    """Parse one stored line (see `read_line`); and whether a development build wrote it (as
    version 3): then a checkpoint line keeps no `text`, so that it is written again as 1 or 2."""
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise CorruptLineError(f"not valid JSON ({exc})", thread_id=thread_id, line=line_no) from None
    if not isinstance(doc, dict):
        raise CorruptLineError("not a JSON object", thread_id=thread_id, line=line_no)
    if "format" not in doc:
        raise UnknownFormatError(
            "has no format version; refusing to guess how to read it", thread_id=thread_id, line=line_no
        )
    version = doc["format"]
    if type(version) is not int:
        raise UnknownFormatError(
            f"has format version {version!r}, a {type(version).__name__}: a format version is an integer, 1 or 2",
            thread_id=thread_id,
            line=line_no,
        )
    reader = READERS.get(version) or _STORED_ONLY.get(version)
    if reader is None:
        known = ", ".join(str(v) for v in READERS)
        raise UnknownFormatError(
            f"has format version {version!r}, which this release does not read (it reads {known}); "
            "upgrade telar-checkpoint to read it",
            thread_id=thread_id,
            line=line_no,
        )
    f = _Fields(doc, thread_id, line_no)
    if f.get("kind", str) not in _KINDS:
        raise f.fail(f"unknown line kind {doc['kind']!r}")
    line = reader(f)
    development = version == _DEVELOPMENT_BUILD
    if isinstance(line, CheckpointLine) and not development:
        line.text = text
    return line, development


# 100-ns intervals between the UUID epoch (1582-10-15) and the Unix epoch, as uuid6 counts them.
UUID_EPOCH = 0x01B21DD213814000


def checkpoint_time(checkpoint_id: str) -> float | None:
    """When LangGraph made checkpoint `checkpoint_id`, in seconds since the Unix epoch, from the
    uuid6 it is; None for an id of another form (a test's "1", another saver's)."""
    if len(checkpoint_id) != 36 or checkpoint_id[14] != "6":
        return None
    try:
        value = int(checkpoint_id.replace("-", ""), 16)
    except ValueError:
        return None
    ticks = (value >> 80) << 12 | (value >> 64) & 0x0FFF
    return (ticks - UUID_EPOCH) / 10_000_000
