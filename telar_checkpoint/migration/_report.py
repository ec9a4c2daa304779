"""`MigrationReport`: what a migration, re-encoding or import did, thread by thread.

Nothing is dropped silently: every checkpoint of the source that the target does
not hold is listed under `left_out` with its reason, every thread that could not
be moved under `failed` with its error.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

BRANCH = "branch not on the path to the latest checkpoint"
SUBGRAPH = "subgraph of a left-out checkpoint"
TRIMMED = "beyond the target's max_history"
ALREADY = "already migrated"
NOT_FOUND = "not in the source"


@dataclass(frozen=True, slots=True)
class LeftOut:
    """One source checkpoint the target does not hold, and why."""

    checkpoint_ns: str
    checkpoint_id: str
    reason: str
    writes: int = 0  # its pending writes, left out with it


@dataclass(slots=True)
class MigrationReport:
    """Counts and per-thread outcomes; `ok` is True when no thread failed.

    `threads`, `checkpoints` and `writes` count what was written (or, with
    `dry_run`, what would be). `skipped` maps a thread to why it was not written
    ("already migrated"), `left_out` a thread to the checkpoints it lost,
    `failed` a thread to the error that stopped it (nothing was written for it), or
    to "not in the source" for a thread asked for by name. `source_empty`: the source
    held no thread at all.
    """

    source: str
    target: str
    dry_run: bool = False
    threads: int = 0
    checkpoints: int = 0
    writes: int = 0
    skipped: dict[str, str] = field(default_factory=dict)
    left_out: dict[str, list[LeftOut]] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    source_empty: bool = False  # the source held no thread at all (a wrong URL, often)
    schema: int | None = None  # migrate(schema=...): the state schema version the threads were brought to

    @property
    def ok(self) -> bool:
        return not self.failed

    def left_out_counts(self, thread_id: str) -> dict[str, int]:
        """How many checkpoints `thread_id` left out, per reason."""
        return dict(Counter(item.reason for item in self.left_out.get(thread_id, ())))

    def format(self) -> str:
        """A one-paragraph summary for people (the CLI prints it)."""
        if self.source_empty:
            return f"Nothing to migrate: {self.source} holds no threads (is it the right source?)."
        verb = "Would migrate" if self.dry_run else "Migrated"
        parts = [
            f"{verb} {_n(self.threads, 'thread')} ({_n(self.checkpoints, 'checkpoint')}, "
            f"{_n(self.writes, 'pending write')}) from {self.source} to {self.target}"
            + (f", at state schema version {self.schema}." if self.schema is not None else ".")
        ]
        if self.skipped:
            reasons = Counter(self.skipped.values())
            parts.append(
                "Skipped " + ", ".join(f"{_n(n, 'thread')} ({why})" for why, n in sorted(reasons.items())) + "."
            )
        if self.left_out:
            total = sum(len(items) for items in self.left_out.values())
            details = "; ".join(
                f"{thread!r}: " + ", ".join(f"{n} {why}" for why, n in sorted(self.left_out_counts(thread).items()))
                for thread in sorted(self.left_out)
            )
            parts.append(f"Left out {_n(total, 'checkpoint')} in {_n(len(self.left_out), 'thread')} ({details}).")
        if self.failed:
            details = "; ".join(f"{thread!r}: {error}" for thread, error in sorted(self.failed.items()))
            parts.append(f"FAILED {_n(len(self.failed), 'thread')}, nothing written for them ({details}).")
        else:
            parts.append("Nothing failed.")
        return " ".join(parts)


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"
