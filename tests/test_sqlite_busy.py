"""SQLite's "another connection holds the lock" is told by its error code, not by its message."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from telar_checkpoint.stores.sqlite import _busy


def test_a_lock_held_elsewhere_is_busy_and_other_errors_are_not(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    holder = sqlite3.connect(path, isolation_level=None)
    other = sqlite3.connect(path, timeout=0, isolation_level=None)
    try:
        holder.execute("CREATE TABLE t (x)")
        holder.execute("BEGIN EXCLUSIVE")
        with pytest.raises(sqlite3.OperationalError) as locked:
            other.execute("SELECT * FROM t")
        assert _busy(locked.value)
        holder.execute("ROLLBACK")
        with pytest.raises(sqlite3.OperationalError) as missing:
            other.execute("SELECT * FROM missing")
        assert not _busy(missing.value)
    finally:
        holder.close()
        other.close()
