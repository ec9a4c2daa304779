"""A thread's lifetime: when it was deleted, as the record a deleted thread leaves, and the
settings of a time-to-live (`ttl_settings`).

A deleted thread (`TelarSaver.delete_thread`, `prune(strategy="delete")`) is rewritten to its
record, the root `dropped` line's `deleted_before` and `deleted_at` (docs/FORMAT.md): a run that
still writes to it is refused (`ThreadDeletedError`, `rules.DeleteThread`), and every reader sees
no thread. `deletion` makes that record from a clock, the saver's (`time.time` unless it was
given another, as tests do).

`ttl_settings` reads a time-to-live in the keys and units of langgraph.json's
`checkpointer.ttl` and of langgraph-checkpoint-redis' `ttl`; no saver acts on one yet (issue 40,
part B: expiry, the sweep).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any
from uuid import UUID

from telar_checkpoint.errors import UsageError
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
    return DeleteThread(str(UUID(int=value)), datetime.fromtimestamp(now, timezone.utc).isoformat())


STRATEGIES = ("delete", "keep_latest")


@dataclass(frozen=True, slots=True)
class TTL:
    """A time-to-live, as `ttl_settings` reads it: minutes (fractions allowed) since a thread's
    last write (and read, with `refresh_on_read`) before it expires (None: none by default);
    what an expiry does (`strategy`); minutes between background sweeps (None: none)."""

    default_ttl: float | None = None
    refresh_on_read: bool = False
    strategy: str = "delete"
    sweep_interval_minutes: float | None = None


def _minutes(settings: Mapping[str, Any], key: str) -> float | None:
    value = settings.get(key)
    if value is None:
        return None
    if type(value) not in (int, float) or not math.isfinite(value) or value <= 0:
        raise UsageError(f"ttl[{key!r}] should be a positive number of minutes (fractions allowed) or None, not {value!r}")
    return float(value)


def ttl_settings(settings: Mapping[str, Any]) -> TTL:
    """The `TTL` of a mapping with the keys `default_ttl`, `refresh_on_read`, `strategy` and
    `sweep_interval_minutes` (each optional); UsageError naming a key that is unknown or a
    value that is not of its kind."""
    if not isinstance(settings, Mapping):
        raise UsageError(f"ttl should be a dict such as {{'default_ttl': 43200}}, not {type(settings).__name__}")
    known = TTL.__dataclass_fields__.keys()
    unknown = [key for key in settings if key not in known]
    if unknown:
        raise UsageError(f"ttl has no key {unknown[0]!r}; its keys are {', '.join(known)}")
    refresh = settings.get("refresh_on_read", False)
    if type(refresh) is not bool:
        raise UsageError(f"ttl['refresh_on_read'] should be True or False, not {refresh!r}")
    strategy = settings.get("strategy", "delete")
    if strategy not in STRATEGIES:
        raise UsageError(f"ttl['strategy'] should be 'delete' or 'keep_latest', not {strategy!r}")
    return TTL(_minutes(settings, "default_ttl"), refresh, strategy, _minutes(settings, "sweep_interval_minutes"))
