"""Salvaging a damaged thread: keep every line that reads, drop the rest, keep the original.

`plan_repair` is pure (a thread id and its stored text in, the repaired text and
what it drops out). It drops blank lines, a torn (unterminated) last line, lines
that do not read, and then what can no longer be reached from what is kept: a
checkpoint whose parent (or parent-graph checkpoint) was dropped, and pending
writes of a checkpoint that is not kept. What is left is the thread's history up
to its damage, which `verify_thread` calls sound and LangGraph resumes from.
`repair` applies a plan to a store, after writing the original text to a backup.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from telar_checkpoint._arguments import check
from telar_checkpoint.errors import StoredDataError, TelarError, UsageError
from telar_checkpoint.format import CheckpointLine, WritesLine, read_line
from telar_checkpoint.history import History, Key
from telar_checkpoint.inspection import read_thread
from telar_checkpoint.saver import TelarSaver
from telar_checkpoint.stores.base import Store
from telar_checkpoint.stores.file_access import files_mode
from telar_checkpoint.verify import verify_thread

_UNREACHABLE = {"missing-parent", "missing-owner", "orphan-writes"}  # verify's errors about links, not lines


class RepairConflictError(TelarError):
    """The thread changed while it was being repaired; nothing was written."""


@dataclass(frozen=True, slots=True)
class DroppedLine:
    """One stored line the repair leaves out: its number in the stored text, and why."""

    line: int
    reason: str


@dataclass(slots=True)
class RepairPlan:
    """The repaired text of one thread and the lines it drops (none: the thread needs no repair)."""

    thread_id: str
    original: str
    text: str
    dropped: list[DroppedLine] = field(default_factory=list)
    backup: str | None = None  # where `repair` wrote the original text

    @property
    def needed(self) -> bool:
        return self.text != self.original


def _message(exc: StoredDataError) -> str:
    text = str(exc)
    return text.split(": ", 1)[1] if exc.line is not None and ": " in text else text


def plan_repair(thread_id: str, text: str) -> RepairPlan:
    """What repairing `text` keeps and drops (pure; see the module docs)."""
    raw_lines = text.split("\n")  # "\n" only, as History.parse
    tail = raw_lines.pop()
    dropped: list[DroppedLine] = []
    kept: dict[int, str] = {}  # line number -> raw line
    history = History(thread_id)
    for number, raw in enumerate(raw_lines, 1):
        if not raw.strip():
            dropped.append(DroppedLine(number, "a blank line"))
            continue
        try:
            read_line(raw, thread_id, number)
            history.extend(raw + "\n")  # a line may read alone and not in its place
        except StoredDataError as exc:
            dropped.append(DroppedLine(number, _message(exc)))
            continue
        kept[number] = raw
    if tail:
        dropped.append(DroppedLine(len(raw_lines) + 1, f"a torn last line ({len(tail)} characters, no newline)"))
    _drop_unreachable(thread_id, kept, dropped, _UNREACHABLE | ({"pending-put"} if dropped else set()))
    repaired = "".join(raw + "\n" for raw in kept.values())
    return RepairPlan(thread_id, text, repaired, sorted(dropped, key=lambda d: d.line))


def _drop_unreachable(thread_id: str, kept: dict[int, str], dropped: list[DroppedLine], codes: set[str]) -> None:
    """Drop, until none is left, the lines verify finds unreachable (`codes`; each pass drops at least one).
    Once a line was dropped, writes waiting for a checkpoint newer than any kept (pending-put) go too:
    their checkpoint's line was most likely the damaged one."""
    gone: set[Key] = set()  # checkpoints dropped for their links: their writes go too
    while True:
        numbers = list(kept)
        problems = [p for p in verify_thread(thread_id, "".join(r + "\n" for r in kept.values()))
                    if p.code in codes and p.line is not None]
        for problem in problems:
            number = numbers[problem.line - 1]  # type: ignore[operator]
            line = read_line(kept.pop(number), thread_id, number)
            if isinstance(line, CheckpointLine):
                gone.add((line.ns, line.id))
            dropped.append(DroppedLine(number, problem.message))
        for number, raw in list(kept.items()):
            line = read_line(raw, thread_id, number)
            if isinstance(line, WritesLine) and (line.ns, line.checkpoint_id) in gone:
                del kept[number]
                dropped.append(DroppedLine(number, f"pending writes of checkpoint {line.checkpoint_id}, "
                                                   "which the repair drops"))
        if not problems:
            return


def write_file(path: str | os.PathLike[str], text: str, mode: int, *, exclusive: bool = False) -> None:
    """Write `text` to the file at `path`, a new one made with `mode` (an existing one keeps its own);
    with `exclusive`, never over an existing file (FileExistsError)."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_EXCL if exclusive else os.O_TRUNC)
    with open(os.open(path, flags, mode), "w", encoding="utf-8", errors="surrogateescape", newline="") as f:
        f.write(text)


def _backup_path(store: Store, thread_id: str, backup: str | os.PathLike[str] | None) -> Path:
    if backup is not None:
        return Path(backup)
    path = getattr(store, "path", None)
    if store.kind == "file" and callable(path):
        return Path(f"{path(thread_id)}.bak")  # beside the thread's file
    raise UsageError(f"thread {thread_id!r} is in a {store.kind} store: say where to keep the original (backup=...)")


def repair(
    store: Store,
    thread_id: str,
    *,
    backup: str | os.PathLike[str] | None = None,
    dry_run: bool = False,
) -> RepairPlan:
    """Repair `thread_id` in `store` as `plan_repair` says, keeping the original text in `backup`.

    `backup` defaults to ``<thread file>.bak`` beside a file store's thread; other stores
    need one. An existing backup is never overwritten. With `dry_run`, or when the thread
    needs no repair, nothing is written. A thread that changes meanwhile is left as it is
    (RepairConflictError).
    """
    check(repair, locals())
    plan = plan_repair(thread_id, read_thread(store, thread_id))
    if dry_run or not plan.needed:
        return plan
    if not plan.text:
        raise UsageError(f"no line of thread {thread_id!r} reads: nothing to keep; export it with "
                         "`telar-checkpoint export --raw` to look at it, or delete it")
    target = _backup_path(store, thread_id, backup)
    try:
        # With the thread files' permissions (0600: readable by its owner only); never over an existing file.
        write_file(target, plan.original, files_mode(store, thread_id), exclusive=True)
    except FileExistsError:
        raise UsageError(f"{target} already exists; move it away or name another backup") from None
    except OSError as exc:
        raise UsageError(f"cannot write the backup {target}: {exc.strerror}") from None
    plan.backup = str(target)

    def change(old: str | None) -> str | None:
        if old != plan.original:
            raise RepairConflictError(f"thread {thread_id!r} changed while it was repaired; nothing was written, "
                                      f"run the repair again (the original is in {target})")
        return plan.text

    TelarSaver(store).rewrite(thread_id, change)
    return plan
