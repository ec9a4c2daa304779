"""`telar-checkpoint schema status|upgrade` and `migrate --schema`: threads of graph version 1 brought
to version 2 from the command line on every store kind, then run on graph version 2 as a thread
started there does; dry runs write nothing, backups hold the old texts, a failing step leaves its
thread byte-identical, an upgrade killed part way is finished by a second run."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from langgraph.types import Command

from telar_checkpoint import TelarSaver
from telar_checkpoint.cli import main
from telar_checkpoint.history import History
from telar_checkpoint.schema import Schema, upgrade_text
from telar_checkpoint.schema_upgrade import upgrade
from telar_checkpoint.stores import FileStore, MemoryStore, Store, open_store
from telar_checkpoint.stores.sqlite import SQLiteStore
from tests.schema_graphs import SCHEMA, graph_v1, graph_v2
from tests.servers import REDIS_CLUSTER_URL
from tests.stores import POSTGRES_URL, REDIS_URL, postgres_admin, redis_delete_prefix, require_server

ROOT = Path(__file__).resolve().parent.parent
SPEC = "tests.schema_graphs:SCHEMA"


def _config(thread_id: str) -> Any:
    return {"configurable": {"thread_id": thread_id}}


def _paused_v1(saver: Any, thread_id: str, request: str = " hi ") -> None:
    """A thread of graph version 1, paused in the interrupt of node `ask`."""
    assert "__interrupt__" in graph_v1(saver).invoke({"request": request}, _config(thread_id))


def _reference(request: str = " hi ") -> dict[str, Any]:
    """The final state of a thread started on graph version 2."""
    graph = graph_v2(TelarSaver(MemoryStore(), schema=SCHEMA))
    graph.invoke({"request": request}, _config("ref"))
    return graph.invoke(Command(resume="yes"), _config("ref"))


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def version_of(store: Store, thread_id: str) -> int:
    text = store.read(thread_id)
    assert text is not None
    return History.parse(thread_id, text).schema_version


def tree(directory: Path) -> dict[str, str]:
    """Every file under `directory` and the hash of its bytes."""
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def schema_module(directory: Path, body: str) -> str:
    """A module of its own in `directory` (the current directory of the command): its module:NAME."""
    name = f"schema_{uuid.uuid4().hex[:10]}"
    (directory / f"{name}.py").write_text(
        "from telar_checkpoint.schema import Schema, map_channel\n"
        "from tests.schema_graphs import SCHEMA as V2\n" + body
    )
    return f"{name}:SCHEMA"


@pytest.fixture
def file_store(tmp_path: Path) -> tuple[str, FileStore]:
    directory = tmp_path / "threads"
    return str(directory), FileStore(directory)


# --- status ----------------------------------------------------------------------------------------


def test_status_counts_threads_by_version(capsys, file_store) -> None:
    url, store = file_store
    _paused_v1(TelarSaver(store), "a")
    _paused_v1(TelarSaver(store), "b")
    graph_v2(TelarSaver(store, schema=SCHEMA)).invoke({"request": "x"}, _config("c"))  # version 2
    graph_v2(TelarSaver(store, schema=Schema(version=3))).invoke({"request": "x"}, _config("future"))  # version 3
    before = tree(Path(url))
    code, out, err = run(capsys, "schema", "status", url, "--schema", SPEC, "--json")
    assert code == 0 and err == ""
    assert json.loads(out) == {"schema": 2, "versions": {"1": 2, "2": 1, "3": 1}, "to_upgrade": 2,
                               "newer": ["future"], "corrupt": []}
    code, out, _ = run(capsys, "schema", "status", url, "--schema", SPEC)
    assert code == 0
    assert out.splitlines() == [
        "VERSION  THREADS  NOTE",
        "      1        2  older: `schema upgrade` rewrites them",
        "      2        1  current",
        "      3        1  NEWER than the schema: refused",
        "4 threads: 1 at the schema's version 2, 2 older to upgrade, 1 newer ('future')",
    ]
    assert tree(Path(url)) == before  # status only reads
    upgrade(store, SCHEMA)
    code, out, _ = run(capsys, "schema", "status", url, "--schema", SPEC, "--json")
    assert json.loads(out)["versions"] == {"2": 3, "3": 1}



def test_show_gives_the_threads_schema_version(capsys, file_store) -> None:
    """`show` says which state schema version a thread is stored at: 1 for one that records none."""
    url, store = file_store
    _paused_v1(TelarSaver(store), "old")
    _paused_v1(TelarSaver(store), "new")
    upgrade(store, SCHEMA, thread_ids=["new"])
    for thread, version in (("old", 1), ("new", 2)):
        code, out, _ = run(capsys, "show", url, thread)
        assert code == 0 and f"schema      version {version} (the thread's state schema)" in out.splitlines()
        code, out, _ = run(capsys, "show", url, thread, "--json")
        assert code == 0 and json.loads(out)["schema"] == version

def test_a_schema_that_cannot_be_imported_is_named(capsys, file_store, tmp_path, monkeypatch) -> None:
    url, store = file_store
    _paused_v1(TelarSaver(store), "a")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "broken_schema_mod.py").write_text("raise RuntimeError('half written')\n")
    cases = {
        "nosuchmodule_x:SCHEMA": "cannot import module 'nosuchmodule_x' from the current directory or sys.path",
        "tests.schema_graphs:NOPE": "module 'tests.schema_graphs' has no 'NOPE'",
        "tests.schema_graphs:graph_v1": "graph_v1 is a function, not a telar_checkpoint.schema.Schema",
        "tests.schema_graphs": "name the schema as module:NAME",
        "broken_schema_mod:SCHEMA": "importing module 'broken_schema_mod' failed: RuntimeError: half written",
    }
    for spec, message in cases.items():
        for action in ("status", "upgrade"):
            code, out, err = run(capsys, "schema", action, url, "--schema", spec)
            assert code == 2 and out == "" and message in err, (spec, err)
    code, _, err = run(capsys, "migrate", "--from", url, "--to", str(tmp_path / "to"), "--schema", "tests.schema_graphs:NOPE")
    assert code == 2 and "has no 'NOPE'" in err and not (tmp_path / "to").exists()
    assert version_of(store, "a") == 1


# --- upgrade on every store kind, then the run continues on graph version 2 -------------------------


@pytest.fixture(params=["file", "sqlite", "postgres", "redis", "redis-cluster"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, Store]:
    """A store URL of each kind, in a space of its own (a URL takes no prefix or schema option:
    a database, a Redis database number), and the store it opens."""
    kind = request.param
    if kind == "file":
        url = str(tmp_path / "threads")
    elif kind == "sqlite":
        url = f"sqlite:///{tmp_path / 'threads.db'}"
    elif kind == "postgres":
        require_server(kind)
        name = f"telar_schema_cli_{uuid.uuid4().hex[:10]}"
        postgres_admin(f'CREATE DATABASE "{name}"')
        request.addfinalizer(lambda: postgres_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        url = POSTGRES_URL.rsplit("/", 1)[0] + f"/{name}"
    elif kind == "redis":
        require_server(kind)
        import redis

        url = REDIS_URL.rsplit("/", 1)[0] + "/9"  # the default prefix, in a database of its own

        def clean() -> None:
            client = redis.Redis.from_url(url)
            for key in client.scan_iter(match=b"telar:*", count=1000):
                client.delete(key)
            client.close()

        clean()
        request.addfinalizer(clean)
    else:
        require_server(kind)
        url = REDIS_CLUSTER_URL  # one database: the default prefix, cleaned before and after
        redis_delete_prefix("telar:", cluster=True)
        request.addfinalizer(lambda: redis_delete_prefix("telar:", cluster=True))
    store = open_store(url).store
    request.addfinalizer(store.close)
    return url, store


def test_upgrade_then_the_thread_continues_on_v2(capsys, store_url) -> None:
    url, store = store_url
    _paused_v1(TelarSaver(store), "t")
    _paused_v1(TelarSaver(store), "u", " other ")
    code, out, err = run(capsys, "schema", "upgrade", url, "--schema", SPEC)
    assert (code, err) == (0, "")
    assert out == ("upgraded 2 threads to state schema version 2 (from version 1: 2); "
                   "0 threads already at version 2; 0 failed, left as stored\n")
    assert version_of(store, "t") == version_of(store, "u") == 2
    assert run(capsys, "verify", url)[0] == 0
    # A saver without the schema: the thread is stored upgraded, not read through the schema.
    graph = graph_v2(TelarSaver(store))
    assert graph.get_state(_config("t")).next == ("ask_user",)
    assert graph.invoke(Command(resume="yes"), _config("t")) == _reference()
    assert graph.invoke(Command(resume="yes"), _config("u")) == _reference(" other ")
    code, out, _ = run(capsys, "schema", "upgrade", url, "--schema", SPEC)  # again: nothing to do
    assert code == 0 and out.startswith("upgraded 0 threads to state schema version 2; 2 threads already at version 2; 0 failed")


def test_without_the_upgrade_v2_does_not_resume(file_store) -> None:
    """The control of the test above: the paused run is lost on graph v2 without the upgrade."""
    _, store = file_store
    _paused_v1(TelarSaver(store), "t")
    assert graph_v2(TelarSaver(store)).get_state(_config("t")).next != ("ask_user",)


# --- dry run, backup -----------------------------------------------------------------------------------


def test_dry_run_writes_nothing_and_shows_one_thread_before_and_after(capsys, file_store) -> None:
    url, store = file_store
    _paused_v1(TelarSaver(store), "t")
    _paused_v1(TelarSaver(store), "u")
    graph_v2(TelarSaver(store, schema=SCHEMA)).invoke({"request": "x"}, _config("v2"))
    before = tree(Path(url))
    code, out, err = run(capsys, "schema", "upgrade", url, "--schema", SPEC, "--dry-run")
    assert (code, err) == (0, "")
    latest = History.parse("t", store.read("t")).latest("")
    assert latest is not None
    lines = out.splitlines()
    assert lines[0] == f"thread 't', latest checkpoint {latest.line.id}, before and after the upgrade to version 2:"
    assert lines[1:11] == [
        "CHANNEL             BEFORE             AFTER",
        'request             " hi "             " hi "',
        'notes               "   hi   "         -',
        'scratch             "tmp"              -',
        'log                 ["prepared  hi "]  ["prepared  hi "]',
        "branch:to:ask       null               -",
        'memo                -                  "hi"',
        "branch:to:ask_user  -                  null",
        "(next)              ask                ask_user",
        "",
    ]
    assert lines[-1] == "would upgrade 2 threads to state schema version 2 (from version 1: 2); 1 thread already at version 2; 0 would fail"
    assert tree(Path(url)) == before  # not one byte written
    code, out, _ = run(capsys, "schema", "upgrade", url, "--schema", SPEC, "--dry-run", "--json")
    shown = json.loads(out)
    assert code == 0 and shown["dry_run"] and shown["upgraded"] == {"t": 1, "u": 1} and shown["current"] == 1
    example = shown["example"]
    assert example["thread"] == "t" and example["before"]["next"] == ["ask"] and example["after"]["next"] == ["ask_user"]
    assert example["before"]["values"]["notes"] == "   hi   " and example["after"]["values"]["memo"] == "hi"
    assert "notes" not in example["after"]["values"] and "scratch" not in example["after"]["values"]
    assert tree(Path(url)) == before


def test_backup_holds_each_old_text_with_the_thread_files_mode(capsys, tmp_path) -> None:
    directory = tmp_path / "threads"
    store = FileStore(directory, mode=0o640)
    _paused_v1(TelarSaver(store), "t")
    _paused_v1(TelarSaver(store), "u", " you ")
    graph_v2(TelarSaver(store, schema=SCHEMA)).invoke({"request": "x"}, _config("v2"))
    old = {t: (directory / f"{t}.jsonl").read_bytes() for t in ("t", "u", "v2")}
    assert stat.S_IMODE((directory / "t.jsonl").stat().st_mode) == 0o640
    backups = tmp_path / "backups" / "nested"
    code, out, _ = run(capsys, "schema", "upgrade", str(directory), "--schema", SPEC, "--backup", str(backups))
    assert code == 0 and out.rstrip().endswith(f"the texts before are in {backups}")
    assert sorted(p.name for p in backups.iterdir()) == ["t.v1.jsonl", "u.v1.jsonl"]  # v2 was not changed
    for thread in ("t", "u"):
        saved = backups / f"{thread}.v1.jsonl"
        assert saved.read_bytes() == old[thread] != (directory / f"{thread}.jsonl").read_bytes()
        assert stat.S_IMODE(saved.stat().st_mode) == 0o640  # the thread file's, when it was saved
    # A backup restores the thread as it was: graph v1 resumes it.
    store.write("t", (backups / "t.v1.jsonl").read_text())
    final = graph_v1(TelarSaver(store)).invoke(Command(resume="yes"), _config("t"))
    assert final["log"][-1] == "done hi"
    # In a dry run nothing is written, backups neither.
    code, _, _ = run(capsys, "schema", "upgrade", str(directory), "--schema", SPEC, "--dry-run", "--backup", str(tmp_path / "dry"))
    assert code == 0 and not (tmp_path / "dry").exists()


# --- a failing step --------------------------------------------------------------------------------------


FAILING = """
def _check(memo):
    if "bad" in memo:
        raise ValueError(f"cannot read memo {memo!r}")
    return memo

