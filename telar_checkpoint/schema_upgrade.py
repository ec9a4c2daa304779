"""The offline state-schema upgrade: every thread of a store brought to a `Schema`'s version now.

`upgrade(store_or_saver, schema)` (and `aupgrade`, its async twin) rewrites each thread below the
schema's version, one atomic `TelarSaver.rewrite` each, through the pure core's `upgrade_text`
(telar_checkpoint/state_schema.py), optionally writing each thread's text to a backup first; `status`
counts a store's threads by the version they are stored at. A tool above the saver, apart from
the core the saver itself reads through: what `telar-checkpoint schema` runs (docs/SCHEMA.md).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from urllib.parse import quote

from telar_checkpoint.errors import StoredDataError, UsageError
from telar_checkpoint.history import History
from telar_checkpoint.progress import Progress
from telar_checkpoint.saver import TelarSaver
from telar_checkpoint.state_schema import Schema, SchemaError, upgrade_text
from telar_checkpoint.steps import Steps, arun, call, run
from telar_checkpoint.stores.base import Store
from telar_checkpoint.stores.file_access import files_mode
from telar_checkpoint.values import ValueCodec

__all__ = ["SchemaStatus", "SchemaUpgrade", "aupgrade", "status", "upgrade"]


@dataclass(slots=True)
class SchemaUpgrade:
    """What `upgrade` did (or, in a dry run, would do)."""

    upgraded: dict[str, int] = field(default_factory=dict)  # thread -> the version it was at
    current: list[str] = field(default_factory=list)  # threads at the schema's version already
    failed: dict[str, Exception] = field(default_factory=dict)  # thread -> why it was left as stored
    backups: dict[str, str] = field(default_factory=dict)  # thread -> the file its text before was written to
    example: tuple[str, str, str] | None = None  # (thread, text before, text after) of the first thread upgraded

    @property
    def failures(self) -> int:
        return len(self.failed)


def upgrade(
    store_or_saver: Store | TelarSaver,
    schema: Schema,
    *,
    dry_run: bool = False,
    thread_ids: Iterable[str] | None = None,
    progress: Progress | None = None,
    backup: str | os.PathLike[str] | None = None,
) -> SchemaUpgrade:
    """Bring every thread of a store (or those of `thread_ids`) to `schema.version`: one atomic
    `TelarSaver.rewrite` per thread. Running it again changes nothing, and an interrupted run
    leaves each thread as it was or upgraded, so a second run finishes it. A thread a step fails
    on is left exactly as stored (its error in the report) and the others go on.

    `dry_run`: write nothing. `progress(done, total, thread_id)`: called after each thread.
    `backup`: a directory (made if needed) where each thread's stored text is written, and
    synced, before it is changed, as ``<thread id, %-quoted>.v<version>.jsonl`` with the thread
    files' permissions. `aupgrade` is its async twin."""
    return run(_upgrade_steps(_saver_of(store_or_saver, schema, thread_ids), schema, dry_run, thread_ids, progress, backup))


async def aupgrade(
    store_or_saver: Store | TelarSaver,
    schema: Schema,
    *,
    dry_run: bool = False,
    thread_ids: Iterable[str] | None = None,
    progress: Progress | None = None,
    backup: str | os.PathLike[str] | None = None,
) -> SchemaUpgrade:
    """`upgrade` on the store's async methods (`aread`, `athread_keys`, `TelarSaver.arewrite`): for an
    application that holds an async store (an async Postgres or Redis pool) in its event loop.
    The steps themselves run in the loop, thread by thread, as a read of the saver does."""
    saver = _saver_of(store_or_saver, schema, thread_ids)
    return await arun(_upgrade_steps(saver, schema, dry_run, thread_ids, progress, backup))


def _saver_of(store_or_saver: Store | TelarSaver, schema: Schema, thread_ids: Iterable[str] | None) -> TelarSaver:
    if not isinstance(schema, Schema):
        raise UsageError(f"upgrade: schema must be a Schema, not {type(schema).__name__}")
    if isinstance(thread_ids, str):
        raise UsageError("upgrade: thread_ids must be a list of thread ids, not one string")
    if isinstance(store_or_saver, TelarSaver):
        return store_or_saver
    if isinstance(store_or_saver, Store):
        return TelarSaver(store_or_saver)
    raise UsageError(f"upgrade: give a Store or a TelarSaver, not {type(store_or_saver).__name__}")


