"""Operations across threads through the store's index (issue 20): `list(None, ...)` and
`delete_for_runs` read the threads that may hold what they look for, not every thread, and
give what a scan of every thread gives, on every store; an index that is missing is rebuilt."""

from __future__ import annotations

import contextlib
import json
import shutil
import sqlite3
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver

from telar_checkpoint import TelarSaver
from telar_checkpoint.stores import FileStore, MemoryStore, Store
from telar_checkpoint.stores.sqlite import SQLiteStore
from telar_checkpoint.thread_index import KEYS_PAGE, filter_terms, metadata_terms
from tests.stores import describe, postgres_admin, redis_admin, redis_cluster_admin, reopen

THREADS = 12


def fill(saver: Any, threads: int = THREADS) -> None:
    """Each thread: 3 checkpoints of one run, a user out of 3, and `odd` on odd threads."""
    for n in range(threads):
        config: Any = {"configurable": {"thread_id": f"t{n:02d}", "checkpoint_ns": ""}}
        for step in range(3):
            checkpoint = empty_checkpoint()
            checkpoint["channel_values"] = {"n": n, "step": step}
            metadata: Any = {"source": "loop", "step": step, "parents": {}, "run_id": f"run-{n}", "user_id": f"u{n % 3}"}
            if n % 2:
                metadata["odd"] = True
            config = saver.put(config, checkpoint, metadata, {})


def ids(tuples: Any) -> list[tuple[str, str]]:
    return [(t.config["configurable"]["thread_id"], t.checkpoint["id"]) for t in tuples]


@pytest.mark.parametrize(
    "filter",
    [None, {"user_id": "u1"}, {"user_id": "u1", "odd": True}, {"odd": 1}, {"run_id": "run-5"}, {"step": 1},
     {"user_id": "nobody"}, {"user_id": None}, {"source": "loop", "step": 2}],
    ids=str,
)
@pytest.mark.parametrize("limit", [None, 1, 4])
def test_list_across_threads_gives_what_a_scan_gives(store: Store, filter: Any, limit: Any) -> None:
    saver, reference = TelarSaver(store), InMemorySaver()
    fill(saver)
    fill(reference)
    got = ids(saver.list(None, filter=filter, limit=limit))
    # InMemorySaver lists threads in the order they were made; ours in thread id order, which
    # the ids chosen here share. Checkpoint ids differ between the two: compare threads and counts.
    want = ids(reference.list(None, filter=filter, limit=limit))
    assert Counter(t for t, _ in got) == Counter(t for t, _ in want)
    assert got == ids(saver.list(None, filter=filter, limit=limit))  # stable
    assert [t for t, _ in got] == sorted(t for t, _ in got)


async def test_alist_across_threads_matches_list(astore: Store) -> None:
    saver = TelarSaver(astore)
    fill(saver)
    for filter, limit in [(None, None), (None, 5), ({"user_id": "u2"}, None), ({"run_id": "run-3"}, 2)]:
        got = [t async for t in saver.alist(None, filter=filter, limit=limit)]
        assert ids(got) == ids(saver.list(None, filter=filter, limit=limit))