SCHEMA = Schema(version=2, steps={2: [*V2.steps[2][:2], map_channel("memo", _check), *V2.steps[2][2:]]})
"""


def test_a_failing_step_fails_its_thread_alone(capsys, file_store, tmp_path, monkeypatch) -> None:
    url, store = file_store
    for thread in ("a", "bad", "c"):
        _paused_v1(TelarSaver(store), thread, f" {thread} ")
    before = Path(url, "bad.jsonl").read_bytes()
    monkeypatch.chdir(tmp_path)  # the schema's module is in the current directory
    spec = schema_module(tmp_path, FAILING)
    code, out, err = run(capsys, "schema", "upgrade", url, "--schema", spec)
    assert code == 1
    assert out == ("upgraded 2 threads to state schema version 2 (from version 1: 2); "
                   "0 threads already at version 2; 1 failed, left as stored\n")
    (line,) = err.splitlines()
    assert line.startswith("FAILED 'bad': SchemaStepError: thread 'bad': schema step 2 #3 map_channel('memo', '_check') "
                           "failed on checkpoint ")
    assert line.endswith("ValueError: cannot read memo 'bad'")
    checkpoint = line.split("failed on checkpoint ")[1].split(":")[0]
    assert f'"id":"{checkpoint}"' in before.decode()
    assert Path(url, "bad.jsonl").read_bytes() == before
    assert (version_of(store, "a"), version_of(store, "bad"), version_of(store, "c")) == (2, 1, 2)
    code, out, _ = run(capsys, "schema", "upgrade", url, "--schema", spec, "--json")
    report = json.loads(out)
    assert code == 1 and report["upgraded"] == {} and report["current"] == 2 and list(report["failed"]) == ["bad"]
    assert graph_v2(TelarSaver(store)).invoke(Command(resume="yes"), _config("c")) == _reference(" c ")


# --- an upgrade killed part way, then run again ----------------------------------------------------------


SLOW = """
import time

