"""The benchmark harness runs end to end at tiny sizes (no timing is checked, only that numbers came out)."""

from __future__ import annotations

import dataclasses
import json
import operator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Send

from benchmarks import run as bench
from benchmarks.agent import agent_builder, human
from benchmarks.contenders import FLOOR, NoSerde
from benchmarks.workloads import MICRO_OPS, SCALE_OPS

LOCAL = ["InMemorySaver", FLOOR, "SqliteSaver", "Telar/memory", "Telar/file", "Telar/sqlite"]
TINY = dataclasses.replace(
    bench.QUICK, turns=3, turn_budget_s=60.0, micro_rounds=3, long_chat_messages=20, long_chat_rounds=3,
    scale_levels=(2, 25), scale_repeats=2,
    workers=2, worker_turns=2, concurrency_rounds=1,
)  # fmt: skip


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def test_quick_run_measures_every_workload_for_every_saver(tmp_path: Path) -> None:
    results = bench.run(TINY, LOCAL, tmp_path / "results", data_dir=str(tmp_path), command="smoke")

    assert results["contenders"] == LOCAL and not results["skipped"]
    for name in LOCAL:
        loop = results["agent_loop"][name]
        assert loop["turns"] == TINY.turns
        assert _number(loop["overhead_ms"]["median"]) and _number(loop["overhead_ms"]["p95"])
        assert all(_number(results["micro"][name][op]["median"]) for op in MICRO_OPS)
        variants = results["scaling"][name]
        assert ("max_history=20" in variants) == name.startswith("Telar/")
        for by_level in variants.values():
            assert sorted(by_level, key=int) == ["2", "25"]
            assert all(_number(by_level[level][op]["median"]) for level in by_level for op in SCALE_OPS)
        chat = results["long_chat"][name]
        assert chat["put_us"]["n"] == TINY.long_chat_rounds and _number(chat["put_us"]["median"])
        assert chat["messages"] == [TINY.long_chat_messages + 1, TINY.long_chat_messages + TINY.long_chat_rounds]
        if name == FLOOR:  # serializes nothing: no bytes to weigh
            assert name not in results["storage"]
        else:
            storage = results["storage"][name]
            assert storage["checkpoints"] == 5 * TINY.turns  # input + 4 steps per turn
            assert _number(storage["per_checkpoint"]) and storage["per_checkpoint"] > 0
        assert _number(results["concurrency"][name]["invokes_per_s"])
    assert results["agent_loop"]["baseline"]["invoke_ms"]["n"] == TINY.turns
    assert results["targets"] and all({"goal", "ratio", "met"} <= set(t) for t in results["targets"])
    goals = {t["goal"]: t for t in results["targets"]}
    for goal, limit in [
        ("memory store per-invoke overhead vs InMemorySaver's", "<= 0.75"),
        ("put of a chat of 10 messages, memory store vs InMemorySaver (inside the full benchmark)", "<= 2.0"),
        ("put of a chat of 1,000 messages growing by one a put, memory store vs InMemorySaver", "<= 0.5"),
        ("Telar/file bytes stored per checkpoint vs SqliteSaver's", "<= 0.1"),
        ("8 worker threads on one file store vs SqliteSaver, throughput", ">= 1.2"),
    ]:
        assert goals[goal]["limit"] == limit and _number(goals[goal]["ratio"])
    assert results["floor"]["saver"] == FLOOR and results["floor"]["detail"] != "not measured"

    written = json.loads((tmp_path / "results" / "latest.json").read_text())
    assert written["contenders"] == LOCAL
    table = (tmp_path / "results" / "latest.md").read_text()
    assert "## Targets" in table and all(name in table for name in LOCAL)
    assert "LangGraph's own floor" in table and "## 2b. put of a long chat" in table


def _runs(saver: BaseCheckpointSaver[Any]) -> list[Any]:
    """What a saver leaves seen from the graphs: the agent loop's history, a Send fan-out's results and history."""

    class Fan(TypedDict):
        items: list[int]
        done: Annotated[list[int], operator.add]

    agent = agent_builder().compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "agent"}}
    for turn in range(4):
        agent.invoke({"messages": [human(turn)]}, config)  # type: ignore[arg-type]
    fan = StateGraph(Fan)
    fan.add_node("work", lambda s: {"done": [s["x"] * 2]})  # type: ignore[arg-type, index]
    fan.add_conditional_edges(START, lambda s: [Send("work", {"x": i}) for i in s["items"]])
    fan.add_edge("work", END)
    sends = fan.compile(checkpointer=saver)
    fan_config = {"configurable": {"thread_id": "fan"}}
    outs = [sends.invoke({"items": [1, 2, 3]}, fan_config, durability=d) for d in ("sync", "async", "exit")]  # type: ignore[arg-type]
    return [
        [(_plain(s.values), s.next, s.metadata["step"]) for s in agent.get_state_history(config)],  # type: ignore[arg-type, index]
        outs,
        [(s.values, s.next, s.metadata["step"]) for s in sends.get_state_history(fan_config)],  # type: ignore[arg-type, index]
    ]


