"""`telar-checkpoint`: every command run through `main(argv)` (and a real subprocess) on threads that
real LangGraph graphs stored, checking exact output fragments and exit codes."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from telar_checkpoint import FileStore, TelarSaver
from telar_checkpoint.cli import build_app, main
from telar_checkpoint.stores.sqlite import SQLiteStore
from tests.graphs import multi_step, nested_subgraphs, with_interrupt

ROOT = Path(__file__).resolve().parent.parent


def config(thread: str) -> dict:
    return {"configurable": {"thread_id": thread}}


def fill(store) -> None:
    """steps (finished), ask (paused at an interrupt), sub (paused in a subgraph: version 2 lines),
    torn (steps plus half a line), broken (steps after a corrupt first line)."""
    saver = TelarSaver(store)
    multi_step().compile(checkpointer=saver).invoke({"log": [], "count": 0}, config("steps"))
    with_interrupt().compile(checkpointer=saver).invoke({"request": "deploy", "log": []}, config("ask"))
    nested_subgraphs(1).compile(checkpointer=saver).invoke({"request": "deploy", "log": []}, config("sub"))
    steps = store.read("steps")
    store.write("torn", steps + '{"format":1,"kind":"wri')
    store.write("broken", '{"format":1,"kind":"checkpoint\n' + steps)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("built") / "store"
    fill(FileStore(directory))
    (directory / "notes.txt").write_text("not ours\n")
    return directory


@pytest.fixture
def url(built, tmp_path) -> str:
    """A fresh copy of the built store for each test (trim and delete change it)."""
    directory = tmp_path / "store"
    shutil.copytree(built, directory)
    return str(directory)


def run(capsys, *argv: str, stdin: str | None = None, monkeypatch=None) -> tuple[int, str, str]:
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def ids(capsys, url: str, thread: str, *extra: str) -> list[dict]:
    code, out, _ = run(capsys, "history", url, thread, "--json", *extra)
    assert code == 0
    return json.loads(out)


# --- threads -------------------------------------------------------------------------------------


def test_threads_lists_counts_corrupt_and_foreign_apart(capsys, url) -> None:
    code, out, err = run(capsys, "threads", url)
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == "THREAD  CHECKPOINTS  LATEST STEP  UPDATED (UTC)        BYTES  NOTE"
    assert [line.split()[:3] for line in lines[1:5]] == [
        ["ask", "3", "1"], ["steps", "5", "3"], ["sub", "5", "1"], ["torn", "5", "3"]
    ]
    assert lines[4].endswith("torn last line")
    size = (Path(url) / "steps.jsonl").stat().st_size
    assert f" {size}" in lines[2]
    assert "4 threads, " in out
    assert "Corrupt threads (1; `telar-checkpoint verify` says more):\n  broken: thread 'broken', line 1: not valid JSON" in out
    assert out.endswith("Foreign entries (1; not histories of ours, never touched):\n  notes.txt\n")


def test_threads_json(capsys, url) -> None:
    code, out, _ = run(capsys, "threads", url, "--json")
    data = json.loads(out)
    assert code == 0 and data["foreign"] == ["notes.txt"]
    assert [c["thread_id"] for c in data["corrupt"]] == ["broken"]
    steps = next(t for t in data["threads"] if t["thread_id"] == "steps")
    assert steps["checkpoints"] == 5 and steps["latest_step"] == 3 and steps["torn"] is False
    assert steps["updated"].endswith("+00:00") and steps["size"] == (Path(url) / "steps.jsonl").stat().st_size


@pytest.mark.parametrize("kind", ["file", "sqlite"])
def test_threads_and_verify_on_each_local_store_url(capsys, tmp_path, kind) -> None:
    if kind == "file":
        store, url = FileStore(tmp_path / "dir"), f"file://{tmp_path / 'dir'}"
    else:
        store, url = SQLiteStore(tmp_path / "db.sqlite"), f"sqlite:///{tmp_path / 'db.sqlite'}"
    fill(store)
    store.close()
    code, out, _ = run(capsys, "threads", url)
    assert code == 0 and "sub               5            1" in out and "broken: thread 'broken', line 1" in out
    code, out, _ = run(capsys, "verify", url, "sub")
    assert (code, out) == (0, "ok      sub\n\n1 thread: 1 ok, 0 with warnings only, 0 failed -- sound\n")


def test_list_threads_on_every_store(store) -> None:
    from telar_checkpoint.inspection import list_threads

    fill(store)
    seen = []
    listing = list_threads(store, progress=lambda done, total, _thread: seen.append((done, total)))
    assert [(t.thread_id, t.checkpoints, t.latest_step, t.torn) for t in listing.threads] == [
        ("ask", 3, 1, False), ("steps", 5, 3, False), ("sub", 5, 1, False), ("torn", 5, 3, True)
    ]
    assert [(c.thread_id, c.error.split(":")[0]) for c in listing.corrupt] == [("broken", "thread 'broken', line 1")]
    assert seen[-1] == (5, 5) and listing.foreign == []


def test_progress_bar_only_when_asked_or_on_a_terminal(capsys, url) -> None:
    _, _, err = run(capsys, "threads", url)
    assert err == ""
    _, _, err = run(capsys, "threads", url, "--progress")
    assert err.startswith("reading threads ━") and err.endswith("━ 5/5\n")  # off a terminal: drawn once, at the end
    assert "\x1b" not in err


# --- history, show, diff ----------------------------------------------------------------------------


def test_history_of_a_subgraph_pause(capsys, url) -> None:
    code, out, _ = run(capsys, "history", url, "sub")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["CHECKPOINT", "NAMESPACE", "STEP", "SOURCE", "TIME", "(UTC)", "V", "NEXT", "INTERRUPTS"]
    rows = [line.split() for line in lines[1:-1]]
    assert [(r[2] if r[1].startswith("child:") else r[1]) for r in rows] == ["-1", "0", "1", "-1", "0"]  # by id
    assert [r[6] if r[1].startswith("child:") else r[5] for r in rows] == ["1", "1", "1", "2", "2"]  # format version
    assert '  1  child      {"question":"approve deploy?"}' in out
    assert '  2  inner_ask  {"question":"approve deploy?"}' in out
    assert lines[-1] == "5 checkpoints"
    only_root = ids(capsys, url, "sub", "--ns", "")
    assert [c["step"] for c in only_root] == [-1, 0, 1] and {c["format"] for c in only_root} == {1}
    sub = [c for c in ids(capsys, url, "sub") if c["ns"]]
    assert [c["format"] for c in sub] == [2, 2] and sub[0]["ns"].startswith("child:")


def test_history_next_nodes_match_langgraph(capsys, url) -> None:
    for thread, builder in (("steps", multi_step), ("ask", with_interrupt), ("sub", lambda: nested_subgraphs(1))):
        graph = builder().compile(checkpointer=TelarSaver(FileStore(url)))
        expected = {s.config["configurable"]["checkpoint_id"]: list(s.next) for s in graph.get_state_history(config(thread))}
        assert {c["id"]: c["next"] for c in ids(capsys, url, thread, "--ns", "")} == expected


def test_show_latest_and_by_id(capsys, url) -> None:
    code, out, _ = run(capsys, "show", url, "ask")
    assert code == 0
    assert "step        1 (loop), format 1, " in out
    assert "next        ask\ninterrupts  {\"question\":\"approve deploy?\"}\n" in out
    assert '  {\n    "request": "deploy",\n    "log": [\n      "prepared deploy"\n    ],\n    "branch:to:ask": null\n  }' in out
    assert "pending writes (1):\n  ask [task " in out and '] __interrupt__ = {"$tuple":[{"$dataclass":{"class":"Interrupt"' in out
    first = ids(capsys, url, "ask")[0]["id"]
    code, out, _ = run(capsys, "show", url, "ask", first, "--json")
    view = json.loads(out)
    assert code == 0 and view["info"]["id"] == first and view["info"]["next"] == ["__start__"]
    assert view["values"] == {"__start__": {"request": "deploy", "log": []}}
    assert view["metadata"]["source"] == "input"


def test_show_a_subgraph_checkpoint_by_id(capsys, url) -> None:
    inner = [c for c in ids(capsys, url, "sub") if c["ns"]][-1]
    code, out, _ = run(capsys, "show", url, "sub", inner["id"])
    assert code == 0 and f"namespace   {inner['ns']}\n" in out and "format 2" in out


def test_diff_shows_added_removed_changed_and_appended(capsys, url) -> None:
    history = ids(capsys, url, "steps")
    code, out, _ = run(capsys, "diff", url, "steps", history[1]["id"], history[2]["id"])
    assert code == 0
    assert out == '- branch:to:a (was null)\n+ branch:to:b = null\n~ count: 0 -> 1\n~ log appended ["a"]\n'
    code, out, _ = run(capsys, "diff", url, "steps", history[2]["id"], history[2]["id"])
    assert out == "no change in the state\n"
    code, out, _ = run(capsys, "diff", url, "steps", history[0]["id"], history[4]["id"], "--json")
    changes = {c["channel"]: c for c in json.loads(out)}
    assert changes["count"]["kind"] == "added" and changes["log"]["after"] == ["a", "b", "c"]


def test_missing_thread_and_checkpoint_exit_3_without_traceback(capsys, url) -> None:
    code, out, err = run(capsys, "history", url, "nope")
    assert (code, out) == (3, "")
    assert err == "telar-checkpoint: error: no thread 'nope' in this store; `telar-checkpoint threads URL` lists them\n"
    code, _, err = run(capsys, "show", url, "ask", "1f000000-0000-6000-8000-000000000000")
    assert code == 3 and err.startswith("telar-checkpoint: error: thread 'ask': no checkpoint 1f000000-")
    code, _, err = run(capsys, "diff", url, "nope", "a", "b")
    assert code == 3


def test_corrupt_thread_exits_4(capsys, url) -> None:
    for argv in (["history", url, "broken"], ["show", url, "broken"]):
        code, out, err = run(capsys, *argv)
        assert code == 4 and out == "" and "Traceback" not in err
        assert err.startswith("telar-checkpoint: error: thread 'broken', line 1: not valid JSON")


def test_bad_url_and_usage_exit_2(capsys, tmp_path) -> None:
    code, _, err = run(capsys, "threads", "ftp://example.com/x")
    assert code == 2 and "unknown scheme 'ftp'" in err and err.count("\n") == 1
    code, _, err = run(capsys, "threads", str(tmp_path / "missing"))
    assert code == 2 and err == f"telar-checkpoint: error: no store at '{tmp_path / 'missing'}': {tmp_path / 'missing'} does not exist\n"
    assert not (tmp_path / "missing").exists()  # a read never creates a store
    code, _, err = run(capsys, "trim", str(tmp_path), "--keep", "0")
    assert code == 2 and "must be at least 1, not 0" in err
    code, _, err = run(capsys, "history")
    assert code == 2 and "Error: Missing argument 'URL'." in err


def test_every_command_has_help_with_an_example(capsys) -> None:
    names = build_app().commands
    assert set(names) >= {"threads", "history", "show", "diff", "verify", "trim", "upgrade", "delete", "demo", "repair"}
    for name in names:
        code, out, _ = run(capsys, name, "--help")
        assert code == 0 and "\nexample:\n  telar-checkpoint " + name in out, name


# --- verify -------------------------------------------------------------------------------------


def test_verify_store_names_every_problem_and_fails(capsys, url) -> None:
    code, out, err = run(capsys, "verify", url)
    assert code == 1 and err == ""
    assert "ok      ask\nFAILED  broken\n  error: line 1: not valid JSON" in out
    assert "warn    torn\n  warning: line 10: unterminated last line (23 characters) is dropped on read" in out
    assert "foreign notes.txt: not a history of ours (never touched)\n" in out
    assert out.endswith("5 threads: 3 ok, 1 with warnings only, 1 failed; 1 foreign entry -- FAILED\n")


def test_verify_one_thread_warnings_pass_unless_strict(capsys, url) -> None:
    assert run(capsys, "verify", url, "torn")[0] == 0
    assert run(capsys, "verify", url, "torn", "--strict")[0] == 1
    code, out, _ = run(capsys, "verify", url, "torn", "--json")
    data = json.loads(out)
    assert code == 0 and data["ok"] is True
    assert data["threads"]["torn"] == [{
        "line": 10, "severity": "warning", "code": "torn",
        "message": "unterminated last line (23 characters) is dropped on read; the next write to the thread removes it",
    }]
    assert run(capsys, "verify", url, "nope")[0] == 3


# --- trim and delete -------------------------------------------------------------------------------


def test_trim_asks_first_and_no_changes_nothing(capsys, url, monkeypatch) -> None:
    before = (Path(url) / "steps.jsonl").read_text()
    code, out, err = run(capsys, "trim", url, "--keep", "2", "steps", stdin="n\n", monkeypatch=monkeypatch)
    assert code == 1 and "THREAD  CHECKPOINTS  AFTER TRIM\nsteps             5           2" in out
    assert err == "Trim 1 thread, removing 3 checkpoints? [y/N] n\naborted; nothing was changed\n"
    assert (Path(url) / "steps.jsonl").read_text() == before


def test_trim_after_yes(capsys, url, monkeypatch) -> None:
    first = ids(capsys, url, "steps")[0]["id"]
    code, out, _ = run(capsys, "trim", url, "--keep", "2", "steps", stdin="y\n", monkeypatch=monkeypatch)
    assert code == 0 and out.endswith("trimmed 1 thread: 3 checkpoints removed\n")
    assert [c["step"] for c in ids(capsys, url, "steps")] == [2, 3]
    code, _, err = run(capsys, "show", url, "steps", first)
    assert code == 3 and f"checkpoint {first} was trimmed" in err
    assert run(capsys, "verify", url, "steps")[0] == 0  # the trim is recorded: the gap is sound
    code, out, _ = run(capsys, "trim", url, "--keep", "2", "steps")
    assert (code, out) == (0, "nothing to trim: every thread has at most 2 checkpoints to keep\n")


def test_trim_every_thread_skips_the_corrupt_one_and_exits_4(capsys, url) -> None:
    code, out, err = run(capsys, "trim", url, "--keep", "1", "--yes")
    assert code == 4
    assert "torn              5           1  drops torn last line" in out
    assert "trimmed 4 threads: 13 checkpoints removed" in out
    assert "skipped corrupt thread 'broken', line 1: not valid JSON" in err
    assert json.loads(run(capsys, "verify", url, "--json")[1])["threads"]["torn"] == []


def test_trim_missing_and_corrupt_thread(capsys, url) -> None:
    assert run(capsys, "trim", url, "--keep", "1", "nope", "--yes")[0] == 3
    code, _, err = run(capsys, "trim", url, "--keep", "1", "broken", "--yes")
    assert code == 4 and err.startswith("telar-checkpoint: error: thread 'broken', line 1")


# --- upgrade: a development build's lines (format version 3) rewritten in versions 1 and 2 ----------

# (its tests are named test_golden*: the golden file's Interrupt values need a newer langgraph than the
# lowest combination's)
DEVELOPMENT_BUILD = (ROOT / "tests" / "golden" / "v3.jsonl").read_text(encoding="utf-8")


def formats(path: Path) -> set[int]:
    return {json.loads(line)["format"] for line in path.read_text(encoding="utf-8").splitlines()}


def test_golden_v3_upgrade_rewrites_a_development_builds_threads_in_versions_1_and_2(capsys, url) -> None:
    for name in ("dev-a", "dev-b"):
        (Path(url) / f"{name}.jsonl").write_text(DEVELOPMENT_BUILD, encoding="utf-8")
    before = {name: ids(capsys, url, name) for name in ("dev-a", "dev-b", "steps")}
    untouched = (Path(url) / "steps.jsonl").read_text()
    code, out, err = run(capsys, "upgrade", url, "--dry-run")
    assert code == 4 and "would rewrite 2 threads in format versions 1 and 2 (18 lines of a development build)" in out
    assert "skipped corrupt thread 'broken', line 1" in err
    assert formats(Path(url) / "dev-a.jsonl") == {1, 2, 3}
    problems = json.loads(run(capsys, "verify", url, "dev-a", "--json")[1])["threads"]["dev-a"]
    assert {p["code"] for p in problems} == {"development-build"} and len(problems) == 9
    code, out, _ = run(capsys, "upgrade", url)
    assert code == 4 and "rewrote dev-a: 9 lines of a development build" in out
    assert "rewrote 2 threads in format versions 1 and 2 (18 lines of a development build); 4 threads already" in out
    for name in ("dev-a", "dev-b"):
        assert formats(Path(url) / f"{name}.jsonl") == {1, 2}
        assert json.loads(run(capsys, "verify", url, name, "--json")[1])["threads"][name] == []
    assert {name: ids(capsys, url, name) for name in before} == before
    assert (Path(url) / "steps.jsonl").read_text() == untouched
    code, out, _ = run(capsys, "upgrade", url, "--json")
    assert code == 4 and json.loads(out)["upgraded"] == {} and json.loads(out)["current"] == 6


def test_golden_v3_an_interrupted_upgrade_loses_nothing_and_a_second_run_finishes_it(tmp_path) -> None:
    from telar_checkpoint import CheckpointCodec
    from telar_checkpoint.upgrading import upgrade_format

    store = FileStore(tmp_path / "store")
    for n in range(4):
        store.write(f"dev-{n}", DEVELOPMENT_BUILD)
    records = CheckpointCodec().decode_history("g", DEVELOPMENT_BUILD)

    def interrupt_after_two(done: int, total: int, thread_id: str) -> None:
        if done == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        upgrade_format(store, progress=interrupt_after_two)
    assert [3 in {json.loads(line)["format"] for line in (store.read(f"dev-{n}") or "").splitlines()}
            for n in range(4)] == [False, False, True, True]
    for n in range(4):
        assert CheckpointCodec().decode_history("g", store.read(f"dev-{n}")) == records
    report = upgrade_format(store)
    assert sorted(report.upgraded) == ["dev-2", "dev-3"] and sorted(report.current) == ["dev-0", "dev-1"]
    for n in range(4):
        assert CheckpointCodec().decode_history("g", store.read(f"dev-{n}")) == records


def test_delete_asks_first(capsys, url, monkeypatch) -> None:
    size = (Path(url) / "ask.jsonl").stat().st_size
    code, _, err = run(capsys, "delete", url, "ask", stdin="", monkeypatch=monkeypatch)
    assert code == 1 and err == f"Delete thread 'ask' (3 checkpoints, {size} bytes)? [y/N] \naborted; nothing was changed\n"
    assert (Path(url) / "ask.jsonl").exists()
    code, out, _ = run(capsys, "delete", url, "ask", stdin="yes\n", monkeypatch=monkeypatch)
    assert (code, out) == (0, f"deleted thread 'ask' (3 checkpoints, {size} bytes)\n")
    assert TelarSaver(FileStore(url)).get_tuple({"configurable": {"thread_id": "ask"}}) is None
    assert "ask" not in run(capsys, "threads", url)[1]  # what is left is the record of its deletion
    assert run(capsys, "delete", url, "ask", "--yes")[0] == 3
    code, out, _ = run(capsys, "delete", url, "broken", "--yes", "--json")
    assert (code, json.loads(out)) == (0, {"deleted": "broken"})


# --- demo, export, import, migrate -------------------------------------------------------------------


def test_demo_pauses_and_resumes_in_a_new_saver(capsys, tmp_path) -> None:
    code, out, _ = run(capsys, "demo", str(tmp_path / "demo"))
    assert code == 0
    assert '1. First saver: the run pauses at interrupt() in node "ask".\n   It asks: {"question":"approve deploy v2?"}' in out
    assert '2. A new saver on the same files finds the pause:\n   next: ask; log so far: ["prepared deploy v2"]' in out
    assert 'log: ["prepared deploy v2","answered yes","finished: yes"]' in out
    assert '  1  ask        {"question":"approve deploy v2?"}' not in out  # answered: no longer pending
    assert "  1  ask\n" in out and out.endswith("5 checkpoints\n")
    code, _, err = run(capsys, "demo", str(tmp_path / "demo"))
    assert code == 2 and "already holds a thread 'demo'" in err


def test_demo_without_langgraph_says_what_to_install(capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "langgraph.graph", None)  # import fails as if not installed
    code, out, err = run(capsys, "demo", str(tmp_path / "demo"))
    assert (code, out) == (2, "")
    assert err == ("telar-checkpoint: error: the demo runs a LangGraph graph, and langgraph is not installed: "
                   "pip install langgraph\n")


def test_export_then_import(capsys, url, tmp_path) -> None:
    target = tmp_path / "jsonl" / "sub.jsonl"
    target.parent.mkdir()
    code, out, err = run(capsys, "export", url, "sub", "-o", str(target))
    lines = (Path(url) / "sub.jsonl").read_text().count("\n")
    assert code == 0 and out == "" and err == f"exported thread 'sub' to {target} ({lines} lines)\n"
    assert target.read_text() == (Path(url) / "sub.jsonl").read_text()
    other = f"sqlite:///{tmp_path / 'other.db'}"
    code, out, _ = run(capsys, "import", other, "copy", str(target))
    assert code == 0 and out.startswith("Migrated 1 thread (5 checkpoints, ")
    code, out, _ = run(capsys, "show", other, "copy")
    assert code == 0 and '{"question":"approve deploy?"}' in out
    assert run(capsys, "export", url, "nope")[0] == 3
    code, _, err = run(capsys, "import", other, "x", str(tmp_path / "none.jsonl"))
    assert code == 2 and "cannot read" in err


def test_migrate_from_a_langgraph_sqlite_saver(capsys, tmp_path) -> None:
    from langgraph.checkpoint.sqlite import SqliteSaver

    db = tmp_path / "lg.sqlite"
    with SqliteSaver.from_conn_string(str(db)) as saver:
        nested_subgraphs(1).compile(checkpointer=saver).invoke({"request": "deploy", "log": []}, config("sub"))
        multi_step().compile(checkpointer=saver).invoke({"log": [], "count": 0}, config("steps"))
    source, target = f"langgraph+sqlite:///{db}", str(tmp_path / "moved")
    code, out, _ = run(capsys, "migrate", "--from", source, "--to", target, "--dry-run")
    assert code == 0 and out.startswith("Would migrate 2 threads (10 checkpoints, ")
    assert not (tmp_path / "moved" / "sub.jsonl").exists()
    code, out, err = run(capsys, "migrate", "--from", source, "--to", target, "--thread", "sub", "--progress")
    assert code == 0 and out.startswith("Migrated 1 thread (5 checkpoints, ") and "Nothing failed." in out
    assert err.startswith("migrating ━") and err.endswith(" 1/1\n")
    code, out, _ = run(capsys, "history", target, "sub")
    assert '  1  child      {"question":"approve deploy?"}' in out
    assert run(capsys, "verify", target)[0] == 0


def test_migrate_exits_1_when_a_thread_fails(capsys, url, tmp_path) -> None:
    code, out, _ = run(capsys, "migrate", "--from", url, "--to", str(tmp_path / "to"), "--json")
    report = json.loads(out)
    assert code == 1 and report["ok"] is False and list(report["failed"]) == ["broken"]
    assert report["threads"] == 4


# --- a real process ---------------------------------------------------------------------------------------


def test_python_dash_m_in_a_subprocess(url) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "telar_checkpoint", "verify", url],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 1 and "FAILED  broken" in done.stdout and done.stderr == ""
    done = subprocess.run([sys.executable, "-m", "telar_checkpoint", "history", url, "nope"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 3 and done.stdout == ""
    assert done.stderr == "telar-checkpoint: error: no thread 'nope' in this store; `telar-checkpoint threads URL` lists them\n"


# --- smaller things: --version, the URL from the environment, help, namespaces, verify's summary --------------


def test_version(capsys) -> None:
    from importlib.metadata import version

    code, out, _ = run(capsys, "--version")
    assert (code, out) == (0, f"telar-checkpoint {version('telar-checkpoint')}\n")


def test_the_url_from_the_environment(capsys, url, monkeypatch) -> None:
    monkeypatch.setenv("TELAR_CHECKPOINT_URL", url)
    code, out, _ = run(capsys, "history", "steps")
    assert code == 0 and out.endswith("5 checkpoints\n")
    code, out, _ = run(capsys, "threads")
    assert code == 0 and "4 threads, " in out
    assert run(capsys, "history", url, "steps")[1].endswith("5 checkpoints\n")  # a URL given still wins
    monkeypatch.delenv("TELAR_CHECKPOINT_URL")
    code, _, err = run(capsys, "threads")
    assert code == 2 and "Error: Missing argument 'URL'." in err


def test_thread_has_help(capsys) -> None:
    code, out, _ = run(capsys, "history", "--help")
    words = " ".join(out.split())
    assert code == 0 and "Arguments: URL the store: a directory" in words
    assert words.count("THREAD a thread id, the thread_id of the graph's config") == 1


def test_history_ns_names_a_subgraph_by_its_node(capsys, url) -> None:
    code, out, _ = run(capsys, "history", url, "sub", "--ns", "child")
    lines = out.splitlines()
    assert code == 0 and lines[-1] == "2 checkpoints"
    assert all(" child:" in line for line in lines[1:-1])
    code, out, _ = run(capsys, "history", url, "sub", "--ns", "nothing")
    assert (code, out.splitlines()[-1]) == (0, "0 checkpoints")


def test_verify_strict_says_which_warnings_failed_it_and_quiet_prints_only_problems(capsys, url) -> None:
    code, out, _ = run(capsys, "verify", url, "torn", "--strict")
    assert code == 1 and out.endswith("1 thread: 0 ok, 1 with warnings only, 0 failed -- FAILED (--strict: warnings torn)\n")
    code, out, _ = run(capsys, "verify", url, "--quiet")
    assert code == 1 and "ok      ask" not in out and "FAILED  broken\n" in out and "warn    torn\n" in out
    assert out.endswith("5 threads: 3 ok, 1 with warnings only, 1 failed; 1 foreign entry -- FAILED\n")
    code, out, _ = run(capsys, "verify", url, "ask", "-q")
    assert (code, out) == (0, "1 thread: 1 ok, 0 with warnings only, 0 failed -- sound\n")


def _json_history(url: str) -> str:
    done = subprocess.run([sys.executable, "-m", "telar_checkpoint", "history", url, "sub", "--json"],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    return done.stdout


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_tables_follow_the_terminal_width_and_no_color(url, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "60")
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.delenv("NO_COLOR", raising=False)
    for no_color in (False, True):
        if no_color:
            monkeypatch.setenv("NO_COLOR", "1")
        screen = _Terminal()
        monkeypatch.setattr(sys, "stdout", screen)
        assert main(["history", url, "sub"]) == 0
        text = screen.getvalue()
        plain = re.sub(r"\x1b\[[0-9;]*m", "", text)
        assert max(len(line) for line in plain.splitlines()) <= 60  # folded to the width
        ids = [c["id"] for c in json.loads(_json_history(url))]
        assert all(cid[:8] in plain for cid in ids)  # folded, never cut off
        assert "\x1b[1m" in text  # bold headers
        screen = _Terminal()
        monkeypatch.setattr(sys, "stdout", screen)
        assert main(["verify", url, "broken"]) == 1
        colour = re.search(r"\x1b\[[0-9;]*3[0-9]m", screen.getvalue())  # FAILED in red, unless NO_COLOR
        assert (colour is None) is no_color and "FAILED" in screen.getvalue()
    piped = io.StringIO()
    monkeypatch.setattr(sys, "stdout", piped)
    assert main(["history", url, "sub"]) == 0
    assert max(len(line) for line in piped.getvalue().splitlines()) > 60 and "\x1b" not in piped.getvalue()


def test_without_the_cli_extra_the_command_says_what_to_install(capsys, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "rich", None)  # import fails as if not installed
    code, out, err = run(capsys, "threads", ".")
    assert (code, out) == (2, "")
    assert err == "telar-checkpoint: error: the command line needs the rich package: pip install 'telar-checkpoint[cli]'\n"


def test_usage_brackets_the_arguments_that_may_be_left_out(capsys) -> None:
    """An optional THREAD, CHECKPOINT or DIR is shown as optional in the usage line (as argparse
    did), and a required one is not."""
    usages = {}
    for name in ("verify", "trim", "show", "demo", "history"):
        code, out, _ = run(capsys, name, "--help")
        assert code == 0
        usages[name] = out.splitlines()[0]
    assert usages["verify"].endswith(" [OPTIONS] URL [THREAD]")
    assert usages["trim"].endswith(" [OPTIONS] URL [THREAD]")
    assert usages["show"].endswith(" [OPTIONS] URL THREAD [CHECKPOINT]")
    assert usages["demo"].endswith(" [OPTIONS] [DIR]")
    assert usages["history"].endswith(" [OPTIONS] URL THREAD")
    words = " ".join(run(capsys, "verify", "--help")[1].split())
    assert " THREAD only this thread (default: all" in words  # its line of help keeps the bare name