def _slow(request):
    time.sleep(0.004)
    return request

SCHEMA = Schema(version=2, steps={2: [*V2.steps[2], map_channel("request", _slow)]})
"""


@pytest.mark.parametrize("kind", ["file", "sqlite"])
def test_an_interrupted_upgrade_is_finished_by_a_second_run(capsys, tmp_path, monkeypatch, kind) -> None:
    store: Store
    if kind == "file":
        url, store = str(tmp_path / "threads"), FileStore(tmp_path / "threads")
    else:
        url, store = f"sqlite:///{tmp_path / 'threads.db'}", SQLiteStore(tmp_path / "threads.db")
    _paused_v1(TelarSaver(store), "seed")
    seed = store.read("seed")
    assert seed is not None
    threads = [f"t{i:04d}" for i in range(300)]
    for thread in threads:
        store.write(thread, seed)  # the text names no thread: each copy is a thread paused in `ask`
    spec = schema_module(tmp_path, SLOW)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen([sys.executable, "-m", "telar_checkpoint", "schema", "upgrade", url, "--schema", spec],
                             cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    try:
        while version_of(store, threads[30]) == 1:  # threads are upgraded in order
            assert child.poll() is None, child.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.01)
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.communicate()  # waits, and closes its pipes
    assert child.returncode == -signal.SIGKILL
    done = [t for t in threads if version_of(store, t) == 2]
    assert 30 < len(done) < len(threads)  # killed part way
    monkeypatch.chdir(tmp_path)
    code, out, _ = run(capsys, "schema", "upgrade", url, "--schema", spec)
    assert code == 0
    assert out.startswith(f"upgraded {len(threads) - len(done)} threads to state schema version 2 ")
    assert f"; {len(done) + 1} threads already at version 2; 0 failed" in out  # and "seed", upgraded first
    assert sorted(store.keys()) == sorted([*threads, "seed"])  # none lost
    from telar_checkpoint.schema import load_schema

    expected = upgrade_text("x", seed, load_schema(spec), TelarSaver(MemoryStore()).codec.values)
    assert all(store.read(t) == expected for t in threads)  # none corrupt: each exactly the upgraded text
    code, out, _ = run(capsys, "verify", url)
    assert code == 0, out
    graph = graph_v2(TelarSaver(store))
    assert graph.invoke(Command(resume="yes"), _config(done[0])) == _reference()
    assert graph.invoke(Command(resume="yes"), _config(threads[-1])) == _reference()


# --- migrate --schema ------------------------------------------------------------------------------------


def test_migrate_with_schema_from_a_langgraph_sqlite_saver(capsys, tmp_path, monkeypatch) -> None:
    from langgraph.checkpoint.sqlite import SqliteSaver

    db = tmp_path / "lg.sqlite"
    with SqliteSaver.from_conn_string(str(db)) as saver:
        for thread in ("t", "bad", "u"):
            _paused_v1(saver, thread, f" {thread} " if thread != "t" else " hi ")
    source, target = f"langgraph+sqlite:///{db}", tmp_path / "moved"
    monkeypatch.chdir(tmp_path)
    failing = schema_module(tmp_path, FAILING)
    code, out, _ = run(capsys, "migrate", "--from", source, "--to", str(target), "--schema", failing)
    assert code == 1
    assert out.startswith("Migrated 2 threads (6 checkpoints, ") and ", at state schema version 2." in out
    assert "FAILED 1 thread, nothing written for them ('bad': SchemaStepError: thread 'bad': schema step 2 #3" in out
    store = FileStore(target)
    assert sorted(store.keys()) == ["t", "u"] and version_of(store, "t") == version_of(store, "u") == 2
    code, out, _ = run(capsys, "migrate", "--from", source, "--to", str(target), "--schema", SPEC)
    assert code == 0 and "Migrated 1 thread " in out and "Skipped 2 threads (already migrated)" in out
    assert version_of(store, "bad") == 2
    assert run(capsys, "verify", str(target))[0] == 0
    graph = graph_v2(TelarSaver(store))  # no schema: stored at version 2
    assert graph.get_state(_config("t")).next == ("ask_user",)
    assert graph.invoke(Command(resume="yes"), _config("t")) == _reference()
    assert graph.invoke(Command(resume="yes"), _config("bad")) == _reference(" bad ")


def test_migrate_without_schema_keeps_version_1(capsys, tmp_path) -> None:
    """The control: without --schema the migrated thread stays at version 1 and v2 cannot resume it."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    db = tmp_path / "lg.sqlite"
    with SqliteSaver.from_conn_string(str(db)) as saver:
        _paused_v1(saver, "t")
    code, out, _ = run(capsys, "migrate", "--from", f"langgraph+sqlite:///{db}", "--to", str(tmp_path / "moved"))
    assert code == 0 and "schema version" not in out
    store = FileStore(tmp_path / "moved")
    assert version_of(store, "t") == 1
    assert graph_v2(TelarSaver(store)).get_state(_config("t")).next != ("ask_user",)