def _plain(values: dict[str, Any]) -> list[tuple[str, Any]]:
    """Messages without their ids, which are random."""
    return [(m.type, m.content) for m in values.get("messages", [])]


def test_the_floor_runs_graphs_as_in_memory_saver_does() -> None:
    assert _runs(InMemorySaver(serde=NoSerde())) == _runs(InMemorySaver())


def test_scale_quick_run_times_every_operation_on_memory_and_sqlite(tmp_path: Path) -> None:
    from benchmarks import scale

    names = ["Telar/memory", "Telar/sqlite", "InMemorySaver", "SqliteSaver"]
    argv = ["--quick", "--levels", "10,30", "--reps", "2", "--only", ",".join(names), "--out", str(tmp_path), "--data-dir", str(tmp_path)]
    assert scale.main(argv) == 0

    results = json.loads((tmp_path / "scale.json").read_text())
    assert list(results["savers"]) == names and not results["runs"][0]["skipped"]
    for name, entry in results["savers"].items():
        assert sorted(entry["fill"], key=int) == ["10", "30"] and not entry["notes"]
        for op in scale.OPS:
            for cell in entry["ops"][op].values():
                if op == "delete_for_runs" and not name.startswith("Telar/"):
                    assert "NotImplementedError" in cell["unsupported"]
                else:
                    assert _number(cell["median_s"]) and len(cell["seconds"]) == 2 and not cell.get("timed_out")
    table = (tmp_path / "scale.md").read_text()
    assert all(f"| {name} | get_tuple |" in table for name in names)


def test_ab_runs_an_experiment_with_its_control(tmp_path: Path) -> None:
    from benchmarks import ab

    ab.main(["histories", "--stores", "memory,file", "--runs", "2", "--turns", "2", "--out", str(tmp_path)])
    stored = json.loads((tmp_path / "ab.json").read_text())["histories"]
    for store in ("memory", "file"):
        result = stored["results"][store]
        assert len(result["runs"]) == 2
        for run in result["runs"]:
            assert all(_number(run["overhead_ms"][name]) for name in ("A", "A'", "B"))
            assert _number(run["noise"]) and _number(run["effect"])
        assert result["summary"]["verdict"] in ("as shipped", "switch", "noise")
    assert "## histories" in (tmp_path / "ab.md").read_text()


def test_ab_replicas_serve_a_thread_in_turn(tmp_path: Path) -> None:
    """`texts-replicas`: each contender is two savers on one store, and the invokes of the
    thread alternate between them (so each finds the thread moved on by the other)."""
    from benchmarks import ab
    from telar_checkpoint import TelarSaver
    from telar_checkpoint.stores import MemoryStore

    store = MemoryStore()
    replicas = ab.Replicas(TelarSaver(store), TelarSaver(store))
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    served = []
    for _ in range(4):
        replicas.get_tuple(config)
        served.append(replicas.saver)
    assert served == [replicas.replicas[1], replicas.replicas[0]] * 2

    ab.main(["texts-replicas", "--stores", "memory", "--runs", "1", "--turns", "2", "--out", str(tmp_path)])
    run = json.loads((tmp_path / "ab.json").read_text())["texts-replicas"]["results"]["memory"]["runs"][0]
    assert run["B"] == "two replicas, no text kept" and _number(run["effect"])


def test_interleaving_times_the_put_and_its_two_parts() -> None:
    from benchmarks import interleaving

    result = interleaving.once(["InMemorySaver", "Telar/memory", "SqliteSaver"], rounds=3)
    assert result["with"] == ["InMemorySaver", "Telar/memory", "SqliteSaver"]
    figures = ("InMemorySaver_us", "Telar/memory_us", "ratio", "prepare_us", "write_us")
    assert all(_number(result[key]) and result[key] > 0 for key in figures)
    assert result["prepare_us"] < result["Telar/memory_us"]  # a part of the put, timed inside it


