"""`verify_thread` and `verify_store`: every kind of damage found, named by line; sound data passes."""

from __future__ import annotations

import re

import orjson
import pytest

from telar_checkpoint import FileStore, MemoryStore, TelarSaver
from telar_checkpoint.inspection import ThreadNotFoundError
from telar_checkpoint.verify import CODES, verify_store, verify_thread
from tests.graphs import multi_step, nested_subgraphs, resume, with_interrupt


def config(thread: str) -> dict:
    return {"configurable": {"thread_id": thread}}


def run_graphs(saver: TelarSaver) -> None:
    """Three real threads: finished steps, paused at an interrupt, paused in a subgraph."""
    multi_step().compile(checkpointer=saver).invoke({"log": [], "count": 0}, config("steps"))
    with_interrupt().compile(checkpointer=saver).invoke({"request": "x", "log": []}, config("ask"))
    nested_subgraphs(1).compile(checkpointer=saver).invoke({"request": "x", "log": []}, config("sub"))


@pytest.fixture(scope="module")
def texts() -> dict[str, str]:
    store = MemoryStore()
    run_graphs(TelarSaver(store))
    return {thread: store.read(thread) or "" for thread in store.keys()}


def lines_of(text: str) -> list[str]:
    return text.splitlines()


def joined(lines: list[str]) -> str:
    return "".join(line + "\n" for line in lines)


def codes(problems: list) -> list[tuple[int | None, str]]:
    return [(p.line, p.code) for p in problems]


def first_index(lines: list[str], **fields: object) -> int:
    """The index of the first line whose JSON has these field values."""
    for i, line in enumerate(lines):
        doc = orjson.loads(line)
        if all(doc.get(k) == v for k, v in fields.items()):
            return i
    raise AssertionError(f"no line with {fields}")


# --- sound data -----------------------------------------------------------------------


def test_sound_store_is_ok(store) -> None:
    run_graphs(TelarSaver(store))
    report = verify_store(store)
    assert sorted(report.threads) == ["ask", "steps", "sub"]
    assert report.problems == [] and report.ok


def test_damage_is_found_on_every_store(store) -> None:
    run_graphs(TelarSaver(store))
    text = store.read("steps") or ""
    store.write("steps", text + '{"format":7,"kind":"checkpoint"}\n' + '{"format":1,"kin')
    report = verify_store(store)
    assert not report.ok
    assert [(p.thread_id, p.line, p.code) for p in report.problems] == [
        ("steps", text.count("\n") + 1, "unknown-format"), ("steps", text.count("\n") + 2, "torn")
    ]


def test_finished_resumed_trimmed_and_forked_threads_are_sound() -> None:
    store = MemoryStore()
    saver = TelarSaver(store, max_history=2)
    graph = nested_subgraphs(1).compile(checkpointer=saver)
    graph.invoke({"request": "x", "log": []}, config("trimmed"))
    graph.invoke(resume("yes"), config("trimmed"))
    forked = multi_step().compile(checkpointer=TelarSaver(store))
    forked.invoke({"log": [], "count": 0}, config("forked"))
    past = list(forked.get_state_history(config("forked")))[2]
    forked.invoke(None, forked.update_state(past.config, {"count": 10}))
    history = saver.codec.parse("forked", store.read("forked"))
    assert history.dropped[""].replaced  # the fork replaced checkpoints: their children's parents are recorded
    assert saver.codec.parse("trimmed", store.read("trimmed")).dropped[""].floor
    assert verify_store(store).problems == []


# --- damage, line by line -----------------------------------------------------------------


