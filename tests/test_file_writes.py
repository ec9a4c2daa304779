"""The file store's write path: a write holds ``flock`` from its look at the file to its
append, then lets go, so another store or process never waits on an idle writer; a lone
append syncs itself, a batch shares one fsync; a hand edit between writes is seen."""

from __future__ import annotations

import fcntl
import os
import threading
import time
from pathlib import Path

import pytest

from telar_checkpoint.stores import FileStore

pytestmark = pytest.mark.skipif(not hasattr(fcntl, "flock"), reason="flock")


def locked_elsewhere(path: Path) -> bool:
    """Whether a writer holds ``flock`` on `path` (tried from an open file of our own)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def test_a_writer_holds_no_lock_once_its_write_returned(tmp_path: Path) -> None:
    store = FileStore(tmp_path, fsync=False)
    version = store.update_versioned("t", lambda old: "a\n")[1]
    version = store.append_if("t", "b\n", version)
    assert version is not None
    assert not locked_elsewhere(store.path("t"))
    store.update("t", lambda old: "rewritten\n")
    assert not locked_elsewhere(store.path("t"))
    assert store.read("t") == "rewritten\n"
    store.close()


def test_another_store_writes_at_once_after_a_write_even_with_a_patched_clock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hang CI met twice: a test patched ``time.monotonic`` for a moment; the leases
    thread (since removed) computed its next wake-up from that clock and held every lock of
    the process for an hour, so a second store on the directory waited for ever."""
    one = FileStore(tmp_path, fsync=False)
    one.update("t", lambda old: "a\n")
    one.update("t", lambda old: (old or "") + "b\n")
    monkeypatch.setattr(time, "monotonic", lambda: 1.0)  # far behind the real clock
    time.sleep(0.05)
    monkeypatch.undo()
    two = FileStore(tmp_path, fsync=False, lock_timeout=10.0)
    done = threading.Event()
    writer = threading.Thread(target=lambda: (two.update("t", lambda old: (old or "") + "c\n"), done.set()), daemon=True)
    writer.start()
    assert done.wait(2.0), "the second store still waits for the first's lock"
    assert one.read("t") == "a\nb\nc\n"
    one.close()
    two.close()


def test_two_stores_writing_one_file_take_turns_and_lose_nothing(tmp_path: Path) -> None:
    """Two stores on one directory (as two processes would be) writing one thread at once."""
    one, two = FileStore(tmp_path, fsync=False), FileStore(tmp_path, fsync=False)
    one.update("t", lambda old: "")
    errors: list[BaseException] = []

    def write(store: FileStore, tag: str) -> None:
        try:
            for i in range(100):
                store.update("t", lambda old, i=i: (old or "") + f"{tag}{i}\n")
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(s, tag)) for s, tag in ((one, "a"), (two, "b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    text = one.read("t") or ""
    assert sorted(text.splitlines()) == sorted([f"a{i}" for i in range(100)] + [f"b{i}" for i in range(100)])
    one.close()
    two.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="forks")
def test_a_child_process_writes_a_thread_its_parent_wrote(tmp_path: Path) -> None:
    store = FileStore(tmp_path, fsync=False)
    store.update("t", lambda old: "parent\n")
    store.update("t", lambda old: (old or "") + "again\n")
    pid = os.fork()
    if pid == 0:  # the child: the parent's open descriptors are not its own
        code = 1
        try:
            store.update("t", lambda old: (old or "") + "child\n")
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    store.update("t", lambda old: (old or "") + "parent again\n")
    assert store.read("t") == "parent\nagain\nchild\nparent again\n"
    store.close()


@pytest.mark.parametrize("edit", ["append", "truncate", "replace"])
def test_a_hand_edit_between_writes_is_seen_by_the_next_write(tmp_path: Path, edit: str) -> None:
    """A person or a tool that takes no lock: the next write finds the file as it is, and
    never appends after a text it did not see."""
    store = FileStore(tmp_path, fsync=False)
    store.update("t", lambda old: "a\n")
    version = store.update_versioned("t", lambda old: (old or "") + "b\n")[1]
    path = store.path("t")
    if edit == "append":  # a torn tail, as a crash of a writer that took no lock leaves it
        with open(path, "a") as f:
            f.write("tor")
        seen = "a\nb\ntor"
    elif edit == "truncate":
        with open(path, "r+") as f:
            f.truncate(2)
        seen = "a\n"
    else:
        tmp = tmp_path / "new.tmp"
        tmp.write_text("x\n")
        os.replace(tmp, path)
        seen = "x\n"
    assert store.append_if("t", "c\n", version) is None  # the version moved
    given: list[str | None] = []
    store.update("t", lambda old: (given.append(old), (old or "").removesuffix("tor") + "c\n")[1])
    assert given == [seen]
    assert store.read("t") == seen.removesuffix("tor") + "c\n"
    store.close()


def test_appends_are_made_durable_by_one_flush(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An append returns before its fsync; one flush serves every append made before it (group
    commit), and a flush with nothing pending syncs nothing."""
    fsyncs: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (fsyncs.append(fd), real_fsync(fd))[1])
    store = FileStore(tmp_path)
    version = store.update_versioned("t", lambda old: "a\n")[1]
    fsyncs.clear()
    version = store.append_if_deferred("t", "b\n", version)
    version = store.append_if_deferred("t", "c\n", version)
    handle = store._handles["t"]
    assert handle.commits.pending and fsyncs == []
    store.flush("t")
    assert len(fsyncs) == 1 and not handle.commits.pending
    store.flush("t")
    assert len(fsyncs) == 1
    assert store.append_if("t", "d\n", version) is not None and len(fsyncs) == 2  # append_if: append, then flush
    assert store.read("t") == "a\nb\nc\nd\n"
    store.close()
