"""Limits: a 50 MB checkpoint round-trips whole (or is refused clearly), and files are owner-only.

The big-state test runs on the file and sqlite stores; ``TELAR_LIMITS_SERVERS=1``
adds postgres and redis. ``TELAR_LIMITS_MB`` sets the size (default 50).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from telar_checkpoint import FileStore, TelarError, TelarSaver
from telar_checkpoint.stores.sqlite import SQLiteStore
from tests.stores import SERVER_KINDS, describe, make_store, reopen

MB = 1 << 20
SIZE_MB = int(os.environ.get("TELAR_LIMITS_MB", "50"))
BIG_KINDS = ["file", "sqlite"] + (SERVER_KINDS if os.environ.get("TELAR_LIMITS_SERVERS") == "1" else [])


def big_value(megabytes: int) -> str:
    """`megabytes` of UTF-8: ASCII, 2-, 3- and 4-byte characters, a line separator and a marker at the end."""
    unit = "a中é🧵\u2028\"\\\n"  # 1+3+2+4+3+1+1+1 = 16 bytes
    return unit * (megabytes * MB // 16 - 1) + "<end of the value>"


@pytest.mark.parametrize("kind", BIG_KINDS)
def test_a_50_mb_checkpoint_round_trips_whole(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    store = make_store(kind, tmp_path, request)
    saver = TelarSaver(store)
    value = big_value(SIZE_MB)
    assert len(value.encode()) >= (SIZE_MB - 1) * MB
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"big": value, "small": 1}
    config = {"configurable": {"thread_id": "big", "checkpoint_ns": ""}}
    try:
        saved = saver.put(config, checkpoint, {"source": "loop", "step": 1, "parents": {}}, {})
    except TelarError as exc:  # refused: acceptable, if it says why and stores nothing
        assert str(exc)
        assert store.read("big") is None
        return
    saver.put_writes(saved, [("note", "after the big one")], "task")
    got = saver.get_tuple(saved)
    assert got is not None
    assert got.checkpoint["channel_values"]["small"] == 1
    assert got.checkpoint["channel_values"]["big"] == value  # not truncated, not altered
    assert got.pending_writes == [("task", "note", "after the big one")]
    again = reopen(describe(store))  # read back from storage by a new store object
    try:
        assert TelarSaver(again).get_tuple(saved).checkpoint["channel_values"]["big"] == value  # type: ignore[union-attr]
    finally:
        again.close()


# --- owner-only permissions ---


@pytest.fixture(params=[0o022, 0o000], ids=["umask 022", "umask 000"])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    old = os.umask(request.param)
    yield request.param
    os.umask(old)


def modes(root: Path) -> dict[str, int]:
    """The permission bits of `root` and everything under it, by relative path."""
    found = {".": stat.S_IMODE(root.stat().st_mode)}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            found[str(path.relative_to(root))] = stat.S_IMODE(path.stat().st_mode)
    return found


def use(saver: TelarSaver, threads: tuple[str, ...] = ("t", "u")) -> None:
    """Create histories, extend them, and rewrite one (through a temporary file)."""
    for thread in threads:
        checkpoint = empty_checkpoint()
        saved = saver.put({"configurable": {"thread_id": thread, "checkpoint_ns": ""}}, checkpoint, {"source": "loop", "step": 1}, {})
        saver.put_writes(saved, [("a", 1)], "task")
    saver.prune([threads[0]])


def assert_modes(root: Path, file_mode: int, dir_mode: int, umask: int) -> None:
    found = modes(root)
    assert any(p.endswith(".jsonl") for p in found)
    for relative, mode in found.items():
        expected = dir_mode if (root / relative).is_dir() else file_mode
        assert mode == expected, f"{relative}: {oct(mode)}, not {oct(expected)} (umask {oct(umask)})"


def test_file_store_is_owner_only_by_default(tmp_path: Path, umask: int) -> None:
    use(TelarSaver(FileStore(tmp_path / "store")))
    assert_modes(tmp_path / "store", 0o600, 0o700, umask)


def test_file_store_mode_is_honoured(tmp_path: Path, umask: int) -> None:
    use(TelarSaver(FileStore(tmp_path / "shared", mode=0o640)))
    assert_modes(tmp_path / "shared", 0o640, 0o750, umask)


def test_file_store_nested_directories_of_long_ids_are_owner_only(tmp_path: Path, umask: int) -> None:
    use(TelarSaver(FileStore(tmp_path / "store")), threads=("x" * 450,))
    assert sum(p.endswith(".d") for p in modes(tmp_path / "store")) == 2
    assert_modes(tmp_path / "store", 0o600, 0o700, umask)


def test_sqlite_files_are_owner_only_by_default(tmp_path: Path, umask: int) -> None:
    store = SQLiteStore(tmp_path / "db" / "telar.sqlite")
    try:
        use(TelarSaver(store))
        found = modes(tmp_path / "db")
        assert {"telar.sqlite", "telar.sqlite-wal", "telar.sqlite-shm"} <= set(found)
        for relative, mode in found.items():
            expected = 0o700 if relative == "." else 0o600
            assert mode == expected, f"{relative}: {oct(mode)}, not {oct(expected)} (umask {oct(umask)})"
    finally:
        store.close()