def test_calls_counts_the_functions_a_warm_put_enters() -> None:
    from benchmarks import calls
    from telar_checkpoint.stores.memory import MemoryStore

    found = calls.counts(MemoryStore())
    assert set(found) == {"put", "put_writes", "get_tuple"}
    for functions, modules, entered in found.values():
        assert 0 < modules <= functions <= entered
    assert calls.entered(lambda: None) == (0, 0, 0)  # nothing of ours


def test_put_floor_stores_one_exact_line_a_put() -> None:
    from benchmarks import put_floor
    from benchmarks.checkpoints import Chain, sample_messages

    floor = put_floor.LineFloor()
    chain = Chain(floor, "t")  # type: ignore[arg-type]  # a saver's put and get_next_version only
    chat = sample_messages(2)
    for step in range(3):
        chain.put({"messages": chat, "step": step})
    lines = [json.loads(text) for text in floor.lines["t"]]
    assert [line["id"] for line in lines] == chain.ids
    assert lines[-1]["values"]["messages"][1]["$model"]["fields"]["content"] == chat[1].content
    assert all(_number(put_floor.median_put(name, 2, 3)) for name in put_floor.SAVERS)


def test_load_runs_conversations_at_once_and_reports_every_figure(tmp_path: Path, capsys: Any) -> None:
    """benchmarks.load, memory store against InMemorySaver, async and threads: every invoke timed
    (a turn, and a resume where the tool asked), ratios written, the saver's hold measured."""
    from benchmarks import load

    out = tmp_path / "load.json"
    load.main(["--stores", "memory", "--modes", "async,threads", "--concurrency", "4", "--runs", "1", "--turns", "4", "--out", str(out)])
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["mode"], r["concurrency"]) for r in rows] == [("async", 4), ("threads", 4)]
    for row in rows:
        for saver in ("Telar/memory", "InMemorySaver"):
            figures = row[saver]
            assert figures["invokes"] == 4 * (4 + 1)  # turn 4 of each conversation paused, then resumed
            assert figures["p50_ms"] <= figures["p99_ms"] <= figures["p999_ms"]
        assert row["ratios"]["throughput"] > 0
    assert rows[0]["Telar/memory"]["hold_cpu_ms"] > 0  # (async: the saver's steps were timed)
    capsys.readouterr()
    load.main(["--report", "--out", str(out)])
    table = capsys.readouterr().out
    assert table.count("| memory | async | 4 | 1 |") == 2 and "| memory | threads | 4 |" in table and ("met |" in table)


def test_ui_times_a_long_thread_and_a_list(tmp_path: Path, capsys: Any) -> None:
    pytest.importorskip("starlette")
    from benchmarks import ui

    out = tmp_path / "ui.json"
    ui.main(["--checkpoints", "300", "--threads", "30", "--runs", "1", "--out", str(out)])
    row = json.loads(out.read_text())
    assert row["thread"]["checkpoints"] == 300 and len(row["thread"]["http_s"]) == 1
    assert all(_number(t) for t in [*row["thread"]["http_s"], row["list"]["first_page_s"], row["list"]["whole_reading_s"]])
    assert "thread of 300 checkpoints" in capsys.readouterr().out


def test_collector_counts_tracked_objects_and_times_collections(tmp_path: Path) -> None:
    from benchmarks import collector

    assert collector.main(["--threads", "3", "--turns", "2", "--runs", "2", "--label", "smoke", "--out", str(tmp_path)]) == 0
    results = json.loads((tmp_path / "collector-smoke.json").read_text())
    assert [list(run) for run in results["runs"]] == [list(collector.SAVERS), list(reversed(collector.SAVERS))]
    for run in [*results["runs"], results["medians"]]:
        for figures in run.values():
            assert figures["tracked_per_thread"] > 0 and figures["collection_ms"] > 0 and figures["get_tuple_per_s"] > 0
            assert _number(figures["collection_x"]) and _number(figures["get_tuple_x"])
    assert "## Targets (issue 52)" in (tmp_path / "collector-smoke.md").read_text()


def test_percall_times_put_put_writes_and_get_tuple_of_every_saver(tmp_path: Path) -> None:
    from benchmarks import percall

    assert percall.main(["--runs", "2", "--rounds", "3", "--out", str(tmp_path)]) == 0
    results = json.loads((tmp_path / "percall.json").read_text())
    assert len(results["runs"]) == 2
    for run in [*results["runs"], results["medians"]]:
        for name in percall.SAVERS:
            assert all(run["per_s"][name][op] > 0 for op in percall.OPS)
            assert all(_number(run["ratios"][name][op][base]) for op in percall.OPS for base in percall.BASES)
    assert "| Telar/file |" in (tmp_path / "percall.md").read_text()