def test_corrupt_lines_are_each_reported_and_the_rest_still_checked(texts) -> None:
    lines = lines_of(texts["steps"])
    i, j = first_index(lines, kind="checkpoint", step=0), first_index(lines, kind="checkpoint", step=2)
    step3, lost = first_index(lines, kind="checkpoint", step=3), orjson.loads(lines[j])["id"]
    lines[i] = '{"format": 1, "kind": "checkpoint", "id": '
    lines[j] = '["a list"]'
    found = verify_thread("steps", joined(lines))
    corrupt = [p for p in found if p.code == "corrupt-line"]
    assert [p.line for p in corrupt] == [i + 1, j + 1]
    # a line that appends to a list of the lost checkpoint cannot be read either, and says why
    # as one finding with the other links the damage broke
    [unreachable] = [p for p in found if p.code == "unreachable"]
    assert re.search(rf"[ (]{step3 + 1}[,)]", unreachable.message)
    # without damage (the line is simply gone), the same line is a finding of its own
    original = lines_of(texts["steps"])
    alone = verify_thread("steps", joined(original[:j] + original[j + 1:]))
    assert [(p.line, p.message) for p in alone if p.code == "missing-base"] == [
        (step3, f"builds on the values of checkpoint {lost}, which is not stored before it")
    ]
    assert corrupt[0].message.startswith("not valid JSON")
    assert str(corrupt[0]).startswith(f"error: line {i + 1}: not valid JSON")
    assert corrupt[1].message == "not a JSON object"
    # the checkpoint lost on line 2 leaves its child without a parent: the links the damage broke
    # are one finding, not one per checkpoint that follows
    follow_ons = [p for p in found if p.code not in ("corrupt-line", "value")]
    assert [p.code for p in follow_ons] == ["unreachable"]
    assert f"because line {i + 1} is damaged; `telar-checkpoint repair` drops them" in follow_ons[0].message


def test_unknown_and_missing_format_versions(texts) -> None:
    lines = lines_of(texts["steps"])
    doc = orjson.loads(lines[-1])
    lines.append(orjson.dumps({**doc, "format": 99}).decode())
    lines.append(orjson.dumps({k: v for k, v in doc.items() if k != "format"}).decode())
    found = verify_thread("steps", joined(lines))
    assert codes(found) == [(len(lines) - 1, "unknown-format"), (len(lines), "unknown-format")]
    assert "format version 99, which this release does not read" in found[0].message
    assert "has no format version" in found[1].message


def test_a_version_1_line_in_a_subgraph_namespace_is_corrupt(texts) -> None:
    lines = lines_of(texts["sub"])
    i = first_index(lines, format=2, kind="checkpoint")
    lines[i] = orjson.dumps({**orjson.loads(lines[i]), "format": 1}).decode()
    found = verify_thread("sub", joined(lines))
    assert (i + 1, "corrupt-line") in codes(found)
    assert "a version 1 line has no namespace" in found[0].message


def test_missing_parent_unless_recorded_as_dropped(texts) -> None:
    lines = lines_of(texts["steps"])
    gone = orjson.loads(lines.pop(first_index(lines, kind="checkpoint", step=0)))
    child = orjson.loads(lines[first_index(lines, kind="checkpoint", step=1)])
    found = verify_thread("steps", joined(lines))
    # its writes stayed: for a checkpoint made just before the latest, whose put may be on its way (a racing run's)
    assert sorted(p.code for p in found) == ["missing-parent", "pending-put"]
    missing = next(p for p in found if p.code == "missing-parent")
    assert f"checkpoint {child['id']} has parent {gone['id']}, which is not stored" in missing.message
    # the same gap, recorded as replaced, is sound (its writes went with it)
    record = {"format": 1, "kind": "dropped", "floor": None, "replaced": [gone["id"]]}
    sound = [orjson.dumps(record).decode()] + [
        line for line in lines if orjson.loads(line).get("checkpoint") != gone["id"]
    ]
    assert verify_thread("steps", joined(sound)) == []


def test_subgraph_checkpoint_whose_parent_graph_checkpoint_is_gone(texts) -> None:
    lines = lines_of(texts["sub"])
    owner = orjson.loads(lines[first_index(lines, format=2, kind="checkpoint")])["parents"][""]
    lines = [line for line in lines if orjson.loads(line).get("id") != owner]
    found = verify_thread("sub", joined(lines))
    assert "missing-owner" in [p.code for p in found]
    assert any(f"belongs to checkpoint {owner}, which is not stored" in p.message for p in found)


