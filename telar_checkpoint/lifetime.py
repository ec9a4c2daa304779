"""A thread's lifetime: when it was deleted, as the record a deleted thread leaves.

A deleted thread (`TelarSaver.delete_thread`, `prune(strategy="delete")`) is rewritten to its
record, the root `dropped` line's `deleted_before` and `deleted_at` (docs/FORMAT.md): a run that
still writes to it is refused (`ThreadDeletedError`, `rules.DeleteThread`), and every reader sees
no thread. `deletion` makes that record from a clock, the saver's (`time.time` unless it was
given another, as tests do).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timezone

from telar_checkpoint.rules import DeleteThread

Clock = Callable[[], float]
"""Seconds since the Unix epoch, as `time.time` gives them."""

# 100-ns intervals between the UUID epoch (1582-10-15) and the Unix epoch, as uuid6 counts them.
_UUID_EPOCH = 0x01B21DD213814000


def deletion(now: float) -> DeleteThread:
    """The deletion of a thread at `now`: its mark is the greatest checkpoint id LangGraph can
    have made by then (a uuid6 of that instant with every later field at its maximum), so every
    checkpoint of a run that started before compares below it, from any process whose clock is
    not ahead of this one."""
    ticks = int(now * 10_000_000) + _UUID_EPOCH
    value = ((ticks >> 12) & 0xFFFFFFFFFFFF) << 80 | 0x6 << 76 | (ticks & 0x0FFF) << 64 | 0xBFFF << 48 | 0xFFFFFFFFFFFF
    text = f"{value:032x}"
    mark = f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"
    return DeleteThread(mark, datetime.fromtimestamp(now, timezone.utc).isoformat())
