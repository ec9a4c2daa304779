"""Stored data is input from whoever wrote it: reading a thread costs time linear in its size
(issue "Stored data as an attacker's input, round two", item 3), and so does deleting runs.

The cost is counted, not timed: the Python calls a read makes, under a profile hook, for a thread
and for one four times as large. Quadratic work (a pass over the history for each `dropped` line,
a list searched for each id) makes the second count sixteen times the first; linear work, four.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from telar_checkpoint.format import CheckpointLine, DroppedLine, WritesLine, write_checkpoint, write_dropped, write_writes
from telar_checkpoint.history import History


def calls(work: Callable[[], object]) -> int:
    count = 0

    def hook(frame: object, event: str, arg: object) -> None:
        nonlocal count
        if event == "call":
            count += 1

    sys.setprofile(hook)
    try:
        work()
    finally:
        sys.setprofile(None)
    return count


def checkpoint(i: int, run: str = "run") -> str:
    metadata = {"source": "loop", "step": i, "run_id": run}
    plain = {"v": 4, "ts": "t", "channel_versions": {}, "versions_seen": {}}
    return write_checkpoint(CheckpointLine("", f"{i:08d}", f"{i - 1:08d}" if i else None, metadata, plain, {}, {}))


def hostile(n: int) -> str:
    """`n` checkpoints, `n` orphan writes (for checkpoints never stored) and `2n` dropped lines,
    each with a floor and a list of replaced ids: what a file of repeated appends can hold."""
    lines = [checkpoint(i) for i in range(n)]
    lines += [write_writes(WritesLine("", f"9{i:07d}", "task", "", [(0, "c", 1)])) for i in range(n)]
    lines += [write_dropped(DroppedLine("", "00000001", [f"r{j:07d}" for j in range(40)])) for _ in range(2 * n)]
    return "".join(line + "\n" for line in lines)


def test_reading_many_dropped_lines_costs_what_they_hold() -> None:
    small, large = hostile(150), hostile(600)
    assert len(History.parse("t", large).entries) == 599  # the floor trimmed one
    ratio = calls(lambda: History.parse("t", large)) / calls(lambda: History.parse("t", small))
    assert ratio < 5, f"reading four times the lines costs {ratio:.1f} times the calls"


def test_deleting_runs_beside_long_records_of_dropped_ids_is_linear() -> None:
    """`delete_for_runs` lists the ids it deletes and keeps the newest 1,000 of the thread: the
    ids over the bound go in one pass, not one pass over every record for each id."""
    from telar_checkpoint import CheckpointCodec
    from telar_checkpoint.rules import REPLACED_IDS_KEPT

    def thread(namespaces: int) -> str:
        records = [
            write_dropped(DroppedLine(f"sub:{k}", None, [f"r{k:05d}{j:03d}" for j in range(20)], [f"d{k:05d}{j:03d}" for j in range(20)]))
            for k in range(namespaces)
        ]
        return "".join(line + "\n" for line in records + [checkpoint(i, f"run-{i % 3}") for i in range(60)])

    codec = CheckpointCodec()
    small, large = thread(150), thread(600)
    after = History.parse("t", codec.remove_runs(large, {"run-1"}) or "")
    assert sum(len(d.deleted) for d in after.dropped.values()) == REPLACED_IDS_KEPT
    ratio = calls(lambda: codec.remove_runs(large, {"run-1"})) / calls(lambda: codec.remove_runs(small, {"run-1"}))
    assert ratio < 5, f"four times the ids cost {ratio:.1f} times the calls"