def test_orphan_writes_older_than_the_latest_are_a_crashs_residue_newer_ones_a_pending_put(texts) -> None:
    """Both warnings: a crash under async durability leaves the first (a rewrite drops them)."""
    lines = lines_of(texts["steps"])
    first, latest = orjson.loads(lines[0])["id"], orjson.loads(lines[first_index(lines, step=3)])["id"]
    older = "1e" + first[2:]  # made long (years) before the latest: a crash's
    racing = first[:-1] + ("0" if first[-1] != "0" else "1")  # made in the same second as the thread: a racing put's
    newer = "ffffffff" + latest[8:]
    for cid in (older, racing, newer):
        lines.append(orjson.dumps({"format": 1, "kind": "writes", "checkpoint": cid, "task": "t1",
                                   "path": "~__pregel_pull, a", "writes": [[0, "log", ["x"]]]}).decode())
    found = verify_thread("steps", joined(lines))
    assert codes(found) == [(len(lines) - 2, "orphan-writes"), (len(lines) - 1, "pending-put"), (len(lines), "pending-put")]
    assert [p.severity for p in found] == ["warning", "warning", "warning"]
    assert "made less than 300 s before the latest" in found[1].message
    assert f"1 pending write for checkpoint {older}, which was never stored (the latest is {latest}): a crash left" in found[0].message


def test_torn_last_line_is_a_warning_naming_its_line(texts) -> None:
    text = texts["ask"] + '{"format":1,"kind":"writes","checkp'
    found = verify_thread("ask", text)
    assert codes(found) == [(len(lines_of(texts["ask"])) + 1, "torn")]
    assert found[0].severity == "warning"
    assert "unterminated last line (35 characters)" in found[0].message


def test_duplicate_checkpoint_and_unloadable_value_are_warnings(texts) -> None:
    lines = lines_of(texts["steps"])
    doc = orjson.loads(lines[-1])
    lines.append(lines[0])
    doc_values = {**orjson.loads(lines[0]), "values": {"x": {"$model": {"class": ["my.app", "Secret"], "fields": {}}}}}
    lines.append(orjson.dumps({**doc_values, "id": "ffffffff" + doc["id"][8:] if "id" in doc else "z"}).decode())
    found = verify_thread("steps", joined(lines))
    assert codes(found)[:1] == [(len(lines) - 1, "duplicate")]
    assert (len(lines), "value") in codes(found)
    assert all(p.severity == "warning" for p in found)
    assert "not text" in found[-1].message


# --- the store -------------------------------------------------------------------------------


def test_store_report_names_foreign_files_and_torn_threads(tmp_path) -> None:
    store = FileStore(tmp_path)
    run_graphs(TelarSaver(store))
    (tmp_path / "notes.txt").write_text("not ours\n")
    with open(store.path("ask"), "a") as f:
        f.write('{"format":1')
    report = verify_store(store)
    assert report.foreign == ["notes.txt"]
    assert [p.code for p in report.threads["ask"]] == ["torn"]
    assert report.threads["steps"] == [] and report.ok  # warnings only
    assert {p.code for p in report.problems} == {"torn", "foreign"}


def test_store_report_fails_on_an_error_and_checks_only_named_threads(tmp_path) -> None:
    store = FileStore(tmp_path)
    run_graphs(TelarSaver(store))
    (tmp_path / "notes.txt").write_text("not ours\n")
    store.write("bad", "not json\n")
    report = verify_store(store)
    assert not report.ok and [(p.thread_id, p.code) for p in report.errors] == [("bad", "corrupt-line")]
    only = verify_store(store, ["steps"])
    assert list(only.threads) == ["steps"] and only.foreign == [] and only.ok
    with pytest.raises(ThreadNotFoundError, match="no thread 'nope'"):
        verify_store(store, ["nope"])


def test_every_code_has_a_severity_and_a_meaning() -> None:
    assert all(severity in ("error", "warning") and meaning for severity, meaning in CODES.values())


def test_verify_reports_the_temporary_files_killed_rewrites_left(tmp_path) -> None:
    import os
    import time

    from telar_checkpoint import FileStore
    from telar_checkpoint.verify import verify_store

    store = FileStore(tmp_path / "store")
    store.write("t", '{"format":1,"kind":"dropped","floor":null,"replaced":["x"]}\n')
    leftover = tmp_path / "store" / ".tmp" / "t.killed.part"
    leftover.parent.mkdir(exist_ok=True)
    leftover.write_text("half a rewrite")
    old = time.time() - 3600
    os.utime(leftover, (old, old))
    report = verify_store(store)
    assert report.ok and [p.code for p in report.problems] == ["stale-temp"]
    assert report.stale == [".tmp/t.killed.part"]