def _upgrade_steps(
    saver: TelarSaver, schema: Schema, dry_run: bool, thread_ids: Iterable[str] | None,
    progress: Progress | None, backup: str | os.PathLike[str] | None,
) -> Steps[SchemaUpgrade]:
    """`upgrade`, written once for the sync and async stores (telar_checkpoint/steps.py)."""
    values = saver.codec.values
    report = SchemaUpgrade()
    store = saver.store
    backups = None if backup is None or dry_run else _Backups(store, Path(backup), report)
    chosen = (yield call(store.thread_keys, store.athread_keys)) if thread_ids is None else list(thread_ids)
    for done, thread_id in enumerate(chosen, 1):
        text = yield call(store.read, store.aread, thread_id)
        try:
            new = upgrade_text(thread_id, text, schema, values)
            if new is None:
                if text is not None:
                    report.current.append(thread_id)
            else:
                assert text is not None
                version = History.parse(thread_id, text).schema_version
                if backups is not None:
                    backups.write(thread_id, version, text)
                if not dry_run:
                    change = partial(_upgraded, thread_id, schema, values, text, new, backups)
                    yield call(saver.rewrite, saver.arewrite, thread_id, change, text=new)
                report.upgraded[thread_id] = version
                if report.example is None:
                    report.example = (thread_id, text, new)
        except (SchemaError, StoredDataError) as exc:
            report.failed[thread_id] = exc
        if progress is not None:
            progress(done, len(chosen), thread_id)
    return report


class _Backups:
    """Where `upgrade(backup=...)` keeps each thread's text before it changes it."""

    def __init__(self, store: Store, directory: Path, report: SchemaUpgrade) -> None:
        try:
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"cannot make the backup directory {directory}: {exc.strerror}") from None
        if not directory.is_dir():
            raise UsageError(f"the backup directory {directory} is not a directory")
        self.store, self.directory, self.report = store, directory, report

    def write(self, thread_id: str, version: int, text: str) -> None:
        """The thread's `text` (stored at `version`) in its backup file, synced: written again
        by a second run (the same text, when the first was interrupted before the rewrite)."""
        path = self.directory / f"{quote(thread_id, safe='')}.v{version}.jsonl"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, files_mode(self.store, thread_id))
            with open(fd, "w", encoding="utf-8", errors="surrogatepass", newline="") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
        except OSError as exc:
            raise UsageError(f"cannot write the backup {path}: {exc.strerror}; nothing more was changed") from None
        self.report.backups[thread_id] = str(path)


def _upgraded(
    thread_id: str, schema: Schema, values: ValueCodec, read: str | None, new: str, backups: _Backups | None, old: str | None
) -> str | None:
    """The rewrite `upgrade` makes: `new` when the thread still holds the text it was made from,
    else the text stored now, upgraded (or as it is; its backup written first)."""
    if old == read:
        return new
    again = upgrade_text(thread_id, old, schema, values)
    if again is None:
        return old
    if backups is not None and old is not None:
        backups.write(thread_id, History.parse(thread_id, old).schema_version, old)
    return again


@dataclass(slots=True)
class SchemaStatus:
    """How many threads of a store are at each state schema version (`status`)."""

    version: int  # the schema's
    versions: dict[int, list[str]] = field(default_factory=dict)  # version -> its threads
    corrupt: list[StoredDataError] = field(default_factory=list)  # threads that do not read

    @property
    def counts(self) -> dict[int, int]:
        return {version: len(threads) for version, threads in sorted(self.versions.items())}

    @property
    def older(self) -> int:
        """Threads an upgrade would rewrite."""
        return sum(len(t) for v, t in self.versions.items() if v < self.version)

    @property
    def newer(self) -> list[str]:
        """Threads stored at a newer version than the schema's: refused, never downgraded."""
        return sorted(t for v, threads in self.versions.items() if v > self.version for t in threads)


def status(store: Store, schema: Schema, *, progress: Progress | None = None) -> SchemaStatus:
    """The threads of `store` by the state schema version they are stored at (read only).
    `progress(done, total, thread_id)`: called after each thread (telar_checkpoint/progress.py)."""
    if not isinstance(schema, Schema):
        raise UsageError(f"status: schema must be a Schema, not {type(schema).__name__}")
    report = SchemaStatus(schema.version)
    chosen = store.thread_keys()
    for done, thread_id in enumerate(chosen, 1):
        text = store.read(thread_id)
        if text is not None:
            try:
                version = History.parse(thread_id, text).schema_version
            except StoredDataError as exc:
                report.corrupt.append(exc)
            else:
                report.versions.setdefault(version, []).append(thread_id)
        if progress is not None:
            progress(done, len(chosen), thread_id)
    return report
