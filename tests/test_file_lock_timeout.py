"""A file store never waits for ever for another writer's lock: after `lock_timeout` it raises
`StoreBusyError` naming the thread, the file and the process that holds the lock, and what was
stored is as it was."""

from __future__ import annotations

import fcntl
import multiprocessing
import os
import time
from pathlib import Path

import pytest

from telar_checkpoint import StoreBusyError, StoreError
from telar_checkpoint.stores import FileStore
from tests.stores import processes

pytestmark = pytest.mark.skipif(not hasattr(fcntl, "flock"), reason="flock")


def hold_lock(path: str, locked: multiprocessing.synchronize.Event, release: multiprocessing.synchronize.Event) -> None:
    fd = os.open(path, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    locked.set()
    release.wait(30)
    os.close(fd)


@pytest.mark.parametrize("write", ["append", "rewrite"])
def test_a_lock_held_too_long_by_another_process_is_a_busy_error_naming_it(tmp_path: Path, write: str) -> None:
    store = FileStore(tmp_path, fsync=False, lock_timeout=0.5)
    store.update("t", lambda old: "a\n")
    context = processes()
    locked, release = context.Event(), context.Event()
    holder = context.Process(target=hold_lock, args=(str(store.path("t")), locked, release))
    holder.start()
    try:
        assert locked.wait(30)
        other = FileStore(tmp_path, fsync=False, lock_timeout=0.5)
        change = (lambda old: (old or "") + "b\n") if write == "append" else (lambda old: "replaced\n")
        started = time.monotonic()
        with pytest.raises(StoreBusyError) as raised:
            other.update("t", change)
        waited = time.monotonic() - started
        assert 0.5 <= waited < 5
        message = str(raised.value)
        assert "thread 't'" in message and str(store.path("t")) in message
        if os.path.exists("/proc/locks"):
            assert f"process {holder.pid}" in message
        assert isinstance(raised.value, StoreError)
        assert store.read("t") == "a\n"  # nothing written
    finally:
        release.set()
        holder.join(30)
    other.update("t", lambda old: (old or "") + "b\n")  # once it is let go, writes go on
    assert store.read("t") == "a\nb\n"


def test_a_lock_held_by_this_process_elsewhere_says_so(tmp_path: Path) -> None:
    store = FileStore(tmp_path, fsync=False, lock_timeout=0.3)
    store.update("t", lambda old: "a\n")
    fd = os.open(store.path("t"), os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with pytest.raises(StoreBusyError, match="this process"):
            store.update("t", lambda old: (old or "") + "b\n")
    finally:
        os.close(fd)
    assert store.read("t") == "a\n"
