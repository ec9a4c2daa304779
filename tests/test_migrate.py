"""Migration: threads written by LangGraph's own savers, by real graphs, read back through TelarSaver.

Each source (SqliteSaver on a file, PostgresSaver on the test server, InMemorySaver)
is filled by the graphs of tests/graphs.py; after `migrate`, every thread must look
the same through the compiled graph, and paused runs must resume to the same end.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver

from telar_checkpoint import CorruptLineError, MemoryStore, TelarSaver, UsageError
from telar_checkpoint.migration import MigrationReport, export_thread, import_thread, migrate, open_source, reencode
from telar_checkpoint.migration._report import ALREADY, BRANCH, SUBGRAPH, TRIMMED
from telar_checkpoint.stores import FileStore
from telar_checkpoint.stores.sqlite import SQLiteStore
from tests.graphs import fan_out, multi_step, nested_subgraphs, path_to_head, resume, summary, with_interrupt
from tests.stores import POSTGRES_URL, make_store, postgres_admin, require_server

# --- sources: real savers, filled by real graphs -------------------------------------------

BUILDERS: dict[str, Callable[[], Any]] = {
    "steps": multi_step,
    "approval-paused": with_interrupt,
    "approval-done": with_interrupt,
    "nested-1": lambda: nested_subgraphs(1),
    "nested-2": lambda: nested_subgraphs(2),
    "fan-out": lambda: fan_out({}, []),
    "forked": multi_step,
}


def config(thread: str) -> dict:
    return {"configurable": {"thread_id": thread}}


def fill(saver: BaseCheckpointSaver) -> None:
    """One thread per scenario: finished, paused (also in subgraphs), failed with pending writes, forked."""
    steps = multi_step().compile(checkpointer=saver)
    steps.invoke({"log": ["x"], "count": 0}, config("steps"))
    steps.invoke({"log": ["y"]}, config("steps"))
    approval = with_interrupt().compile(checkpointer=saver)
    approval.invoke({"request": "deploy", "log": []}, config("approval-paused"))
    approval.invoke({"request": "ship", "log": []}, config("approval-done"))
    approval.invoke(resume("yes"), config("approval-done"))
    for depth in (1, 2):
        nested_subgraphs(depth).compile(checkpointer=saver).invoke({"request": "r", "log": []}, config(f"nested-{depth}"))
    failing = fan_out({"fail": True}, []).compile(checkpointer=saver)
    with pytest.raises(RuntimeError, match="task 3 fails"):
        failing.invoke({"items": [1, 2, 3, 4], "results": []}, config("fan-out"))
    time_travel(saver, "forked")


def time_travel(saver: BaseCheckpointSaver, thread: str) -> None:
    """Run, then replay from step 1: the source keeps both branches."""
    graph = multi_step().compile(checkpointer=saver)
    graph.invoke({"log": [], "count": 0}, config(thread))
    old = next(s for s in graph.get_state_history(config(thread)) if s.metadata["step"] == 1)
    graph.invoke(None, old.config)


@contextlib.contextmanager
def sqlite_source(path: Path) -> Iterator[SqliteSaver]:
    with SqliteSaver.from_conn_string(str(path)) as saver:
        yield saver


@contextlib.contextmanager
def postgres_source() -> Iterator[BaseCheckpointSaver]:
    require_server("postgres")
    from langgraph.checkpoint.postgres import PostgresSaver

    schema = f"telar_migrate_{uuid.uuid4().hex[:12]}"
    postgres_admin(f'CREATE SCHEMA "{schema}"')
    try:
        with PostgresSaver.from_conn_string(postgres_url(schema)) as saver:
            saver.setup()
            yield saver
    finally:
        postgres_admin(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def postgres_url(schema: str) -> str:
    return f"{POSTGRES_URL}?options=-c%20search_path%3D{schema}"


@pytest.fixture(params=["sqlite", "postgres", "memory"])
def source(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BaseCheckpointSaver]:
    """A LangGraph saver of each kind, filled by `fill`."""
    opened = {
        "sqlite": lambda: sqlite_source(tmp_path / "langgraph.db"),
        "postgres": postgres_source,
        "memory": lambda: contextlib.nullcontext(InMemorySaver()),
    }[request.param]()
    with opened as saver:
        fill(saver)
        yield saver


# --- what must match -----------------------------------------------------------------------


def tuples(saver: BaseCheckpointSaver, thread: str) -> dict[tuple[str, str], Any]:
    """Every checkpoint tuple of a thread, all namespaces, by (ns, id)."""
    return {
        (t.config["configurable"]["checkpoint_ns"], t.config["configurable"]["checkpoint_id"]): t
        for t in saver.list(config(thread))
    }


def assert_same_thread(source: BaseCheckpointSaver, target: TelarSaver, thread: str) -> None:
    """Through the graph and checkpoint by checkpoint, the target shows what the source shows."""
    build = BUILDERS[thread]
    before, after = build().compile(checkpointer=source), build().compile(checkpointer=target)
    assert summary(after.get_state(config(thread), subgraphs=True)) == summary(
        before.get_state(config(thread), subgraphs=True)
    )
    source_path = path_to_head(list(before.get_state_history(config(thread))))
    assert [summary(s) for s in after.get_state_history(config(thread))] == [summary(s) for s in source_path]
    assert [s.config for s in after.get_state_history(config(thread))] == [s.config for s in source_path]
    theirs, ours = tuples(source, thread), tuples(target, thread)
    assert set(ours) <= set(theirs)
    for key, mine in ours.items():
        original = theirs[key]
        assert mine.checkpoint == original.checkpoint
        assert mine.metadata == original.metadata
        assert mine.parent_config == original.parent_config
        assert comparable(mine.pending_writes) == comparable(original.pending_writes)


def comparable(writes: list) -> list:
    """Pending writes with exceptions (which never compare equal) as (class name, args)."""
    return [(t, ch, (type(v).__name__, v.args) if isinstance(v, BaseException) else v) for t, ch, v in writes]


def raw_writes(source: BaseCheckpointSaver, thread: str) -> set[tuple[str, str, str, int, str]]:
    """(ns, checkpoint id, task id, idx, task_path) of every write the source stored for `thread`."""
    if isinstance(source, InMemorySaver):
        return {
            (ns, cid, task_id, idx, w[3])
            for (tid, ns, cid), stored in source.writes.items()
            if tid == thread
            for (task_id, idx), w in stored.items()
        }
    table = "writes" if isinstance(source, SqliteSaver) else "checkpoint_writes"
    mark = "?" if isinstance(source, SqliteSaver) else "%s"
    cursor = source.cursor(transaction=False) if isinstance(source, SqliteSaver) else source._cursor()
    with cursor as cur:
        cur.execute(f"SELECT checkpoint_ns, checkpoint_id, task_id, idx, task_path FROM {table} WHERE thread_id = {mark}", (thread,))
        rows = cur.fetchall()
    return {tuple(r.values()) if isinstance(r, dict) else tuple(r) for r in rows}


def target_writes(target: TelarSaver, thread: str) -> set[tuple[str, str, str, int, str]]:
    history = target.codec.parse(thread, target.store.read(thread))
    return {(ns, cid, task_id, idx, path) for (ns, cid), e in history.entries.items() for (task_id, idx), (_, _, path) in e.writes.items()}


# --- LangGraph savers into TelarSaver ------------------------------------------------------


def test_every_thread_looks_the_same_after_migration(source, tmp_path) -> None:
    target = TelarSaver(FileStore(tmp_path / "telar"))
    seen: list[tuple[int, int, str]] = []
    report = migrate(source, target, progress=lambda *args: seen.append(args))

    assert report.ok, report.format()
    assert sorted(target.store.keys()) == sorted(BUILDERS) == [s[2] for s in seen]
    assert [s[:2] for s in seen] == [(i, len(BUILDERS)) for i in range(1, len(BUILDERS) + 1)]
    for thread in BUILDERS:
        assert_same_thread(source, target, thread)
    total = sum(len(tuples(source, t)) for t in BUILDERS)
    left = sum(len(items) for items in report.left_out.values())
    assert (report.threads, report.checkpoints + left) == (len(BUILDERS), total)
    assert list(report.left_out) == ["forked"]


def test_pending_writes_keep_their_idx_and_task_path(source, tmp_path) -> None:
    target = TelarSaver(MemoryStore())
    report = migrate(source, target)
    assert report.ok, report.format()
    for thread in BUILDERS:
        kept = {(ns, cid) for ns, cid, *_ in target_writes(target, thread)}
        assert target_writes(target, thread) == {w for w in raw_writes(source, thread) if w[:2] in kept}
    paths = {w[4] for t in BUILDERS for w in target_writes(target, t)}
    assert any(paths), "some writes carry a task_path (subgraphs, Send)"
    assert report.writes == sum(len(target_writes(target, t)) for t in BUILDERS)


def test_time_travel_fork_reports_the_left_out_branch(source) -> None:
    target = TelarSaver(MemoryStore())
    report = migrate(source, target, thread_ids=["forked"])
    history = list(multi_step().compile(checkpointer=source).get_state_history(config("forked")))
    abandoned = {s.config["configurable"]["checkpoint_id"] for s in history} - {
        s.config["configurable"]["checkpoint_id"] for s in path_to_head(history)
    }
    assert abandoned
    assert {item.checkpoint_id for item in report.left_out["forked"]} == abandoned
    assert report.left_out_counts("forked") == {BRANCH: len(abandoned)}
    assert f"'forked': {len(abandoned)} {BRANCH}" in report.format()
    assert_same_thread(source, target, "forked")


@pytest.mark.parametrize("depth", [1, 2])
def test_paused_run_resumes_under_telar_as_under_sqlite(tmp_path, depth) -> None:
    """Paused in an interrupt (in a subgraph at depth 1 and 2, and at the top level): same end either way."""
    cases = [("approval-paused", with_interrupt), (f"nested-{depth}", lambda: nested_subgraphs(depth))]
    with sqlite_source(tmp_path / "langgraph.db") as sqlite:
        fill(sqlite)
        target = TelarSaver(SQLiteStore(tmp_path / "telar.db"))
        assert migrate(sqlite, target).ok
        for thread, build in cases:
            ends = []
            for saver in (target, sqlite):
                graph = build().compile(checkpointer=saver)
                done = graph.invoke(resume("ok"), config(thread))
                ends.append((done, summary(graph.get_state(config(thread))), [summary(s) for s in graph.get_state_history(config(thread))]))
            assert ends[0] == ends[1]
            assert ends[0][0]["log"][-1] in ("finished: ok", "parent end")
        target.store.close()


def test_a_subgraph_of_a_left_out_checkpoint_is_reported(tmp_path) -> None:
    source = InMemorySaver()
    graph = nested_subgraphs(1).compile(checkpointer=source)
    graph.invoke({"request": "r", "log": []}, config("nested-1"))
    graph.invoke(resume("ok"), config("nested-1"))
    first = next(s for s in graph.get_state_history(config("nested-1")) if s.metadata["step"] == 0)
    graph.invoke(None, first.config)  # replays before the subgraph ran: its first run is on the old branch
    target = TelarSaver(MemoryStore())
    report = migrate(source, target)
    assert report.left_out_counts("nested-1") == {BRANCH: 3, SUBGRAPH: 4}, report.format()
    subgraph_runs = {ns for ns, _ in tuples(source, "nested-1") if ns}
    left = {item.checkpoint_ns for item in report.left_out["nested-1"] if item.reason == SUBGRAPH}
    assert len(subgraph_runs) == 2 and len(left) == 1 and left < subgraph_runs
    assert_same_thread(source, target, "nested-1")


def test_max_history_trimming_is_reported(tmp_path) -> None:
    source = InMemorySaver()
    fill(source)
    target = TelarSaver(MemoryStore(), max_history=2)
    report = migrate(source, target, thread_ids=["steps"])
    assert report.checkpoints == 2
    assert report.left_out_counts("steps") == {TRIMMED: len(tuples(source, "steps")) - 2}
    assert summary(multi_step().compile(checkpointer=target).get_state(config("steps"))) == summary(
        multi_step().compile(checkpointer=source).get_state(config("steps"))
    )


# --- idempotent and resumable ----------------------------------------------------------------


class Stop(Exception):
    pass


def stop_after_first(done: int, total: int, thread: str) -> None:
    if done == 1:
        raise Stop(thread)


def texts(saver: TelarSaver) -> dict[str, str]:
    return {k: saver.store.read(k) for k in sorted(saver.store.keys())}


def test_an_interrupted_migration_rerun_finishes_without_duplicates(tmp_path) -> None:
    with sqlite_source(tmp_path / "langgraph.db") as source:
        fill(source)
        clean = TelarSaver(MemoryStore())
        migrate(source, clean)
        target = TelarSaver(FileStore(tmp_path / "telar"))
        with pytest.raises(Stop):
            migrate(source, target, progress=stop_after_first)
        first = sorted(BUILDERS)[0]
        assert list(target.store.keys()) == [first]

        report = migrate(source, target)
        assert report.ok and report.skipped == {first: ALREADY}
        assert report.threads == len(BUILDERS) - 1
        assert texts(target) == texts(clean)
        for text in texts(target).values():
            checkpoint_lines = [line for line in text.splitlines() if '"kind":"checkpoint"' in line]
            assert len(checkpoint_lines) == len(set(checkpoint_lines))
        again = migrate(source, target)
        assert (again.threads, set(again.skipped.values())) == (0, {ALREADY})
        assert "Skipped 7 threads (already migrated)" in again.format()


def test_already_migrated_does_not_depend_on_the_order_of_remembered_ids() -> None:
    """The codec's "replaced" list order can differ between processes; a rerun still skips the thread."""
    source = InMemorySaver()
    time_travel(source, "forked")
    time_travel(source, "forked")  # two abandoned branches: several remembered ids
    target = TelarSaver(MemoryStore())
    migrate(source, target)
    lines = target.store.read("forked").splitlines(keepends=True)
    dropped = next(i for i, line in enumerate(lines) if '"kind":"dropped"' in line)
    doc = json.loads(lines[dropped])
    assert len(doc["replaced"]) > 1
    doc["replaced"].reverse()
    lines[dropped] = json.dumps(doc, separators=(",", ":")) + "\n"
    target.store.write("forked", "".join(lines))
    assert migrate(source, target).skipped == {"forked": ALREADY}


