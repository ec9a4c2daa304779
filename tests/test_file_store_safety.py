"""The file store reads and writes only its own regular files, says plainly what went wrong, and
cleans up after writers that were killed (issue 19, items 2, 3, 8, 9 and 11; issue 17's file errors).

Every call that could block runs in a thread with a deadline, so a hang fails the test.
"""

from __future__ import annotations

import errno
import fcntl
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from langgraph.checkpoint.base import empty_checkpoint

from telar_checkpoint import FileStore, TelarError, TelarSaver
from telar_checkpoint.errors import ForeignDataError, StoreError, StoreFullError, UsageError
from telar_checkpoint.inspection import list_threads
from telar_checkpoint.verify import verify_store
from tests.stores import child_exit_code

DEADLINE = 10.0


def name_of(store: FileStore, key: str) -> str:
    """The path of `key`'s history under the store's directory."""
    return store.path(key).relative_to(store.directory).as_posix()


def bounded(call: Callable[[], Any], what: str) -> Any:
    """`call()`'s result or exception; the test fails if it does not return within `DEADLINE`."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as exc:  # handed to the test
            outcome["error"] = exc

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(DEADLINE)
    if worker.is_alive():
        pytest.fail(f"{what} hung")
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


def put(saver: TelarSaver, thread: str, value: Any, parent: dict[str, Any] | None = None) -> dict[str, Any]:
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"value": value}
    config = parent or {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    return saver.put(config, checkpoint, {"source": "loop", "step": 1, "parents": {}}, {})


@pytest.fixture
def store(tmp_path: Path) -> Iterator[FileStore]:
    opened = FileStore(tmp_path / "store")
    yield opened
    opened.close()


def assert_only_ok_is_listed(store: FileStore, planted: str) -> None:
    """`keys`, `list(None)`, `threads` and `verify` return at once, see thread "ok" and list the
    planted entry as foreign."""
    saver = TelarSaver(store)
    assert bounded(lambda: sorted(store.keys()), "keys()") == ["ok"]
    listed = bounded(lambda: list(saver.list(None)), "list(None)")
    assert {t.config["configurable"]["thread_id"] for t in listed} == {"ok"}
    assert bounded(store.foreign, "foreign()") == [planted]
    listing = bounded(lambda: list_threads(store), "list_threads")
    assert [t.thread_id for t in listing.threads] == ["ok"] and listing.foreign == [planted]
    report = bounded(lambda: verify_store(store), "verify_store")
    assert report.foreign == [planted] and report.threads == {"ok": []}


# --- item 2: a FIFO or a directory at a history's path ---


def test_a_fifo_at_a_history_path_hangs_nobody_and_is_reported_as_foreign(store: FileStore) -> None:
    saver = TelarSaver(store)
    put(saver, "ok", 1)
    fifo = store.path("t")
    os.mkfifo(fifo)
    try:
        assert_only_ok_is_listed(store, "t.jsonl")
        config = {"configurable": {"thread_id": "t"}}
        with pytest.raises(ForeignDataError, match=r"thread 't'.*t\.jsonl is a FIFO.*move it away"):
            bounded(lambda: saver.get_tuple(config), "get_tuple on a FIFO")
        with pytest.raises(ForeignDataError, match="is a FIFO"):
            bounded(lambda: put(saver, "t", 2), "put on a FIFO")
        with pytest.raises(ForeignDataError, match="is a FIFO"):
            bounded(lambda: saver.delete_thread("t"), "delete_thread on a FIFO")
        assert Path(fifo).is_fifo()  # never touched
    finally:  # a reader that hung on the FIFO (before the fix) is let go
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass


def test_the_cli_lists_and_verifies_a_store_with_a_fifo_in_it(store: FileStore) -> None:
    put(TelarSaver(store), "ok", 1)
    os.mkfifo(store.path("t"))
    for command in ("threads", "verify"):
        try:
            done = subprocess.run(
                [sys.executable, "-m", "telar_checkpoint", command, str(store.directory)],
                capture_output=True, text=True, timeout=60,
            )
        except subprocess.TimeoutExpired:
            pytest.fail(f"telar-checkpoint {command} hung on a FIFO")
        assert done.returncode == 0, done.stderr
        assert "t.jsonl" in done.stdout and "ok" in done.stdout


def test_a_directory_at_a_history_path_is_reported_as_foreign(store: FileStore) -> None:
    saver = TelarSaver(store)
    put(saver, "ok", 1)
    store.path("t").mkdir()
    (store.path("t") / "inside").write_text("someone's\n")
    assert_only_ok_is_listed(store, "t.jsonl")
    with pytest.raises(ForeignDataError, match=r"t\.jsonl is a directory"):
        saver.get_tuple({"configurable": {"thread_id": "t"}})
    with pytest.raises(ForeignDataError, match="is a directory"):
        put(saver, "t", 2)
    assert (store.path("t") / "inside").read_text() == "someone's\n"


# --- item 3: links at a history's path are never followed ---


def test_appends_never_write_through_a_link_to_another_stores_history(tmp_path: Path, store: FileStore) -> None:
    other = FileStore(tmp_path / "other")
    put(TelarSaver(other), "victim", "theirs")
    victim = other.path("victim")
    before = victim.read_bytes()

    saver = TelarSaver(store)
    put(saver, "ok", 1)
    saved = put(saver, "t", 1)
    os.unlink(store.path("t"))  # a link planted where the thread's history was, between two writes
    os.symlink(victim, store.path("t"))
    with pytest.raises(ForeignDataError, match=r"t\.jsonl is a symbolic link to .*victim\.jsonl"):
        put(saver, "t", 2, saved)
    with pytest.raises(ForeignDataError, match="symbolic link"):
        TelarSaver(FileStore(store.directory)).get_tuple({"configurable": {"thread_id": "t"}})
    assert victim.read_bytes() == before
    assert os.path.islink(store.path("t"))  # never replaced either
    assert_only_ok_is_listed(store, "t.jsonl")


def test_a_dangling_link_is_neither_followed_nor_replaced(tmp_path: Path, store: FileStore) -> None:
    outside = tmp_path / "outside.jsonl"
    os.symlink(outside, store.path("t"))
    with pytest.raises(ForeignDataError, match="symbolic link"):
        put(TelarSaver(store), "t", 1)
    assert not outside.exists() and os.path.islink(store.path("t"))


def test_a_link_in_place_of_a_long_ids_directory_is_never_entered(tmp_path: Path, store: FileStore) -> None:
    long_id = "x" * 450  # three path components: two .d directories and the file
    first, *rest = name_of(store, long_id).split("/")
    outside = tmp_path / "outside"
    (outside / rest[0]).mkdir(parents=True)
    (outside / rest[0] / rest[1]).write_text("someone else's\n")
    os.symlink(outside, store.directory / first)
    with pytest.raises(ForeignDataError, match=rf"{first} is a symbolic link"):
        put(TelarSaver(store), long_id, 1)
    with pytest.raises(ForeignDataError, match="symbolic link"):
        store.read(long_id)
    assert (outside / rest[0] / rest[1]).read_text() == "someone else's\n"
    assert sorted(p.name for p in outside.rglob("*")) == sorted(rest)
    assert list(store.keys()) == [] and store.foreign() == [first]


# --- item 8: temporary files of killed rewrites ---


def age(path: Path, seconds: float = 120.0) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def test_a_killed_rewrites_temporary_file_is_reported_then_removed(store: FileStore) -> None:
    store.write("t", "a\n")
    pid = os.fork()
    if pid == 0:  # a rewrite killed just before its rename, as a SIGKILL would
        os.replace = lambda *_a, **_k: os.kill(os.getpid(), signal.SIGKILL)  # type: ignore[assignment]
        FileStore(store.directory).write("t", "b\n" * 1000)
        os._exit(0)
    assert child_exit_code(pid, "the killed rewrite hung") == -signal.SIGKILL
    left = sorted((store.directory / ".tmp").glob("*.part"))
    assert len(left) == 1 and left[0].stat().st_size == 2000
    assert store.stale_temp_files() == []  # too recent to tell from a live writer's
    age(left[0])

    live = store.directory / ".tmp" / "live.part"  # a live writer's: locked
    live.write_text("in progress")
    age(live)
    live_fd = os.open(live, os.O_RDONLY)
    fcntl.flock(live_fd, fcntl.LOCK_EX)
    try:
        relative = f".tmp/{left[0].name}"
        assert store.stale_temp_files() == [relative]
        assert left[0].exists()  # listing changes nothing
        FileStore(store.directory).write("t", "c\n")  # a rewrite by a new store removes them
        assert not left[0].exists() and live.exists()
        assert store.read("t") == "c\n"
    finally:
        os.close(live_fd)


# --- item 9: every directory created is fsynced, with its parent ---


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd to name synced descriptors")
def test_every_directory_created_for_a_long_id_is_synced_with_its_parent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: set[str] = set()
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.add(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    root = tmp_path / "made" / "store"
    store = FileStore(root)
    long_id = "y" * 450
    store.write(long_id, "a\n")
    parts = name_of(store, long_id).split("/")
    made = [tmp_path / "made", root, root / parts[0], root / parts[0] / parts[1]]
    expected = {str(p) for p in made} | {str(tmp_path)}
    assert expected <= synced, f"not synced: {sorted(expected - synced)}"
    assert store.read(long_id) == "a\n"


# --- item 11: ids that differ only in case ---

CASES = ["Chat", "chat", "CHAT", "cHaT", "A" * 300, "a" * 300, "Ab" * 600, "ab" * 600, "É", "é", "Z%5A", "z%5a"]


def test_ids_that_differ_only_in_case_get_names_that_differ_without_case(store: FileStore) -> None:
    names = [name_of(store, key) for key in CASES]
    assert len({name.lower() for name in names}) == len(CASES)  # as a case-insensitive file system sees them
    for key in CASES:
        store.write(key, f"{key}\n")
    for key in CASES:
        assert store.read(key) == f"{key}\n"
    assert sorted(store.keys()) == sorted(CASES) and store.foreign() == []


@given(st.text(alphabet=st.sampled_from("aAbBzZ%é É-_/.0"), max_size=40), st.randoms(use_true_random=False))
def test_names_round_trip_and_stay_apart_for_any_change_of_case(key: str, rng: Any) -> None:
    from telar_checkpoint.stores.file import decode_name, encode_name

    other = "".join(c.swapcase() if rng.random() < 0.5 else c for c in key)
    assert decode_name(encode_name(key)) == key
    assert (encode_name(key).lower() == encode_name(other).lower()) == (key == other)


def test_a_store_written_with_the_legacy_names_is_still_read_and_moved_on_write(tmp_path: Path) -> None:
    """Release 0.1.0 kept upper-case letters in names: `Chat.jsonl`, and for a long id
    nested `.d` directories of upper-case letters."""
    directory = tmp_path / "store"
    source = TelarSaver(FileStore(tmp_path / "source"))
    long_id = "B" * 450
    legacy = {"Chat": "Chat.jsonl", long_id: f"{'B' * 200}.d/{'B' * 200}.d/{'B' * 50}.jsonl", "chat": "chat.jsonl"}
    for thread, name in legacy.items():
        put(source, thread, thread)
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_text(source.store.read(thread) or "")

    store = FileStore(directory)
    saver = TelarSaver(store)
    assert sorted(store.keys()) == sorted(legacy) and store.foreign() == []
    for thread in legacy:
        got = saver.get_tuple({"configurable": {"thread_id": thread}})
        assert got is not None and got.checkpoint["channel_values"] == {"value": thread}
        put(saver, thread, f"{thread} again", got.config)
    for thread in legacy:  # each now under its new name, with what it had and the new checkpoint
        assert store.path(thread).is_file()
        values = [t.checkpoint["channel_values"]["value"] for t in saver.list({"configurable": {"thread_id": thread}})]
        assert values == [f"{thread} again", thread]
    assert not (directory / "Chat.jsonl").exists() and not (directory / legacy[long_id]).exists()
    assert sorted(store.keys()) == sorted(legacy) and store.foreign() == []
    saver.delete_thread("Chat")
    assert saver.get_tuple({"configurable": {"thread_id": "Chat"}}) is None
    assert saver.get_tuple({"configurable": {"thread_id": "chat"}}) is not None


def test_a_legacy_file_is_deleted_with_its_thread(tmp_path: Path) -> None:
    directory = tmp_path / "store"
    directory.mkdir()
    (directory / "Chat.jsonl").write_text("x\n")
    store = FileStore(directory)
    store.delete("Chat")
    assert store.read("Chat") is None and list(store.keys()) == []


# --- issue 17: every error is ours, and names what and where ---


def test_a_file_given_as_the_store_directory_is_refused_at_once(tmp_path: Path) -> None:
    a_file = tmp_path / "a_file.py"
    a_file.write_text("print('mine')\n")
    with pytest.raises(UsageError, match=r"a_file\.py is a file, not a directory of ours; a store is a directory"):
        TelarSaver(str(a_file))  # as the CLI says (stores.opening)
    with pytest.raises(UsageError, match="not a directory"):
        FileStore(a_file / "under")
    assert a_file.read_text() == "print('mine')\n"


def test_a_store_opened_only_to_read_creates_nothing(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"missing does not exist: there is no file store there"):
        FileStore(tmp_path / "missing", create=False)
    assert not (tmp_path / "missing").exists()
    legacy = tmp_path / "store"
    legacy.mkdir()
    (legacy / "Chat.jsonl").write_text("a\n")
    store = FileStore(legacy, create=False)
    assert list(store.keys()) == ["Chat"] and store.read("Chat") == "a\n" and store.stale_temp_files() == []
    assert sorted(p.name for p in legacy.iterdir()) == ["Chat.jsonl"]  # reading moved nothing, made no .tmp


def test_a_file_where_a_long_ids_directory_goes_is_reported(store: FileStore) -> None:
    long_id = "z" * 450
    first = store.directory / name_of(store, long_id).split("/")[0]
    first.write_text("not a directory\n")
    with pytest.raises(ForeignDataError, match="not a directory"):
        store.write(long_id, "a\n")
    with pytest.raises(ForeignDataError, match="not a directory"):
        store.read(long_id)
    assert first.read_text() == "not a directory\n"


def test_permission_denied_is_a_store_error_that_says_what_to_do(store: FileStore) -> None:
    store.write("t", "a\n")
    os.chmod(store.directory, 0o700)
    if os.geteuid() != 0:
        os.chmod(store.path("t"), 0)
        with pytest.raises(StoreError, match=r"thread 't'.*Permission denied.*check that this process may"):
            FileStore(store.directory).read("t")
        os.chmod(store.path("t"), 0o600)
        return
    pid = os.fork()  # root may read anything: a child that is not root cannot
    if pid == 0:
        code = 1
        try:
            os.setgid(65534)
            os.setuid(65534)
            FileStore(store.directory).read("t")
        except StoreError as exc:
            code = 0 if "Permission denied" in str(exc) and "check that this process may" in str(exc) else 2
        except BaseException:
            code = 3
        os._exit(code)
    assert child_exit_code(pid, "reading as another user hung") == 0
    assert store.read("t") == "a\n"


def test_a_full_disk_during_an_append_takes_back_the_part_written(
    store: FileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    saver = TelarSaver(store)
    saved = put(saver, "t", "first")
    before = store.path("t").read_bytes()
    real_write, real_pwritev = os.write, getattr(os, "pwritev", None)

    def half_then_full(fd: int, data: Any, *args: Any) -> int:  # a disk that fills up midway
        view = memoryview(data[0] if isinstance(data, list) else data)
        if len(view) > 8:
            return real_write(fd, view[: len(view) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", half_then_full)
    monkeypatch.setattr(os, "pwritev", half_then_full, raising=False)
    with pytest.raises(StoreFullError, match=r"thread 't'.*No space left on device.*free space"):
        put(saver, "t", "second", saved)
    monkeypatch.setattr(os, "write", real_write)
    if real_pwritev is not None:
        monkeypatch.setattr(os, "pwritev", real_pwritev)
    assert store.path("t").read_bytes() == before  # nothing half-written left behind
    put(saver, "t", "third", saved)
    assert [t.checkpoint["channel_values"]["value"] for t in saver.list(None)] == ["third", "first"]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MB tmpfs, where mounting is allowed (root); otherwise the test is skipped, saying so."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True, timeout=20)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs to fill (needs root): {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True, timeout=20)


def test_a_rewrite_on_a_full_disk_says_it_needs_room_for_a_copy(small_disk: Path) -> None:
    store = FileStore(small_disk / "store", fsync=False)
    history = "".join(f'{{"line": {n}, "pad": "{"p" * 200}"}}\n' for n in range(4000))  # about 850 KB
    store.write("t", history)
    filler = small_disk / "filler"
    with open(filler, "wb") as f:  # fill the disk but for less than the history's size
        try:
            while True:
                f.write(b"\0" * 65536)
        except OSError:
            pass
    os.truncate(filler, max(0, filler.stat().st_size - 200_000))
    with pytest.raises(StoreFullError, match=r"thread 't'.*rewriting this thread needs room for a temporary copy"):
        store.write("t", history[: len(history) // 2] + "changed\n" * 10)
    assert FileStore(small_disk / "store").read("t") == history
    assert list((small_disk / "store" / ".tmp").iterdir()) == []
    store.write("t2", "small\n")  # appends and small files still fit
    assert isinstance(StoreFullError("x"), TelarError)