class CountingStore(MemoryStore):
    """A memory store that counts the reads of each thread."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: Counter[str] = Counter()

    def read(self, key: str) -> str | None:
        self.reads[key] += 1
        return super().read(key)

    def keys(self) -> Any:
        self.reads["<keys>"] += 1
        return super().keys()

    def indexed(self, term: str, start: str | None = None, limit: int | None = None) -> list[str]:
        found = super().indexed(term, start, limit)
        self.reads["<indexed keys>"] += len(found)
        return found


def test_delete_for_runs_reads_only_the_threads_of_the_runs() -> None:
    store = CountingStore()
    saver = TelarSaver(store)
    fill(saver, 40)
    store.reads.clear()
    saver.delete_for_runs(["run-7", "run-31", "run-none"])
    assert store.reads.pop("<indexed keys>") == 2
    assert set(store.reads) <= {"t07", "t31"}
    assert store.read("t07") is None and store.read("t31") is None
    assert store.read("t08") is not None
    assert store.indexed("run:run-7") == [] and store.indexed("run:run-8") == ["t08"]


def test_list_with_a_limit_reads_only_the_threads_it_needs() -> None:
    store = CountingStore()
    saver = TelarSaver(store)
    fill(saver, 700)
    saver._records.clear()  # nothing parsed kept: every thread read counts
    store.reads.clear()
    assert len(list(saver.list(None, limit=4))) == 4
    assert sum(store.reads.values()) <= 2 and "<keys>" not in store.reads
    store.reads.clear()
    assert {t for t, _ in ids(saver.list(None, filter={"run_id": "run-123"}))} == {"t123"}
    assert set(store.reads) == {"t123", "<indexed keys>"}
    for filter in ({"user_id": "u1"}, {"user_id": "u1", "odd": True}, {"odd": True, "source": "loop", "user_id": "u2"}):
        store.reads.clear()
        saver._records.clear()
        listed = ids(saver.list(None, filter=filter, limit=4))  # 3 checkpoints a thread: 2 threads
        assert len(listed) == 4 and len({t for t, _ in listed}) == 2
        indexed = store.reads.pop("<indexed keys>")
        assert set(store.reads) == {t for t, _ in listed}, filter
        assert indexed <= KEYS_PAGE + 10, filter  # 117 to 234 threads match each: not all asked for


def test_delete_for_runs_keeps_the_terms_a_thread_still_holds(store: Store) -> None:
    saver = TelarSaver(store)
    config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    for run in ("a", "b"):
        checkpoint = empty_checkpoint()
        config = saver.put(config, checkpoint, {"source": "loop", "step": 0, "parents": {}, "run_id": run}, {})
    saver.delete_for_runs(["b"])
    assert store.indexed("run:a") == ["t"] and store.indexed("run:b") == []
    assert [t.metadata["run_id"] for t in saver.list(None, filter={"run_id": "a"})] == ["a"]


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_a_thread_deleted_by_another_saver_and_written_again_is_indexed(store: Store, mode: str) -> None:
    """The deleting saver's store drops the thread's terms; the writer, which recorded them
    before, must record them again when it writes the thread anew."""
    writer, other = TelarSaver(store), TelarSaver(store)
    config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    metadata: Any = {"source": "loop", "step": 0, "parents": {}, "run_id": "r"}
    config = writer.put(config, empty_checkpoint(), metadata, {})
    other.delete_thread("t")
    anew: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}  # a new run: no parent
    if mode == "sync":
        writer.put(anew, empty_checkpoint(), metadata, {})
    else:
        await writer.aput(anew, empty_checkpoint(), metadata, {})
    assert store.indexed("run:r") == ["t"]
    other.delete_for_runs(["r"])
    assert store.indexed("run:r") == [] and writer.get_tuple(anew) is None


def test_copy_thread_indexes_the_copy(store: Store) -> None:
    saver = TelarSaver(store)
    fill(saver, 2)
    saver.copy_thread("t01", "copy")
    assert {t for t, _ in ids(saver.list(None, filter={"run_id": "run-1"}))} == {"t01", "copy"}
    saver.delete_for_runs(["run-1"])
    assert store.read("copy") is None and store.read("t01") is None


def forget_index(store: Store) -> None:
    """Make `store` look as a release without an index left it: no terms, not ready."""
    kind, options = describe(store)
    if kind == "file":
        store.close()
        shutil.rmtree(Path(options["directory"]) / ".index")
    elif kind == "sqlite":
        with contextlib.closing(sqlite3.connect(options["path"])) as conn, conn:
            conn.execute("DELETE FROM telar_terms")
            conn.execute("DELETE FROM telar_meta WHERE name = 'index'")
            conn.execute("UPDATE telar_meta SET value = '2' WHERE name = 'schema_version'")
        conn.close()
    elif kind == "postgres":
        schema = options["schema"]
        postgres_admin(f'DROP TABLE "{schema}".telar_terms')
        postgres_admin(f"DELETE FROM \"{schema}\".telar_meta WHERE name = 'index'")
        postgres_admin(f"UPDATE \"{schema}\".telar_meta SET value = '2' WHERE name = 'schema_version'")
    else:  # redis, redis-cluster: the index's keys gone (a single server: as schema 2 left it)
        client = redis_cluster_admin() if kind == "redis-cluster" else redis_admin()
        prefix = options["prefix"].encode()
        try:
            for pattern in (b"i:*", b"t:*", b"keys", b"index"):
                for key in client.scan_iter(match=prefix + pattern, count=1000):
                    client.delete(key)
            if kind == "redis":
                client.set(prefix + b"schema", 2)
        finally:
            client.close()


def test_an_index_missing_is_rebuilt_before_use(shared_store: Store) -> None:
    fill(TelarSaver(shared_store))
    forget_index(shared_store)
    store = reopen(describe(shared_store))
    try:
        assert not store.index_ready()
        saver = TelarSaver(store)
        assert {t for t, _ in ids(saver.list(None, filter={"user_id": "u0"}))} == {"t00", "t03", "t06", "t09"}
        assert store.index_ready()
        assert store.indexed("run:run-4") == ["t04"]
        saver.delete_for_runs(["run-4"])
        assert store.read("t04") is None
    finally:
        store.close()


async def test_an_index_missing_is_rebuilt_before_use_by_alist(shared_store: Store) -> None:
    fill(TelarSaver(shared_store))
    forget_index(shared_store)
    store = reopen(describe(shared_store))
    try:
        saver = TelarSaver(store)
        found = {t.config["configurable"]["thread_id"] async for t in saver.alist(None, filter={"user_id": "u0"})}
        assert found == {"t00", "t03", "t06", "t09"}
        assert await store.aindex_ready() and store.indexed("run:run-4") == ["t04"]
    finally:
        await store.aclose()


def test_a_file_store_made_by_hand_is_indexed_before_use(tmp_path: Path) -> None:
    """Histories copied into a directory that never had an index: the index is not ready."""
    source = FileStore(tmp_path / "a")
    fill(TelarSaver(source), 4)
    shutil.copytree(tmp_path / "a", tmp_path / "b", ignore=shutil.ignore_patterns(".index"))
    copy = FileStore(tmp_path / "b")
    assert not copy.index_ready()
    assert {t for t, _ in ids(TelarSaver(copy).list(None, filter={"run_id": "run-2"}))} == {"t02"}
    assert copy.index_ready() and copy.sorted_keys() == ["t00", "t01", "t02", "t03"]


def test_schema_2_sqlite_store_is_migrated_and_indexed(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "db.sqlite")
    fill(TelarSaver(store), 3)
    forget_index(store)
    store.close()
    again = SQLiteStore(tmp_path / "db.sqlite")
    assert again.schema_version() == 3 and not again.index_ready()
    assert len(list(TelarSaver(again).list(None, filter={"run_id": "run-1"}))) == 3
    assert again.index_ready()


def test_a_filter_finds_the_threads_whose_metadata_equals_it(store: Store) -> None:
    """As LangGraph's filter (`metadata.get(key) == value`): -0.0 and 0.0 are equal."""
    saver = TelarSaver(store)
    for thread, score in (("a", -0.0), ("b", 0.0), ("c", 1.5)):
        config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
        saver.put(config, empty_checkpoint(), {"source": "input", "step": -1, "parents": {}, "score": score}, {})
    for value in (0.0, -0.0, 0):
        assert sorted(t.config["configurable"]["thread_id"] for t in saver.list(None, filter={"score": value})) == ["a", "b"]


