"""The pure codec: golden files both ways, versions, projections, replacement and history depth."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from telar_checkpoint import (
    CheckpointCodec,
    CheckpointDroppedError,
    CheckpointRecord,
    CorruptLineError,
    ForeignDataError,
    UnknownFormatError,
    UsageError,
    WriteRecord,
)
from telar_checkpoint.history import History

GOLDEN = Path(__file__).parent / "golden"
codec = CheckpointCodec()


def record(n: int, parent: int | None, step: int, source: str = "loop", ns: str = "", root: int | None = None, **extra) -> CheckpointRecord:
    """A checkpoint whose id is `n` zero-padded (ids sort like LangGraph's uuid6)."""
    metadata = {"source": source, "step": step, "parents": {"": f"{root:08d}"} if root is not None else {}}
    metadata.update(extra.pop("metadata", {}))
    checkpoint = {
        "v": 4, "id": f"{n:08d}", "ts": f"2026-01-01T00:00:{n % 60:02d}+00:00",
        "channel_values": extra.pop("values", {"count": n}), "channel_versions": {"count": n},
        "versions_seen": {}, "updated_channels": None,
    }
    return CheckpointRecord(checkpoint, metadata, ns, f"{parent:08d}" if parent is not None else None, **extra)


def build(*records: CheckpointRecord, max_history: int | None = None) -> str:
    text = None
    for r in records:
        text = codec.append(text, r, max_history)
    return text or ""


def ids(text: str, ns: str | None = "") -> list[str]:
    return [r.id for r in codec.decode_history("t", text) if ns is None or r.checkpoint_ns == ns]


# --- golden files: the format cannot drift unnoticed ------------------------------------

GOLDEN_FILES = ["v1.jsonl", "v1-interrupt.jsonl", "v1-appended.jsonl", "v2.jsonl", "v2-nested.jsonl", "v3.jsonl"]
WITH_DROPPED = ("v1.jsonl", "v2.jsonl", "v3.jsonl")  # they hold dropped lines (deleted ids), which records do not carry


def as_written_now(golden: str) -> str:
    """`golden` as today's writer writes it: a development build's version 3 line as the version 1
    (root) or 2 (subgraph) line it stands for; every other line as it is."""
    out = []
    for line in golden.splitlines(keepends=True):
        if line.startswith('{"format":3'):
            line = '{"format":' + ("2" if "ns" in orjson.loads(line) else "1") + line[len('{"format":3'):]
        out.append(line)
    return "".join(out)


@pytest.mark.parametrize(
    "name, versions", [("v1-interrupt.jsonl", {1}), ("v2-nested.jsonl", {1, 2}), ("v1-appended.jsonl", {1})]
)
def test_golden_decodes_and_reencodes_exactly(name, versions) -> None:
    # The others hold dropped lines (deleted ids), which records do not carry: tests/test_format_versions.py.
    golden = (GOLDEN / name).read_text(encoding="utf-8")
    assert {orjson.loads(line)["format"] for line in golden.splitlines()} == versions
    records = codec.decode_history("g", golden)
    assert records and records[-1].metadata["source"] == "loop"
    assert codec.decode("g", golden) == max((r for r in records if not r.checkpoint_ns), key=lambda r: r.id)
    assert build(*records) == as_written_now(golden) == golden


def test_golden_v1_content_is_pinned() -> None:
    records = codec.decode_history("g", (GOLDEN / "v1-interrupt.jsonl").read_text(encoding="utf-8"))
    assert [(r.metadata["source"], r.metadata["step"]) for r in records] == [("input", -1), ("loop", 0), ("loop", 1)]
    assert records[1].checkpoint["channel_values"]["request"] == "golden"
    interrupts = [w for w in records[-1].writes if w.channel == "__interrupt__"]
    assert interrupts and interrupts[0].value[0].value == {"question": "approve golden?"}
    assert all(r.parent_id == p.id for r, p in zip(records[1:], records))


def test_golden_appended_lines_rebuild_the_growing_list() -> None:
    golden = (GOLDEN / "v1-appended.jsonl").read_text(encoding="utf-8")
    assert sum('"appended"' in line for line in golden.splitlines()) >= 3
    last = codec.decode("g", golden).checkpoint["channel_values"]["log"]
    assert last == ["a", "b", "c", "more", "a", "b", "c"]


@pytest.mark.parametrize("name", ["v2.jsonl", "v2-nested.jsonl"])
def test_golden_v2_lines_carry_namespace_and_parents(name) -> None:
    golden = (GOLDEN / name).read_text(encoding="utf-8")
    for line in map(orjson.loads, golden.splitlines()):
        assert (line["format"] == 2) == ("ns" in line)
        if line["format"] == 2 and line["kind"] == "checkpoint":
            assert line["parents"][""] and "parents" not in line["metadata"]
    sub = [r for r in codec.decode_history("g", golden) if r.checkpoint_ns]
    assert sub and all(r.metadata["parents"][""] for r in sub)


@pytest.mark.parametrize("name", GOLDEN_FILES)
def test_golden_truncated_anywhere_keeps_every_complete_line(name) -> None:
    golden = (GOLDEN / name).read_text(encoding="utf-8")
    for cut in range(0, len(golden), 97):
        truncated = golden[:cut]
        complete = truncated[: truncated.rfind("\n") + 1]
        assert codec.decode_history("g", truncated) == codec.decode_history("g", complete)
        assert History.parse("g", truncated).torn == (truncated[len(complete):] or None)


@pytest.mark.parametrize("name", GOLDEN_FILES)
def test_golden_with_junk_appended(name) -> None:
    golden = (GOLDEN / name).read_text(encoding="utf-8")
    n = golden.count("\n")
    with pytest.raises(CorruptLineError, match=rf"thread 'g', line {n + 1}: not valid JSON"):
        codec.decode_history("g", golden + "junk\n")
    # Junk without a newline is a torn last line: reported, dropped, nothing lost.
    assert codec.decode_history("g", golden + '{"format":1,"ki') == codec.decode_history("g", golden)
    # A torn tail is never written over: the next append rewrites without it.
    rebuilt = build(*codec.decode_history("g", golden))
    if name in WITH_DROPPED:  # a dropped line (deleted ids) is no record; writes come back in LangGraph's order
        assert codec.decode_history("g", rebuilt) == codec.decode_history("g", golden)
    else:
        assert rebuilt == as_written_now(golden)
    after = codec.append(golden + '{"form', record(99999999, None, 9))
    assert all(line.startswith('{"format":') and line.endswith("}") for line in after.split("\n")[:-1])
    # The new root checkpoint ends the golden's subgraph call (v2.jsonl, v3.jsonl): only that goes.
    kept = [r.id for r in codec.decode_history("g", golden) if ":" not in r.checkpoint_ns]
    assert [r.id for r in codec.decode_history("g", after)] == kept + ["99999999"]
    if name.startswith("v1"):
        assert after.startswith(golden)


# --- versions ---------------------------------------------------------------------------


def test_root_lines_are_version_1_and_subgraph_lines_version_2() -> None:
    text = build(record(1, None, 0), record(2, None, 0, ns="child:1", root=1))
    formats = [orjson.loads(line)["format"] for line in text.splitlines()]
    assert formats == [1, 2]
    assert orjson.loads(text.splitlines()[1])["ns"] == "child:1"


@pytest.mark.parametrize("version", [0, 4, 99, "1", 1.0, None, True])
def test_unknown_format_version_is_refused_with_thread_line_and_version(version) -> None:
    good = build(record(1, None, 0))
    line = orjson.loads(good)
    line["format"] = version
    bad = good + orjson.dumps(line).decode() + "\n"
    with pytest.raises(UnknownFormatError, match=rf"thread 't', line 2: has format version {version!r}"):
        codec.decode_history("t", bad)


def test_missing_format_version_is_refused() -> None:
    good = build(record(1, None, 0))
    line = orjson.loads(good)
    del line["format"]
    with pytest.raises(UnknownFormatError, match="thread 't', line 2: has no format version"):
        codec.decode_history("t", good + orjson.dumps(line).decode() + "\n")


def test_a_version_1_line_may_not_carry_a_namespace() -> None:
    line = orjson.loads(build(record(1, None, 0, ns="child:1", root=1)))
    line["format"] = 1
    with pytest.raises(CorruptLineError, match="line 1: a version 1 line has no namespace"):
        codec.decode_history("t", orjson.dumps(line).decode() + "\n")


def test_langgraph_checkpoint_v_is_kept_apart_from_our_format_version() -> None:
    r = record(1, None, 0)
    r.checkpoint["v"] = 7
    line = orjson.loads(build(r))
    assert line["format"] == 1 and line["checkpoint"]["v"] == 7
    assert codec.decode("t", build(r)).checkpoint["v"] == 7


def test_projections_are_ignored_on_read() -> None:
    text = build(record(1, None, 0), record(2, 1, 1))
    lines = [orjson.loads(line) for line in text.splitlines()]
    for line in lines:
        line["step"], line["source"] = 1000, "fork"
    edited = "".join(orjson.dumps(line).decode() + "\n" for line in lines)
    assert edited != text
    assert codec.decode_history("t", edited) == codec.decode_history("t", text)
    # Replacement follows the authoritative metadata, not the projection "fork".
    assert ids(codec.append(edited, record(3, 2, 2))) == ["00000001", "00000002", "00000003"]


def test_channel_versions_keep_their_json_type() -> None:
    r = record(1, None, 0)
    r.checkpoint["channel_versions"] = {"a": 3, "b": "00000000000000000000000000000002.0.5"}
    assert codec.decode("t", build(r)).checkpoint["channel_versions"] == r.checkpoint["channel_versions"]


def test_a_foreign_or_corrupt_first_line_is_an_error_not_an_empty_thread() -> None:
    with pytest.raises(CorruptLineError, match="thread 't', line 1"):
        codec.decode_history("t", "name,age\nann,3\n")
    with pytest.raises(CorruptLineError):
        codec.append("name,age\nann,3\n", record(1, None, 0))
    assert not issubclass(ForeignDataError, CorruptLineError)


def test_u2028_in_values_does_not_split_lines() -> None:
    r = record(1, None, 0, values={"text": "a\u2028b\u2029c\rd"})
    assert codec.decode("t", build(r)).checkpoint["channel_values"]["text"] == "a\u2028b\u2029c\rd"


# --- pending writes ---------------------------------------------------------------------


def test_writes_are_appended_and_folded_into_their_checkpoint() -> None:
    text = build(record(1, None, 0))
    after = codec.add_writes(text, "", "00000001", "task", [(0, "a", 1), (1, "b", [2])], "path")
    assert after.startswith(text) and after.count("\n") == 2
    (r,) = codec.decode_history("t", after)
    assert [(w.channel, w.value, w.task_path) for w in r.writes] == [("a", 1, "path"), ("b", [2], "path")]


def test_regular_writes_are_idempotent_and_special_ones_overwrite() -> None:
    text = codec.add_writes(build(record(1, None, 0)), "", "00000001", "task", [(0, "a", 1), (-1, "__error__", "x")])
    again = codec.add_writes(text, "", "00000001", "task", [(0, "a", 99)])
    assert again == text
    special = codec.add_writes(text, "", "00000001", "task", [(-1, "__error__", "y")])
    (r,) = codec.decode_history("t", special)
    assert {w.channel: w.value for w in r.writes} == {"a": 1, "__error__": "y"}


def test_writes_before_their_put_are_kept() -> None:
    text = codec.add_writes(build(record(1, None, 0)), "", "00000002", "task", [(0, "a", 1)])
    text = codec.append(text, record(2, 1, 1))
    latest = codec.decode("t", text)
    assert latest.id == "00000002" and [w.value for w in latest.writes] == [1]


def test_writes_come_back_in_writes_sort_key_order() -> None:
    text = build(record(1, None, 0))
    for task, path in [("b", "~p, 2"), ("a", "~p, 2"), ("c", "~p, 1")]:
        text = codec.add_writes(text, "", "00000001", task, [(1, "x", task), (0, "x", task)], path)
    order = [(w.task_path, w.task_id, w.idx) for w in codec.decode("t", text).writes]
    assert order == sorted(order)


def test_a_put_of_a_stored_id_updates_it_in_place_and_keeps_its_writes() -> None:
    text = codec.add_writes(build(record(1, None, 0), record(2, 1, 1)), "", "00000001", "task", [(0, "a", 1)])
    updated = record(1, None, 0, values={"count": "new"})
    text = codec.append(text, updated)
    first, second = codec.decode_history("t", text)
    assert first.checkpoint["channel_values"] == {"count": "new"} and [w.value for w in first.writes] == [1]
    assert second.id == "00000002"


# --- replacement: a history is the path that led to the current state ------------------------


def linear(n: int) -> list[CheckpointRecord]:
    """input (step -1) then loop steps 0..n-2, ids 1..n."""
    return [record(1, None, -1, "input")] + [record(i, i - 1, i - 2) for i in range(2, n + 1)]


def test_a_fork_drops_nothing_until_the_run_moves_on() -> None:
    base = build(*linear(5))  # ids 1..5, steps -1..3
    forked = codec.append(base, record(10, 3, 2, "fork"))  # replay from step 1 (id 3)
    assert ids(forked) == ["00000001", "00000002", "00000003", "00000004", "00000005", "00000010"]
    moved = codec.append(forked, record(11, 10, 3))
    assert ids(moved) == ["00000001", "00000002", "00000003", "00000010", "00000011"]


def test_several_forks_in_a_row_then_moving_on_drops_the_others() -> None:
    text = build(*linear(5))
    text = codec.append(text, record(10, 2, 1, "update"))  # travel to step 0
    text = codec.append(text, record(11, 3, 2, "fork"))  # then to step 1
    assert len(ids(text)) == 7
    text = codec.append(text, record(12, 11, 3))
    assert ids(text) == ["00000001", "00000002", "00000003", "00000011", "00000012"]
    with pytest.raises(CheckpointDroppedError, match="00000010 was replaced"):
        codec.find("t", codec.parse("t", text), "", "00000010")
    assert codec.find("t", codec.parse("t", text), "", "00000099") is None


def test_one_lookup_serves_the_saver_and_the_tools() -> None:
    """`CheckpointCodec.find` is the rule; `inspection.find_entry` only names a checkpoint never
    held (a saver's read returns None for it). Without a namespace, an id is looked for in all."""
    from telar_checkpoint.inspection import CheckpointNotFoundError, find_entry

    text = build(*linear(4), record(20, None, -1, "input", ns="child:x", root=4))
    text = codec.append(text, record(10, 2, 1, "update"))
    text = codec.append(text, record(11, 10, 2))  # drops 3 and 4
    history = codec.parse("t", text)
    assert codec.find("t", history, None, "00000020").line.ns == "child:x" == find_entry("t", history, "00000020").line.ns
    assert codec.find("t", history, "", "00000020") is None
    assert codec.find("t", history, None, None).line.id == "00000011" == find_entry("t", history, None).line.id
    for ns in ("", None):
        with pytest.raises(CheckpointDroppedError, match="00000003 was replaced"):
            codec.find("t", history, ns, "00000003")
        with pytest.raises(CheckpointDroppedError, match="00000003 was replaced"):
            find_entry("t", history, "00000003", ns)
        assert codec.find("t", history, ns, "00000099") is None
        with pytest.raises(CheckpointNotFoundError, match="no checkpoint 00000099"):
            find_entry("t", history, "00000099", ns)


def test_update_on_the_head_then_moving_on_drops_nothing() -> None:
    text = build(*linear(4), record(10, 4, 3, "update"), record(11, 10, 4))
    assert ids(text) == ["00000001", "00000002", "00000003", "00000004", "00000010", "00000011"]


def test_copy_whose_parent_is_the_copied_checkpoints_parent() -> None:
    # __copy__ of the head (id 4, step 2): a fork with the head's parent (id 3) and step 3.
    text = build(*linear(4), record(10, 3, 3, "fork"), record(11, 10, 4, "input"))
    assert ids(text) == ["00000001", "00000002", "00000003", "00000010", "00000011"]


def test_an_update_on_an_update_finds_the_branch_point_above_both() -> None:
    text = build(*linear(5), record(10, 3, 2, "update"), record(11, 10, 3, "update"), record(12, 11, 4))
    assert ids(text) == ["00000001", "00000002", "00000003", "00000010", "00000011", "00000012"]


def test_a_put_whose_parent_is_not_stored_drops_nothing() -> None:
    text = build(*linear(3), record(10, 2, 0, "fork"), record(11, 77, 1))
    assert len(ids(text)) == 5


def test_a_fork_whose_own_parent_is_gone_replaces_from_its_own_step() -> None:
    text = build(*linear(4), record(10, 77, 1, "fork"), record(11, 10, 2))
    assert ids(text) == ["00000001", "00000002", "00000010", "00000011"]


def test_a_subgraph_call_ends_when_the_root_stores_a_checkpoint_after_it() -> None:
    text = build(*linear(4), record(20, None, -1, "input", ns="child:x", root=4), record(21, 20, 0, ns="child:x", root=4))
    assert ids(text, "child:x") == ["00000020", "00000021"]  # paused inside the call: kept
    text = codec.append(text, record(30, 3, 2, "fork"))  # a root checkpoint after the call: it is over
    assert ids(text, "child:x") == [] and '"format":2' not in text
    text = codec.append(text, record(31, 30, 3))
    assert ids(text) == ["00000001", "00000002", "00000003", "00000030", "00000031"]


def test_a_call_put_before_its_root_checkpoint_stays() -> None:
    """Writes arrive out of order (async durability): a call under a newer root checkpoint is live."""
    text = build(*linear(4), record(20, None, -1, "input", ns="child:x", root=5))
    assert ids(text, "child:x") == ["00000020"]
    text = codec.append(text, record(5, 4, 3))
    assert ids(text, "child:x") == ["00000020"]


def test_a_call_a_replay_runs_under_an_old_checkpoint_stays() -> None:
    """langgraph 1.0 replays a step without storing a fork: the call runs under an old checkpoint."""
    text = build(*linear(6), record(20, None, -1, "input", ns="child:x", root=3))
    assert ids(text, "child:x") == ["00000020"]


def test_a_persistent_subgraph_keeps_its_state_whatever_the_root_does() -> None:
    """`checkpointer=True` subgraphs (no task id in the namespace) are read again on later calls."""
    text = build(*linear(4), record(20, None, -1, "input", ns="child", root=4), record(21, 20, 0, ns="child", root=4))
    text = codec.append(text, record(10, 3, 2, "fork"))
    text = codec.append(text, record(11, 10, 3))
    assert ids(text, "child") == ["00000020", "00000021"]
    text = build(*codec.decode_history("t", text), *(record(i, i - 1 if i > 12 else 11, i) for i in range(12, 40)), max_history=2)
    assert ids(text) == ["00000038", "00000039"] and ids(text, "child") == ["00000020", "00000021"]


# --- history depth ----------------------------------------------------------------------


def test_max_history_keeps_the_last_n_root_checkpoints() -> None:
    text = build(*linear(30), max_history=5)
    assert ids(text) == [f"{i:08d}" for i in range(26, 31)]
    with pytest.raises(CheckpointDroppedError, match="00000003 was trimmed"):
        codec.find("t", codec.parse("t", text), "", "00000003")


def test_max_history_bounds_the_whole_thread_across_namespaces() -> None:
    records = []
    for i in range(1, 41):
        records.append(record(i * 10, (i - 1) * 10 if i > 1 else None, i))
        # Every root step runs a subgraph in a namespace of its own, of 3 checkpoints.
        for j in range(3):
            records.append(record(i * 10 + j + 1, i * 10 + j if j else None, j, ns=f"child:{i}", root=i * 10))
    text = build(*records, max_history=4)
    history = codec.decode_history("t", text)
    assert [r.id for r in history if not r.checkpoint_ns] == ["00000370", "00000380", "00000390", "00000400"]
    # Each call ends when the root moves on: only the last one's namespace is left.
    assert {r.checkpoint_ns for r in history if r.checkpoint_ns} == {"child:40"}
    assert len(history) <= 4 + 3


def test_max_history_cuts_each_subgraph_namespace_to_its_last_n() -> None:
    records = [record(1, None, 0)] + [record(i, i - 1 if i > 2 else None, i, ns="child:a", root=1) for i in range(2, 12)]
    text = build(*records, max_history=3)
    assert ids(text, "child:a") == ["00000009", "00000010", "00000011"]


def test_trimming_keeps_the_ancestors_a_delta_channel_needs() -> None:
    records = [record(1, None, 0, values={"msgs": "snapshot"})]
    for i in range(2, 12):
        counters = {"msgs": [i - 1, i - 1]}
        records.append(record(i, i - 1, i - 1, values={}, metadata={"counters_since_delta_snapshot": counters}))
    text = build(*records, max_history=3)
    # The oldest kept checkpoint rebuilds "msgs" from the snapshot at id 1: all its ancestors stay.
    assert ids(text)[0] == "00000001"
    records.append(record(12, 11, 11, values={"msgs": "snapshot 2"}))
    records.append(record(13, 12, 12, values={}, metadata={"counters_since_delta_snapshot": {"msgs": [1, 1]}}))
    # Once the kept checkpoints no longer need the old snapshot, its chain goes.
    text = build(*records, max_history=2)
    assert ids(text) == ["00000012", "00000013"]


@pytest.mark.parametrize("bad", [0, -1, 1.5, "3", True, False])
def test_max_history_must_be_a_positive_integer(bad) -> None:
    with pytest.raises(UsageError, match="max_history must be a positive integer"):
        codec.append(None, record(1, None, 0), bad)


def test_encode_is_one_line_and_a_history_can_be_copied_to_another_thread() -> None:
    r = record(1, None, 0, writes=[WriteRecord("task", "a", 1, "p", 0)])
    text = codec.encode(r)
    assert text.count("\n") == 2 and "thread" not in orjson.loads(text.splitlines()[0])
    assert codec.decode("other", text) == codec.decode("t", text) == r


# --- lists that only grew are written as what was appended ---------------------------------


def grow(n: int, parent: int | None, items: list) -> CheckpointRecord:
    return record(n, parent, n, values={"msgs": items, "count": n})


def test_a_list_that_only_grew_is_stored_as_its_new_items() -> None:
    text = build(grow(1, None, ["a"]), grow(2, 1, ["a", "b"]), grow(3, 2, ["a", "b", "c", "d"]))
    lines = [orjson.loads(line) for line in text.splitlines()]
    assert "msgs" in lines[0]["values"] and "appended" not in lines[0]
    assert lines[1]["appended"] == {"msgs": ["b"]} and lines[2]["appended"] == {"msgs": ["c", "d"]}
    assert [r.checkpoint["channel_values"]["msgs"] for r in codec.decode_history("t", text)] == [
        ["a"], ["a", "b"], ["a", "b", "c", "d"]
    ]


@pytest.mark.parametrize("changed", [["x", "b"], ["a"], [], [1.0, "b"], "a b"])
def test_a_list_that_changed_otherwise_is_stored_whole(changed) -> None:
    text = build(grow(1, None, [1, "b"] if isinstance(changed, list) and changed[:1] == [1.0] else ["a", "b"]), grow(2, 1, changed))
    second = orjson.loads(text.splitlines()[1])
    assert "appended" not in second and second["values"]["msgs"] == changed
    assert codec.decode("t", text).checkpoint["channel_values"]["msgs"] == changed


def test_trimming_appends_floors_and_a_rewrite_writes_a_kept_line_whole_when_its_base_goes() -> None:
    records = [grow(i, i - 1 if i > 1 else None, [f"m{j}" for j in range(i)]) for i in range(1, 12)]
    text = build(*records, max_history=3)
    # Each trim appended a floor instead of rewriting: the lines of 1..8 are still stored...
    kinds = [orjson.loads(line)["kind"] for line in text.splitlines()]
    assert kinds[:4] == ["checkpoint"] * 4 and kinds.count("checkpoint") == 11 and kinds[-1] == "dropped"
    assert text.startswith(build(*records[:4], max_history=3))
    # ...but read as trimmed, and the kept ones still read through the lines they extend.
    assert ids(text) == ["00000009", "00000010", "00000011"]
    assert [len(r.checkpoint["channel_values"]["msgs"]) for r in codec.decode_history("t", text)] == [9, 10, 11]
    with pytest.raises(CheckpointDroppedError, match="trimmed"):
        codec.find("t", codec.parse("t", text), "", "00000005")
    # A rewrite keeps only what is read, so the first kept line is written whole.
    compact = codec.trim(text, 3)
    first = orjson.loads(compact.splitlines()[1])  # after the dropped line
    assert first["id"] == "00000009" and first["values"]["msgs"] == [f"m{j}" for j in range(9)]
    assert "appended" in orjson.loads(compact.splitlines()[2])
    assert len(compact.splitlines()) == 4
    assert [r.checkpoint for r in codec.decode_history("t", compact)] == [r.checkpoint for r in codec.decode_history("t", text)]
    # A fork from id 5 that moves on drops 6..11; nothing kept may point at them.
    text = build(*records)
    text = codec.append(text, record(20, 5, 5, "fork", values={"msgs": [f"m{j}" for j in range(5)], "count": 0}))
    text = codec.append(text, grow(21, 20, [f"m{j}" for j in range(5)] + ["new"]))
    assert codec.decode("t", text).checkpoint["channel_values"]["msgs"][-2:] == ["m4", "new"]


def test_appended_lines_chain_at_most_max_chain_deep() -> None:
    from telar_checkpoint.compaction import MAX_CHAIN

    records = [grow(i, i - 1 if i > 1 else None, list(range(i))) for i in range(1, 2 * MAX_CHAIN + 4)]
    text = build(*records)
    whole = [i for i, line in enumerate(text.splitlines()) if "msgs" in orjson.loads(line)["values"]]
    assert whole == [0, MAX_CHAIN + 1, 2 * MAX_CHAIN + 2]
    assert codec.decode("t", text).checkpoint["channel_values"]["msgs"] == list(range(2 * MAX_CHAIN + 3))


def test_an_appended_line_without_its_base_is_refused() -> None:
    text = build(grow(1, None, ["a"]), grow(2, 1, ["a", "b"]))
    with pytest.raises(CorruptLineError, match="line 1: builds on the values of checkpoint 00000001"):
        codec.decode_history("t", text.split("\n", 1)[1])


def test_an_appended_channel_its_base_does_not_hold_is_refused() -> None:
    text = build(grow(1, None, ["a"]), grow(2, 1, ["a", "b"]))
    lines = text.splitlines()
    second = orjson.loads(lines[1])
    second["appended"] = {"other": ["x"]}
    with pytest.raises(CorruptLineError, match="line 2: appends to channel 'other' of checkpoint 00000001"):
        codec.decode_history("t", lines[0] + "\n" + orjson.dumps(second).decode() + "\n")


@pytest.mark.parametrize(
    "field, value",
    [("parents", {"": ["not", "an", "id"]}), ("parents", [1]), ("counters_since_delta_snapshot", [["msgs", 1]])],
)
def test_rule_fields_of_the_wrong_type_are_corrupt_lines(field, value) -> None:
    """Found by fuzzing: a v2 'parents' holding a list made trimming raise TypeError."""
    sub = orjson.loads(build(record(1, None, 0), record(2, None, 0, ns="child:a", root=1)).splitlines()[1])
    if field == "parents":
        sub["parents"] = value
    else:
        sub["metadata"][field] = value
    text = build(record(1, None, 0)) + orjson.dumps(sub).decode() + "\n"
    with pytest.raises(CorruptLineError, match="thread 't', line 2"):
        codec.decode_history("t", text)
    with pytest.raises(CorruptLineError):
        codec.append(text, record(3, 1, 1), 1)


def test_remove_runs_ignores_a_run_id_that_is_not_text() -> None:
    text = build(record(1, None, 0, metadata={"run_id": ["x"]}), record(2, 1, 1, metadata={"run_id": "r"}))
    assert ids(codec.remove_runs(text, {"r"})) == ["00000001"]


# --- parent links: never a cycle written, every walk ends on one stored by hand ------------


def test_a_checkpoint_cannot_be_its_own_ancestor() -> None:
    with pytest.raises(UsageError, match="00000001 cannot be its own ancestor"):
        codec.append(None, record(1, 1, 0))
    text = build(record(1, None, 0), record(2, 1, 1))
    with pytest.raises(UsageError, match="00000001 cannot be its own ancestor"):
        codec.append(text, record(1, 2, 0))  # put again in place, under its own child


def test_every_walk_of_parent_links_ends_on_a_cycle_edited_in_by_hand() -> None:
    text = build(record(1, None, 0), record(2, 1, 1), record(3, 2, 2, "fork"))
    cycled = text.replace('"id":"00000001","parent":null', '"id":"00000001","parent":"00000002"')
    assert cycled != text
    history = codec.parse("t", cycled)
    assert history.parent_chain("", "00000003") == ["00000003", "00000002", "00000001"]
    moved = codec.append(cycled, record(4, 3, 3))  # moves on from a fork: looks for branches
    assert ids(moved) == ["00000001", "00000002", "00000003", "00000004"]
    delta = {"counters_since_delta_snapshot": {"msgs": [1, 1]}}
    assert ids(codec.append(cycled, record(4, 3, 3, values={}, metadata=delta), 1))[-1] == "00000004"
    assert ids(codec.keep_latest(cycled)) == ["00000003"]


def test_delta_channel_history_ends_on_a_cycle_edited_in_by_hand() -> None:
    from telar_checkpoint import MemoryStore, TelarSaver

    text = build(record(1, None, 0, values={}), record(2, 1, 1, values={}), record(3, 2, 2, values={}))
    saver = TelarSaver(MemoryStore())
    saver.store.write("t", text.replace('"id":"00000001","parent":null', '"id":"00000001","parent":"00000003"'))
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": "00000003"}}
    assert saver.get_delta_channel_history(config=config, channels=["msgs"]) == {"msgs": {"writes": []}}


def test_a_rewrite_drops_the_writes_a_crash_left_for_a_checkpoint_never_stored() -> None:
    """Writes of a checkpoint that was never put (the process died) are older than the latest
    checkpoint once the thread resumed; writes that come before their own put are newer."""
    text = build(record(1, None, 0), record(2, 1, 1))
    text = codec.add_writes(text, "", "00000003", "lost", [(0, "count", 9)])  # killed before put 3
    text = codec.add_writes(text, "", "00000005", "early", [(0, "count", 5)])  # put 5 not there yet
    text = codec.append(text, record(4, 2, 2))  # resumed from 2
    assert codec.parse("t", text).crash_residue() == [("", "00000003")]
    rewritten = codec.append(text, record(2, 1, 1))  # an update in place rewrites the history
    assert '"task":"lost"' not in rewritten and '"task":"early"' in rewritten
    assert [w.task_id for w in codec.decode_history("t", codec.append(rewritten, record(5, 4, 3)))[-1].writes] == ["early"]


def test_blank_lines_hold_nothing_and_are_skipped() -> None:
    text = build(record(1, None, 0), record(2, 1, 1))
    blanked = "\n" + text.replace("\n", "\n  \n", 1) + "\n"
    assert [r.id for r in codec.decode_history("t", blanked)] == ["00000001", "00000002"]
    assert codec.append(blanked, record(2, 1, 1)) == text  # a rewrite drops them


@pytest.mark.parametrize("version", ["1", 1.0, None, True])
def test_a_format_version_that_is_not_an_integer_is_named_as_such(version) -> None:
    line = orjson.loads(build(record(1, None, 0)))
    line["format"] = version
    expected = rf"format version {version!r}, a {type(version).__name__}: a format version is an integer"
    with pytest.raises(UnknownFormatError, match=expected):
        codec.decode_history("t", orjson.dumps(line).decode() + "\n")


# --- size: a value that did not change is not stored again; trimming bounds characters too ----


def big(n: int, parent: int | None, blob: str, version: int) -> CheckpointRecord:
    """A checkpoint holding `blob` in a dict channel at `version` (the same version: unchanged)."""
    rec = record(n, parent, n)
    rec.checkpoint["channel_values"] = {"doc": {"text": blob}, "count": n}
    rec.checkpoint["channel_versions"] = {"doc": version, "count": n}
    return rec


def test_a_value_whose_version_did_not_change_is_stored_as_a_reference() -> None:
    blob = "x" * 100_000
    text = build(big(1, None, blob, 1), big(2, 1, blob, 1), big(3, 2, blob, 1))
    assert text.count(blob) == 1 and text.count('"doc":{"$same":null}') == 2
    assert [r.checkpoint["channel_values"]["doc"] for r in codec.decode_history("t", text)] == [{"text": blob}] * 3
    changed = codec.append(text, big(4, 3, blob + "y", 2))
    assert changed.count(blob) == 2  # a new version is stored whole


def test_a_reference_whose_base_is_trimmed_is_written_whole_by_the_rewrite() -> None:
    blob = "x" * 100_000
    text = build(*(big(i, i - 1 if i > 1 else None, blob, 1) for i in range(1, 8)), max_history=3)
    assert [r.id for r in codec.decode_history("t", text)] == ["00000005", "00000006", "00000007"]
    assert all(r.checkpoint["channel_values"]["doc"] == {"text": blob} for r in codec.decode_history("t", text))
    rewritten = codec.parse("t", text).clone().render()
    assert rewritten.count(blob) == 1 and rewritten.count("$same") == 2
    assert codec.decode_history("t", rewritten) == codec.decode_history("t", text)


def test_a_reference_without_a_parent_is_a_corrupt_line() -> None:
    line = orjson.loads(build(record(1, None, 0)))
    line["values"]["count"] = {"$same": None}
    with pytest.raises(CorruptLineError, match=r"line 1: a value \$same needs a parent checkpoint"):
        codec.decode_history("t", orjson.dumps(line).decode() + "\n")


@pytest.mark.parametrize("changing", [False, True])
def test_max_history_bounds_the_stored_characters_not_only_the_lines(changing) -> None:
    """Issue 19: with large values, the slack of amortized trimming is bounded by size too."""
    blob = "x" * 200_000
    text, largest = None, 0
    for i in range(1, 121):
        value = blob[:-1] + str(i % 10) if changing else blob
        text = codec.append(text, big(i, i - 1 if i > 1 else None, value, i if changing else 1), 3)
        largest = max(largest, len(text))
    kept = 3 if changing else 1  # values held whole by the three kept checkpoints
    assert largest <= 2 * kept * len(blob) + 2 * 256 * 1024 + len(blob), largest


def test_a_loop_closed_by_a_checkpoint_named_as_a_parent_before_it_was_stored_is_refused() -> None:
    """An import puts lines in stored order: A names B as its parent before B comes."""
    text = build(record(1, 2, 0))  # 1's parent, 2, is not stored yet
    with pytest.raises(UsageError, match="00000002 cannot be its own ancestor"):
        codec.append(text, record(2, 1, 1))
    assert ids(codec.append(text, record(2, None, 1))) == ["00000001", "00000002"]


def test_verify_reports_a_loop_of_parent_links() -> None:
    from telar_checkpoint.verify import verify_thread

    text = build(record(1, None, 0), record(2, 1, 1), record(3, 2, 2))
    looped = text.replace('"id":"00000001","parent":null', '"id":"00000001","parent":"00000003"')
    found = [p for p in verify_thread("t", looped) if p.code == "cycle"]
    assert sorted(p.line for p in found) == [1, 2, 3] and all(p.severity == "error" for p in found)
    assert verify_thread("t", text) == []


def test_writes_that_arrive_after_their_checkpoint_was_dropped_are_not_stored() -> None:
    text = build(*linear(6), max_history=2)
    assert codec.add_writes(text, "", "00000002", "late", [(0, "count", 1)]) == text  # trimmed
    forked = build(*linear(4), record(10, 2, 1, "fork"), record(11, 10, 2))
    assert codec.add_writes(forked, "", "00000004", "late", [(0, "count", 1)]) == forked  # replaced
    assert codec.add_writes(forked, "", "00000099", "early", [(0, "count", 1)]) != forked  # not put yet


def _nested(depth: int) -> dict:
    value: dict = {}
    for _ in range(depth):
        value = {"x": value}
    return value


@pytest.mark.parametrize(
    "where, field, value, message",
    [
        ("metadata", "deep", _nested(300), "field 'metadata' is nested more than 200 levels deep"),
        ("checkpoint", "channel_versions", {"count": [1]}, "checkpoint.channel_versions should map channels to versions"),
        ("checkpoint", "versions_seen", [], "checkpoint.versions_seen should map nodes to channel versions"),
        ("checkpoint", "updated_channels", 3, "checkpoint.updated_channels should be a list of channel names or null"),
        ("checkpoint", "v", None, "checkpoint.v .LangGraph's checkpoint version. should be an integer"),
        ("metadata", "step", "3", "metadata 'step' should be an integer"),
    ],
)
def test_shapes_a_reader_cannot_take_are_corrupt_lines_naming_the_field(where, field, value, message) -> None:
    """Issue 19: verify and import passed these, and reads then failed or misread."""
    line = orjson.loads(build(record(1, None, 0)))
    if value is None:
        del line[where][field]
    else:
        line[where][field] = value
    text = json.dumps(line) + "\n"  # orjson writes 255 levels at most; a hand or tool may write more
    with pytest.raises(CorruptLineError, match=rf"thread 't', line 1: {message}"):
        codec.decode_history("t", text)
    from telar_checkpoint.verify import verify_thread

    assert [p.code for p in verify_thread("t", text)] == ["corrupt-line"]


def test_the_codec_keeps_nothing_between_calls() -> None:
    """Strings in, strings out: no memo of what it parsed (the saver keeps the caches), so a
    history it returns is never shared with a later call, and the same input gives the same text."""
    codec = CheckpointCodec()
    text = codec.append(codec.append(None, record(1, None, 0), thread_id="t"), record(2, 1, 1), thread_id="t")
    first, second = codec.parse("t", text), codec.parse("t", text)
    assert first is not second and first.render() == second.render() == text
    second.drop({("", "00000001")})
    assert codec.parse("t", text).render() == text
    assert codec.append(text, record(3, 2, 2), thread_id="t") == codec.append(text, record(3, 2, 2), thread_id="t")
    assert set(vars(codec)) == {"values", "keep_finished_subgraphs"}
