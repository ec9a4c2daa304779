"""Damaged threads: a blank line, a torn line in the middle, a corrupt latest checkpoint. `verify` names the
damage in one or two findings, `export --raw` gets the text out as stored, and `repair` keeps what reads,
keeps the original, and leaves a thread that `verify` calls sound and the graph resumes from."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from telar_checkpoint import FileStore, TelarSaver, UsageError, repair
from telar_checkpoint.repairing import plan_repair
from telar_checkpoint.stores.sqlite import SQLiteStore
from telar_checkpoint.verify import verify_thread
from tests.graphs import multi_step, with_interrupt
from tests.test_cli import run  # the CLI in this process: exit code, stdout, stderr

PROG = "telar-checkpoint: error: "


def config(thread: str) -> dict:
    return {"configurable": {"thread_id": thread}}


def steps_thread(store) -> str:
    """A finished multi-step run; its stored text."""
    multi_step().compile(checkpointer=TelarSaver(store)).invoke({"log": [], "count": 0}, config("t"))
    return store.read("t")


def line_of_step(text: str, step: int) -> int:
    """The index of the checkpoint line of `step`."""
    lines = text.split("\n")
    return next(i for i, raw in enumerate(lines) if raw and orjson.loads(raw).get("kind") == "checkpoint"
                and orjson.loads(raw)["metadata"]["step"] == step)


def torn_in_the_middle(text: str, step: int) -> str:
    """`text` with the checkpoint line of `step` cut in half (a torn write that later writes followed)."""
    lines = text.split("\n")
    i = line_of_step(text, step)
    lines[i] = lines[i][: len(lines[i]) // 2]
    return "\n".join(lines)


# --- a blank line -----------------------------------------------------------------------------------------


def test_a_blank_line_is_named_and_repaired_beside_a_backup(capsys, tmp_path) -> None:
    directory = tmp_path / "store"
    store = FileStore(directory)
    good = steps_thread(store)
    with open(directory / "t.jsonl", "a") as f:
        f.write("\n")  # echo >> t.jsonl
    damaged = good + "\n"
    assert [p.code for p in verify_thread("t", damaged)] == ["blank"]
    code, _, err = run(capsys, "history", str(directory), "t")
    code_verify, out, _ = run(capsys, "verify", str(directory), "t")
    # the reader skips it: a warning, and the thread reads
    assert TelarSaver(store).get_tuple(config("t")) is not None and (code, code_verify) == (0, 0)
    assert "  warning: line 10: a blank line, skipped on read" in out

    plan = plan_repair("t", damaged)
    assert plan.text == good and [(d.line, d.reason) for d in plan.dropped] == [(10, "a blank line")]
    code, out, err = run(capsys, "repair", str(directory), "t", "--yes")
    assert (code, err) == (0, "")
    assert out == ("thread 't': 10 lines, the repair drops 1:\n  line 10: a blank line\n"
                   f"repaired thread 't': 1 line dropped; the original is in {directory / 't.jsonl.bak'}\n")
    assert (directory / "t.jsonl").read_text() == good and (directory / "t.jsonl.bak").read_text() == damaged
    assert run(capsys, "verify", str(directory), "t")[0] == 0
    code, out, _ = run(capsys, "repair", str(directory), "t")
    assert (code, out) == (0, "thread 't' reads whole: nothing to repair\n")


# --- a torn line in the middle ------------------------------------------------------------------------------


def test_a_torn_line_is_one_finding_and_the_repaired_thread_resumes(capsys, tmp_path) -> None:
    directory = tmp_path / "store"
    store = FileStore(directory)
    text = steps_thread(store)
    graph = multi_step().compile(checkpointer=TelarSaver(store))
    step_1 = next(s.config for s in graph.get_state_history(config("t")) if s.metadata["step"] == 1)
    damaged = torn_in_the_middle(text, step=2)
    store.write("t", damaged)
    found = verify_thread("t", damaged)
    assert [p.code for p in found] == ["corrupt-line", "unreachable"]  # not one finding per later line
    assert "can no longer be reached, most likely because line" in found[1].message

    plan = plan_repair("t", damaged)
    kept_steps = [orjson.loads(raw)["metadata"]["step"] for raw in plan.text.splitlines()
                  if orjson.loads(raw)["kind"] == "checkpoint"]
    assert kept_steps == [-1, 0, 1]  # up to the damage; step 3 hung from step 2
    assert len(plan.dropped) == damaged.count("\n") - plan.text.count("\n")
    repair(store, "t")
    assert verify_thread("t", store.read("t")) == []
    assert Path(f"{store.path('t')}.bak").read_text() == damaged

    latest = graph.get_state(config("t")).config["configurable"]["checkpoint_id"]
    assert latest == step_1["configurable"]["checkpoint_id"]  # the last checkpoint before the damage
    result = graph.invoke(None, config("t"))  # resumes from the last sound checkpoint
    assert result["log"] == ["a", "b", "c"] and result["count"] == 3
    assert run(capsys, "verify", str(directory), "t")[0] == 0


def test_a_paused_run_with_a_corrupt_latest_checkpoint_resumes_after_repair(tmp_path) -> None:
    store = FileStore(tmp_path / "store")
    graph = with_interrupt().compile(checkpointer=TelarSaver(store))
    graph.invoke({"request": "deploy", "log": []}, config("ask"))
    text = store.read("ask")
    last = max(i for i, raw in enumerate(text.split("\n")) if raw and orjson.loads(raw)["kind"] == "checkpoint")
    lines = text.split("\n")
    lines[last] = "{" + lines[last][1:-1]  # cut its closing brace
    store.write("ask", "\n".join(lines))
    plan = repair(store, "ask")
    assert any("pending writes" in d.reason for d in plan.dropped) or len(plan.dropped) >= 1
    assert verify_thread("ask", store.read("ask")) == []
    assert graph.get_state(config("ask")).values["log"] == ["prepared deploy"]  # the last sound checkpoint
    result = graph.invoke(None, config("ask"))
    assert "__interrupt__" in result  # and pauses at the question again, as it did


# --- asking, backups, other stores, export --raw ------------------------------------------------------------


def test_repair_asks_first_and_no_changes_nothing(capsys, tmp_path, monkeypatch) -> None:
    directory = tmp_path / "store"
    store = FileStore(directory)
    damaged = steps_thread(store) + "\n"
    store.write("t", damaged)
    code, out, err = run(capsys, "repair", str(directory), "t", stdin="n\n", monkeypatch=monkeypatch)
    assert code == 1 and out.startswith("thread 't': 10 lines, the repair drops 1:")
    assert err == "Repair thread 't', dropping 1 line? [y/N] n\naborted; nothing was changed\n"
    assert store.read("t") == damaged and not Path(f"{store.path('t')}.bak").exists()


def test_repair_in_sqlite_keeps_an_exported_copy(capsys, tmp_path, monkeypatch) -> None:
    store = SQLiteStore(tmp_path / "db.sqlite")
    damaged = torn_in_the_middle(steps_thread(store), step=1)
    store.write("t", damaged)
    with pytest.raises(UsageError, match="say where to keep the original"):
        repair(store, "t")
    assert store.read("t") == damaged
    store.close()
    monkeypatch.chdir(tmp_path)
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    code, out, _ = run(capsys, "repair", url, "t", "--yes")
    assert code == 0 and out.endswith("the original is in t.bak.jsonl\n")
    assert (tmp_path / "t.bak.jsonl").read_text() == damaged
    assert run(capsys, "verify", url, "t")[0] == 0
    code, _, err = run(capsys, "import", url, "back", str(tmp_path / "t.bak.jsonl"))
    assert code == 4  # the backup is the damaged text, as it was
    code, _, err = run(capsys, "repair", url, "t", "--yes", "--backup", str(tmp_path / "t.bak.jsonl"))
    assert code == 0  # nothing to repair any more: the existing backup is not touched


def test_an_existing_backup_is_never_overwritten(tmp_path) -> None:
    store = FileStore(tmp_path / "store")
    store.write("t", steps_thread(store) + "\n")
    Path(f"{store.path('t')}.bak").write_text("keep me")
    with pytest.raises(UsageError, match="already exists"):
        repair(store, "t")
    assert Path(f"{store.path('t')}.bak").read_text() == "keep me" and store.read("t").endswith("\n\n")


def test_nothing_readable_is_refused(tmp_path) -> None:
    store = FileStore(tmp_path / "store")
    store.write("t", "not json\n\n")
    with pytest.raises(UsageError, match="no line of thread 't' reads"):
        repair(store, "t")
    assert store.read("t") == "not json\n\n"


def test_export_raw_gets_a_damaged_thread_out_as_stored(capsys, tmp_path) -> None:
    directory = tmp_path / "store"
    store = FileStore(directory)
    damaged = torn_in_the_middle(steps_thread(store), step=2) + '{"format":1,"kind":"wri'
    store.write("t", damaged)
    code, _, err = run(capsys, "export", str(directory), "t")
    assert code == 4 and err.startswith(PROG + "thread 't', line ")
    code, out, _ = run(capsys, "export", str(directory), "t", "--raw")
    assert (code, out) == (0, damaged)
    target = tmp_path / "raw.jsonl"
    code, _, err = run(capsys, "export", str(directory), "t", "--raw", "-o", str(target))
    assert code == 0 and target.read_text() == damaged
    assert err == f"exported thread 't' to {target} ({damaged.count(chr(10)) + 1} lines)\n"


def test_repair_on_every_store_keeps_what_reads_and_the_graph_resumes(store, tmp_path) -> None:
    """A SQL or Redis store could only delete a damaged thread: repair salvages it on each store."""
    damaged = torn_in_the_middle(steps_thread(store), step=2)
    store.write("t", damaged)
    backup = tmp_path / "t.original.jsonl"
    plan = repair(store, "t", backup=backup)
    assert plan.backup == str(backup) and backup.read_text() == damaged
    assert store.read("t") == plan.text and verify_thread("t", plan.text) == []
    result = multi_step().compile(checkpointer=TelarSaver(store)).invoke(None, config("t"))
    assert result["log"] == ["a", "b", "c"] and result["count"] == 3