def test_a_partly_written_thread_is_rewritten_whole(tmp_path) -> None:
    source = InMemorySaver()
    fill(source)
    clean = TelarSaver(MemoryStore())
    migrate(source, clean)
    target = TelarSaver(MemoryStore())
    lines = clean.store.read("nested-2").splitlines(keepends=True)
    target.store.write("nested-2", "".join(lines[: len(lines) // 2]))
    report = migrate(source, target, thread_ids=["nested-2"])
    assert report.ok and report.threads == 1
    assert texts(target) == {"nested-2": clean.store.read("nested-2")}


def test_a_thread_used_in_the_target_since_is_not_overwritten(tmp_path) -> None:
    source = InMemorySaver()
    fill(source)
    target = TelarSaver(MemoryStore())
    migrate(source, target, thread_ids=["approval-paused"])
    with_interrupt().compile(checkpointer=target).invoke(resume("no"), config("approval-paused"))
    used = target.store.read("approval-paused")
    report = migrate(source, target, thread_ids=["approval-paused"])
    assert not report.ok
    assert "not in the source (was it used since?)" in report.failed["approval-paused"]
    assert target.store.read("approval-paused") == used
    assert "FAILED 1 thread" in report.format()


def test_dry_run_writes_nothing_and_counts_the_same(tmp_path) -> None:
    source = InMemorySaver()
    fill(source)
    target = TelarSaver(MemoryStore())
    planned = migrate(source, target, dry_run=True)
    assert list(target.store.keys()) == []
    done = migrate(source, target)
    assert (planned.threads, planned.checkpoints, planned.writes, planned.left_out) == (
        done.threads, done.checkpoints, done.writes, done.left_out
    )
    assert planned.format().startswith("Would migrate 7 threads")


def test_a_thread_that_fails_is_reported_and_the_others_go_on() -> None:
    class Broken(InMemorySaver):
        def list(self, config, **kwargs):
            if config and config["configurable"]["thread_id"] == "steps":
                raise RuntimeError("disk on fire")
            return super().list(config, **kwargs)

    source = Broken()
    fill(source)
    target = TelarSaver(MemoryStore())
    report = migrate(source, target)
    assert report.failed == {"steps": "RuntimeError: disk on fire"}
    assert not report.ok and report.threads == len(BUILDERS) - 1
    assert "steps" not in list(target.store.keys())
    assert "'steps': RuntimeError: disk on fire" in report.format()


def test_thread_ids_must_be_a_list() -> None:
    with pytest.raises(UsageError, match="not one string"):
        migrate(InMemorySaver(), TelarSaver(MemoryStore()), thread_ids="steps")


# --- telar to telar, re-encoding -------------------------------------------------------------


def live_telar(store) -> TelarSaver:
    """A TelarSaver filled live by the graphs (put and put_writes as they come)."""
    saver = TelarSaver(store)
    fill(saver)
    return saver


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_telar_to_telar_copies_the_text(tmp_path, request, kind) -> None:
    source = live_telar(FileStore(tmp_path / "files"))
    target = TelarSaver(make_store(kind, tmp_path, request))
    report = migrate(source, target)
    assert report.ok and report.threads == len(BUILDERS) and not report.left_out
    assert texts(target) == texts(source)
    for thread in BUILDERS:
        assert_same_thread(source, target, thread)
    back = TelarSaver(FileStore(tmp_path / "back"))
    assert migrate(target, back).ok and texts(back) == texts(source)


def test_telar_to_telar_through_urls(tmp_path) -> None:
    source = live_telar(FileStore(tmp_path / "files"))
    with open_source(f"file://{tmp_path / 'files'}") as opened, TelarSaver.from_conn_string(
        f"sqlite:///{tmp_path / 'telar.db'}"
    ) as target:
        assert isinstance(opened, TelarSaver)
        assert migrate(opened, target).ok
        assert texts(target) == texts(source)


def test_reencode_keeps_every_thread_and_settles(tmp_path) -> None:
    saver = live_telar(MemoryStore())
    before = {t: [summary(s) for s in BUILDERS[t]().compile(checkpointer=saver).get_state_history(config(t))] for t in BUILDERS}
    report = reencode(saver)
    assert report.ok and not report.left_out, report.format()
    after = {t: [summary(s) for s in BUILDERS[t]().compile(checkpointer=saver).get_state_history(config(t))] for t in BUILDERS}
    assert after == before
    again = reencode(saver)
    assert again.threads == 0 and set(again.skipped.values()) == {ALREADY}


def test_reencode_keeps_what_the_thread_remembers_of_replaced_checkpoints() -> None:
    saver = TelarSaver(MemoryStore())
    time_travel(saver, "forked")
    dropped = [line for line in saver.store.read("forked").splitlines() if '"kind":"dropped"' in line]
    assert dropped
    reencode(saver)
    assert [line for line in saver.store.read("forked").splitlines() if '"kind":"dropped"' in line] == dropped


# --- export and import -----------------------------------------------------------------------


def test_export_import_round_trip(tmp_path) -> None:
    source = live_telar(MemoryStore())
    text = export_thread(source, "nested-2")
    assert text == source.store.read("nested-2") and text.endswith("\n")
    (tmp_path / "nested-2.jsonl").write_text(text, encoding="utf-8")

    target = TelarSaver(FileStore(tmp_path / "telar"))
    report = import_thread(target, "nested-2", (tmp_path / "nested-2.jsonl").read_text(encoding="utf-8"))
    assert report.threads == 1 and report.checkpoints == len(tuples(source, "nested-2"))
    assert export_thread(target, "nested-2") == text
    assert_same_thread(source, target, "nested-2")
    assert import_thread(target, "nested-2", text.rstrip("\n")).skipped == {"nested-2": ALREADY}


def test_import_refuses_to_overwrite_a_different_thread_unless_replace() -> None:
    source = live_telar(MemoryStore())
    target = TelarSaver(MemoryStore())
    import_thread(target, "t", export_thread(source, "steps"))
    other = export_thread(source, "forked")
    with pytest.raises(UsageError, match="already holds a different history.*replace=True"):
        import_thread(target, "t", other)
    assert target.store.read("t") == source.store.read("steps")
    import_thread(target, "t", other, replace=True)
    assert target.store.read("t") == other


def test_import_refuses_bad_text() -> None:
    source = live_telar(MemoryStore())
    lines = export_thread(source, "steps").splitlines(keepends=True)
    target = TelarSaver(MemoryStore())
    with pytest.raises(CorruptLineError, match="line 2"):
        import_thread(target, "t", lines[0] + "{not json\n" + "".join(lines[2:]))
    with pytest.raises(UsageError, match="holds no lines"):
        import_thread(target, "t", "\n")
    assert list(target.store.keys()) == []


def test_export_of_a_missing_thread() -> None:
    with pytest.raises(UsageError, match="thread 'nope' is not in the memory store"):
        export_thread(TelarSaver(MemoryStore()), "nope")


# --- open_source -------------------------------------------------------------------------------


def test_open_source_sqlite_url(tmp_path, monkeypatch) -> None:
    with sqlite_source(tmp_path / "langgraph.db") as saver:
        fill(saver)
    monkeypatch.chdir(tmp_path)
    for url in ("langgraph+sqlite:///langgraph.db", f"langgraph+sqlite:///{tmp_path / 'langgraph.db'}"):
        with open_source(url) as opened:
            assert isinstance(opened, SqliteSaver)
            report = migrate(opened, TelarSaver(MemoryStore()))
            assert report.ok and report.threads == len(BUILDERS)
            assert report.source == "SqliteSaver" and report.target == "TelarSaver (memory store)"


@pytest.mark.servers("postgres")
def test_open_source_postgres_url() -> None:
    with postgres_source() as saver:
        fill(saver)
        schema = saver.conn.execute("SELECT current_schema() AS s").fetchone()["s"]
        with open_source(f"langgraph+{postgres_url(schema)}") as opened:
            report = migrate(opened, TelarSaver(MemoryStore()))
            assert report.ok and report.threads == len(BUILDERS), report.format()


def test_open_source_errors(tmp_path) -> None:
    with pytest.raises(UsageError, match="unknown scheme 'mysql'.*langgraph\\+sqlite"):
        with open_source("mysql://db/x"):
            pass
    with pytest.raises(UsageError, match="no SqliteSaver database at"):
        with open_source(f"langgraph+sqlite:///{tmp_path / 'missing.db'}"):
            pass


def test_report_format_reads_as_one_paragraph() -> None:
    report = MigrationReport("SqliteSaver", "TelarSaver (file store)", threads=1, checkpoints=1, writes=0)
    assert report.format() == (
        "Migrated 1 thread (1 checkpoint, 0 pending writes) from SqliteSaver to TelarSaver (file store). "
        "Nothing failed."
    )


def test_migrate_is_the_function_at_the_package_top(tmp_path) -> None:
    import telar_checkpoint

    source = InMemorySaver()
    multi_step().compile(checkpointer=source).invoke({"log": [], "count": 0}, config("steps"))
    report = telar_checkpoint.migrate(source, TelarSaver(MemoryStore()))
    assert callable(telar_checkpoint.migrate) and report.threads == 1 and report.ok
