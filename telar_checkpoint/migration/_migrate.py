"""`migrate` and `reencode`: whole threads into a `TelarSaver`, one atomic store update each.

A thread is built as a string first (pure: `CheckpointCodec.append` per record,
oldest first, so the format's rules apply as they would have live), compared with
what the target holds, and written with one `TelarSaver.rewrite`. Rerunning after an
interruption skips threads already written and rewrites the others whole.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from langgraph.checkpoint.base import BaseCheckpointSaver

from telar_checkpoint._arguments import check
from telar_checkpoint.codec import CheckpointCodec, CheckpointRecord
from telar_checkpoint.errors import TelarError, UsageError
from telar_checkpoint.history import History, Key
from telar_checkpoint.migration._report import ALREADY, BRANCH, NOT_FOUND, SUBGRAPH, TRIMMED, LeftOut, MigrationReport
from telar_checkpoint.migration._sources import describe, discover_threads, read_records
from telar_checkpoint.progress import Progress
from telar_checkpoint.saver import TelarSaver
from telar_checkpoint.state_schema import Schema, upgrade_text


class MigrationConflictError(TelarError):
    """The target already holds a different version of a thread; it is left untouched."""


@dataclass(slots=True)
class _Built:
    """One thread ready to store: its text, and what the source held."""

    text: str
    source_keys: dict[Key, set[tuple[str, int]]]  # (ns, id) -> (task_id, idx) of its writes
    parents: dict[Key, str | None]  # (ns, id) -> the root checkpoint a subgraph checkpoint belongs to
    replaces: str | None = None  # re-encoding: the exact text this one must replace


def migrate(
    source: BaseCheckpointSaver,
    target: TelarSaver,
    *,
    thread_ids: Sequence[str] | None = None,
    dry_run: bool = False,
    progress: Progress | None = None,
    schema: Schema | None = None,
) -> MigrationReport:
    """Copy every thread of `source` (or those named) into `target`, oldest checkpoint first.

    Checkpoint ids, parent links, metadata and pending writes are kept; values are
    read through the source's serializer and written through the target's. From
    another `TelarSaver` with the same kind of serializer, the stored string is
    copied after it is validated. With `dry_run` nothing is written.

    With `schema` (a `telar_checkpoint.schema.Schema`), each thread is also brought to the
    schema's version on the way, in the same one write: a thread a step fails on is a failure
    of its own (nothing written for it), and the others go on.
    """
    check(migrate, {"source": source, "target": target, "thread_ids": thread_ids, "dry_run": dry_run, "progress": progress,
                    "schema": schema})
    if not isinstance(target, TelarSaver):
        raise UsageError(f"the migration target must be a TelarSaver, not {type(target).__name__}")
    report = MigrationReport(describe(source), describe(target), dry_run=dry_run)
    report.schema = None if schema is None else schema.version
    copy_text = isinstance(source, TelarSaver) and type(source.codec.values.serde) is type(target.codec.values.serde)

    def build(thread_id: str) -> _Built | None:
        if copy_text:
            built = _built_from_text(source, target, thread_id)  # type: ignore[arg-type]
        else:
            records = read_records(source, thread_id)
            built = _built_from_records(target, records) if records else None
        if built is not None and schema is not None:
            _upgrade_built(target, thread_id, built, schema)
        return built

    _run(report, target, _threads(source, thread_ids), build, dry_run, progress, named=thread_ids is not None)
    return report


def reencode(
    saver: TelarSaver,
    *,
    thread_ids: Sequence[str] | None = None,
    dry_run: bool = False,
    progress: Progress | None = None,
) -> MigrationReport:
    """Rewrite threads in the current format: decode every checkpoint and append it again.

    What the thread remembers of replaced and trimmed checkpoints is kept.
    """
    check(reencode, locals())
    report = MigrationReport(describe(saver), describe(saver), dry_run=dry_run)

    def build(thread_id: str) -> _Built | None:
        text = saver.store.read(thread_id)
        if text is None:
            return None
        old = saver.codec.parse(thread_id, text)
        built = _built_from_records(saver, saver.codec.decode_history(thread_id, text))
        new = saver.codec.parse(thread_id, built.text)
        for ns, dropped in old.dropped.items():
            mine = new.dropped.setdefault(ns, dropped)
            if mine is not dropped:
                mine.replaced = list(dict.fromkeys(dropped.replaced + mine.replaced))
                mine.floor = max(filter(None, (mine.floor, dropped.floor)), default=None)
        built.text = new.render()
        built.source_keys = _keys_of(old)
        built.replaces = text
        return built

    threads = list(thread_ids) if thread_ids is not None else saver.store.thread_keys()
    _run(report, saver, threads, build, dry_run, progress, named=thread_ids is not None)
    return report


def _threads(source: BaseCheckpointSaver, thread_ids: Sequence[str] | None) -> list[str]:
    if isinstance(thread_ids, str):
        raise UsageError("thread_ids must be a list of thread ids, not one string")
    return [str(t) for t in thread_ids] if thread_ids is not None else discover_threads(source)


def _run(
    report: MigrationReport,
    target: TelarSaver,
    threads: list[str],
    build: Callable[[str], _Built | None],
    dry_run: bool,
    progress: Progress | None,
    *,
    named: bool,
) -> None:
    """Build and store each thread; a thread's error is reported, a progress callback's propagates.
    A thread asked for by name (`named`) that the source does not hold is a failure."""
    report.source_empty = not threads and not named
    for done, thread_id in enumerate(threads, 1):
        try:
            built = build(thread_id)
            if built is None:
                (report.failed if named else report.skipped)[thread_id] = NOT_FOUND
            else:
                _store(report, target, thread_id, built, dry_run)
        except Exception as exc:  # reported per thread; the others go on
            report.failed[thread_id] = f"{type(exc).__name__}: {exc}"
        if progress is not None:
            progress(done, len(threads), thread_id)


def _store(report: MigrationReport, target: TelarSaver, thread_id: str, built: _Built, dry_run: bool) -> None:
    outcome: list[str] = []

    def change(old: str | None) -> str | None:
        outcome.clear()
        if old is not None and _same_history(target.codec, old, built.text):
            outcome.append(ALREADY)
            return old
        if built.replaces is not None:
            if old != built.replaces:
                raise MigrationConflictError("the thread changed while it was re-encoded; run again")
        elif old is not None:
            _check_covered(target.codec, thread_id, old, built.source_keys)
        return built.text

    if dry_run:
        change(target.store.read(thread_id))
    else:
        target.rewrite(thread_id, change, text=built.text)
    if outcome:
        report.skipped[thread_id] = outcome[0]
        return
    kept = target.codec.parse(thread_id, built.text)
    report.threads += 1
    report.checkpoints += len(kept.entries)
    report.writes += sum(len(e.writes) for e in kept.entries.values())
    left_out = _left_out(kept, built)
    if left_out:
        report.left_out[thread_id] = left_out


def _same_history(codec: CheckpointCodec, old: str, new: str) -> bool:
    """The same checkpoints, writes and dropped ids; the order of remembered ids does not matter."""
    if old == new:
        return True
    try:
        a, b = codec.parse(None, old), codec.parse(None, new)
    except TelarError:
        return False

    def content(h: History) -> tuple[object, ...]:
        entries = [(key, e.line.text, sorted(e.writes.items())) for key, e in h.entries.items()]
        dropped = {ns: (d.floor, sorted(d.replaced)) for ns, d in h.dropped.items() if d.floor or d.replaced}
        return entries, dropped, sorted(h.orphans.items()), h.torn

    return content(a) == content(b)


def _check_covered(codec: CheckpointCodec, thread_id: str, old: str, source_keys: dict[Key, set[tuple[str, int]]]) -> None:
    """Refuse to overwrite a target thread holding checkpoints or writes the source does not have."""
    try:
        history = codec.parse(thread_id, old)
    except TelarError as exc:
        raise MigrationConflictError(
            f"the target's copy of the thread cannot be read ({exc}); delete it there to migrate it again"
        ) from exc
    for key, entry in history.entries.items():
        extra = key not in source_keys or not set(entry.writes) <= source_keys[key]
        if extra:
            ns, cid = key
            where = f" in namespace {ns!r}" if ns else ""
            raise MigrationConflictError(
                f"the target already holds this thread with checkpoint {cid}{where} "
                f"{'or its writes ' if key in source_keys else ''}not in the source (was it used since?); "
                "it was left untouched: export or delete it there to migrate it again"
            )


def _built_from_records(target: TelarSaver, records: Iterable[CheckpointRecord]) -> _Built:
    text = ""
    source_keys: dict[Key, set[tuple[str, int]]] = {}
    parents: dict[Key, str | None] = {}
    for record in records:
        text = target.codec.append(text, record, target.max_history)
        key = (record.checkpoint_ns, record.id)
        source_keys[key] = {(w.task_id, w.idx) for w in record.writes}
        parents[key] = (record.metadata.get("parents") or {}).get("") if record.checkpoint_ns else None
    return _Built(text, source_keys, parents)


def _built_from_text(source: TelarSaver, target: TelarSaver, thread_id: str) -> _Built | None:
    """The source's string, validated by decoding it with the target's codec, trimmed to its max_history
    (rendered again if it holds lines of a development build)."""
    text = source.store.read(thread_id)
    if text is None:
        return None
    history = source.codec.parse(thread_id, text)
    if history.only_deleted:  # the record of a deleted thread: no thread to copy
        return None
    target.codec.decode_history(thread_id, text)  # every value readable by the target
    if history.development_lines:  # written in versions 1 and 2 (the same records)
        text = history.in_current_versions(text)
    elif history.torn is not None:
        text = text[: len(text) - len(history.torn)]
    if target.max_history is not None:
        text = target.codec.trim(text, target.max_history)
    return _Built(text, _keys_of(history), _parents_of(history))


def _upgrade_built(target: TelarSaver, thread_id: str, built: _Built, schema: Schema) -> None:
    """`built` brought to `schema.version` (a step's failure raises: the thread fails alone). A
    renamed node's writes get new task ids: the target may hold either, so both are the source's."""
    text = upgrade_text(thread_id, built.text, schema, target.codec.values)
    if text is None:
        return
    for key, writes in _keys_of(target.codec.parse(thread_id, text)).items():
        if key in built.source_keys:
            built.source_keys[key] = built.source_keys[key] | writes
    built.text = text


def _keys_of(history: History) -> dict[Key, set[tuple[str, int]]]:
    return {key: {(t, i) for t, i in entry.writes} for key, entry in history.entries.items()}


def _parents_of(history: History) -> dict[Key, str | None]:
    return {
        (ns, cid): (entry.line.metadata.get("parents") or {}).get("") if ns else None
        for (ns, cid), entry in history.entries.items()
    }


def _left_out(kept: History, built: _Built) -> list[LeftOut]:
    """Each source checkpoint the built thread does not hold, with the reason."""
    items = []
    for key, writes in built.source_keys.items():
        if key in kept.entries:
            continue
        ns, cid = key
        root = built.parents.get(key) if ns else None
        if root is not None and ("", root) in built.source_keys and ("", root) not in kept.entries:
            reason = SUBGRAPH
        elif kept.dropped_reason(ns, cid) == "trimmed":
            reason = TRIMMED
        else:
            reason = BRANCH
        items.append(LeftOut(ns, cid, reason, len(writes)))
    return items