# --- the library: progress -----------------------------------------------------------------------------------


def test_progress_bar_only_when_asked_or_on_a_terminal(capsys, file_store) -> None:
    """`schema upgrade` and `schema status` take `--progress`: off a terminal, the bar is drawn
    once, when it closes, with every thread counted; without it, stderr stays empty."""
    url, store = file_store
    for thread in ("a", "b", "c"):
        _paused_v1(TelarSaver(store), thread)
    code, _, err = run(capsys, "schema", "status", url, "--schema", SPEC)
    assert (code, err) == (0, "")
    code, _, err = run(capsys, "schema", "status", url, "--schema", SPEC, "--progress")
    assert code == 0 and err.startswith("reading threads ━") and err.endswith("━ 3/3\n") and "\x1b" not in err
    code, _, err = run(capsys, "schema", "upgrade", url, "--schema", SPEC, "--dry-run", "--progress")
    assert code == 0 and err.startswith("checking threads ━") and err.endswith("━ 3/3\n")
    code, out, err = run(capsys, "schema", "upgrade", url, "--schema", SPEC, "--progress")
    assert code == 0 and err.startswith("upgrading threads ━") and err.endswith("━ 3/3\n")
    assert out.startswith("upgraded 3 threads") and version_of(store, "c") == 2


def test_upgrade_reports_progress_per_thread() -> None:
    store = MemoryStore()
    for thread in ("a", "b", "c"):
        _paused_v1(TelarSaver(store), thread)
    seen: list[tuple[int, int, str]] = []
    report = upgrade(store, SCHEMA, progress=lambda done, total, thread: seen.append((done, total, thread)))
    assert seen == [(1, 3, "a"), (2, 3, "b"), (3, 3, "c")] and len(report.upgraded) == 3


def test_the_benchmark_runs_at_tiny_sizes(tmp_path) -> None:
    """benchmarks/schema_upgrade.py end to end on a few threads (no timing is checked)."""
    from benchmarks.schema_upgrade import run_sizes

    rows = run_sizes(["file", "sqlite"], [3, 6], tmp_path, backup=True, echo=False)
    assert [(r["store"], r["threads"]) for r in rows] == [("file", 3), ("file", 6), ("sqlite", 3), ("sqlite", 6)]
    assert all(r["seconds"] > 0 and r["us_per_thread"] > 0 for r in rows)
    assert len(list((tmp_path / "file-6" / "backups").iterdir())) == 6