@pytest.mark.parametrize(
    ("filter", "indexed"),
    [({"user_id": "u"}, True), ({"step": 1}, False), ({"x": None}, False), ({"x": [1]}, False), ({"x": 1.0}, True)],
)
def test_filter_terms_only_for_values_a_term_stands_for(filter: dict, indexed: bool) -> None:
    assert (filter_terms(filter) is not None) == indexed


def test_values_that_compare_equal_share_a_term() -> None:
    assert metadata_terms({"x": 1}) == metadata_terms({"x": 1.0}) == metadata_terms({"x": True})
    assert metadata_terms({"x": "1"}) != metadata_terms({"x": 1})
    assert metadata_terms({"x": -0.0}) == metadata_terms({"x": 0.0}) == metadata_terms({"x": 0}) == metadata_terms({"x": False})
    long = metadata_terms({"x": "v" * 1000})
    assert len(next(iter(long))) < 100


def test_reindex_finds_a_run_typed_into_a_file_by_hand(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A hand edit after the index was made is not seen until `reindex` (the CLI, or rebuild_index)."""
    from telar_checkpoint.cli import main

    store = FileStore(tmp_path / "s")
    saver = TelarSaver(store)
    fill(saver, 3)
    path = store.path("t01")
    path.write_text(path.read_text().replace('"run-1"', '"typed-by-hand"'))
    assert list(saver.list(None, filter={"run_id": "typed-by-hand"})) == []  # the index has not seen it
    assert main(["reindex", str(tmp_path / "s")]) == 0
    assert capsys.readouterr().out == "indexed 3 threads\n"
    assert {t for t, _ in ids(TelarSaver(FileStore(tmp_path / "s")).list(None, filter={"run_id": "typed-by-hand"}))} == {"t01"}
    assert main(["reindex", "--json", str(tmp_path / "s")]) == 0
    assert json.loads(capsys.readouterr().out) == {"reindexed": 3}
