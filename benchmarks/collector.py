"""What a saver keeps, as Python's cyclic garbage collector sees it (issue 52).

    python -m benchmarks.collector [--threads 2000] [--turns 5] [--runs 3] [--label before] [--out DIR]

Each saver runs in a fresh process of its own (so one saver's objects are not counted in
another's): InMemorySaver, and TelarSaver on the memory store and on the file store (a
temporary directory). The process compiles a two-node graph over `MessagesState` (a fake
model node that appends an AIMessage, an answer node that appends a longer one; real
`langchain_core` messages) with the saver, collects twice, counts the objects the collector
tracks, then runs `--threads` threads of a `--turns`-turn chat (`graph.invoke`, one thread id
each, `durability="sync"`), collects twice again and reports:

- tracked objects a thread: `len(gc.get_objects())` after the threads ran, minus the same count
  before any ran, divided by the threads;
- full collection: the median of 5 `gc.collect()`, each timed alone;
- `get_tuple` per second: the latest checkpoint of each thread, round-robin over every thread,
  for about a second; and how much of that second the collector's pauses took (collections
  that the reads' allocations set off), in all and the longest.

A run is one process per saver, one after another, the order reversed every other run; its
ratios are against the InMemorySaver process of the same run. Every run is published, then
the medians. Targets (issue 52, memory store): full collection at most 2x InMemorySaver's,
`get_tuple` at least InMemorySaver's. Results: `results/collector[-LABEL].md` and `.json`.
"""

from __future__ import annotations

import argparse
import gc
import json
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage
from langgraph.graph import END, START, MessagesState, StateGraph

from benchmarks.agent import human
from benchmarks.checkpoints import thread_config
from benchmarks.contenders import Lab, open_contenders
from benchmarks.load import COLLECTOR
from benchmarks.run import RESULTS, results_of, write_results
from benchmarks.workloads import log

SAVERS = ("InMemorySaver", "Telar/memory", "Telar/file")
BASE = SAVERS[0]
COLLECTIONS = 5  # full collections timed; the median is reported
READ_SECONDS = 1.0  # how long get_tuple is called round-robin
ROOT = Path(__file__).resolve().parent.parent

_ANSWER = "The forecast for the coast is mild with a light westerly breeze, clearing by the afternoon. " * 3


def _model(state: MessagesState) -> dict[str, Any]:
    return {"messages": [AIMessage(content=f"Looking up turn {len(state['messages']) // 3}.")]}


def _answer(state: MessagesState) -> dict[str, Any]:
    return {"messages": [AIMessage(content=f"Answer {len(state['messages']) // 3}: {_ANSWER}")]}


def chat_builder() -> StateGraph:
    """human -> model (a short AIMessage) -> answer (an AIMessage of about 300 bytes)."""
    builder = StateGraph(MessagesState)
    builder.add_node("model", _model)
    builder.add_node("answer", _answer)
    builder.add_edge(START, "model")
    builder.add_edge("model", "answer")
    builder.add_edge("answer", END)
    return builder


def tracked() -> int:
    gc.collect()
    gc.collect()
    return len(gc.get_objects())


def measure(name: str, threads: int, turns: int) -> dict[str, Any]:
    """One saver's figures, in this process (which should hold nothing else of the benchmark's)."""
    lab = Lab.create()
    try:
        (contender,) = open_contenders([name], lab)
        graph = chat_builder().compile(checkpointer=contender.saver)
        before = tracked()
        started = time.perf_counter()
        for t in range(threads):
            config = thread_config(f"thread-{t:06d}")
            for turn in range(turns):
                graph.invoke({"messages": [human(turn)]}, config, durability="sync")  # type: ignore[arg-type]
        filled_s = time.perf_counter() - started
        after = tracked()
        collections = []
        for _ in range(COLLECTIONS):
            start = time.perf_counter()
            gc.collect()
            collections.append(time.perf_counter() - start)
        saver, configs = contender.saver, [thread_config(f"thread-{t:06d}") for t in range(threads)]
        assert saver.get_tuple(configs[-1]) is not None
        COLLECTOR.reset()
        paused = COLLECTOR.total
        calls, start = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - start) < READ_SECONDS:
            saver.get_tuple(configs[calls % threads])
            calls += 1
        contender.close()
        return {
            "saver": name,
            "threads": threads,
            "turns": turns,
            "fill_s": filled_s,
            "tracked_before": before,
            "tracked_after": after,
            "tracked": after - before,
            "tracked_per_thread": (after - before) / threads,
            "collection_ms": statistics.median(collections) * 1e3,
            "collections_ms": [s * 1e3 for s in collections],
            "get_tuple_per_s": calls / elapsed,
            "get_tuple_calls": calls,
            "get_tuple_collector_ms": (COLLECTOR.total - paused) * 1e3,
            "get_tuple_longest_pause_ms": COLLECTOR.longest * 1e3,
        }
    finally:
        lab.cleanup()


def one_process(name: str, threads: int, turns: int) -> dict[str, Any]:
    command = [sys.executable, "-m", "benchmarks.collector", "--one", name, "--threads", str(threads), "--turns", str(turns)]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    if done.returncode:
        raise RuntimeError(f"{name}: exit {done.returncode}\n{done.stderr}")
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def with_ratios(found: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    base = found[BASE]
    for figures in found.values():
        figures["tracked_x"] = figures["tracked_per_thread"] / base["tracked_per_thread"] if base["tracked_per_thread"] else None
        figures["collection_x"] = figures["collection_ms"] / base["collection_ms"]
        figures["get_tuple_x"] = figures["get_tuple_per_s"] / base["get_tuple_per_s"]
    return found


def _x(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


HEADER = (
    "| saver | tracked objects (after - before) | a thread | x InMemorySaver | full collection ms | x InMemorySaver "
    "| get_tuple /s | x InMemorySaver | collector pauses in it ms (longest) |\n|---|---|---|---|---|---|---|---|---|"
)


def _row(name: str, f: dict[str, Any]) -> str:
    return (
        f"| {name} | {f['tracked']:,.0f} | {f['tracked_per_thread']:,.1f} | {_x(f['tracked_x'])} "
        f"| {f['collection_ms']:.1f} | {_x(f['collection_x'])} | {f['get_tuple_per_s']:,.0f} | {_x(f['get_tuple_x'])} "
        f"| {f['get_tuple_collector_ms']:,.0f} ({f['get_tuple_longest_pause_ms']:,.0f}) |"
    )


def medians(runs: list[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    keys = ("tracked_before", "tracked_after", "tracked", "tracked_per_thread", "collection_ms", "get_tuple_per_s",
            "collection_x", "get_tuple_x", "tracked_x", "get_tuple_collector_ms", "get_tuple_longest_pause_ms")  # fmt: skip
    out: dict[str, dict[str, Any]] = {}
    for name in SAVERS:
        out[name] = {}
        for key in keys:
            values = [run[name][key] for run in runs if run[name][key] is not None]
            out[name][key] = statistics.median(values) if values else None
    return out


def markdown(results: dict[str, Any]) -> str:
    s = results["settings"]
    lines = [
        "# What the saver keeps, as the garbage collector sees it (issue 52)",
        "",
        f"`{results['command']}`, commit {results['machine']['commit']}, Python {results['machine']['python']}, "
        f"{results['machine']['cpu_count']} CPUs, {results['date']}.",
        "",
        f"{s['threads']:,} threads of {s['turns']} turns (a two-node chat graph, `durability=\"sync\"`), each saver in a "
        f"process of its own. Tracked objects: `len(gc.get_objects())` after the threads ran less before any ran "
        f"(each after two `gc.collect()`); full collection: median of {COLLECTIONS} `gc.collect()`; `get_tuple`: the "
        f"latest checkpoint of each thread, round-robin, for {READ_SECONDS:.0f} s, with the collector's pauses in that time "
        "(`gc.callbacks`). Ratios are against the InMemorySaver "
        "process of the same run.",
        "",
    ]
    for i, run in enumerate(results["runs"], 1):
        lines += [f"## Run {i} (order: {', '.join(results['orders'][i - 1])})", "", HEADER]
        lines += [_row(name, run[name]) for name in SAVERS]
        lines += [""]
    med = results["medians"]
    lines += [f"## Medians of {len(results['runs'])} runs (each ratio the median of the runs' ratios)", "", HEADER]
    lines += [_row(name, med[name]) for name in SAVERS]
    lines += ["", "## Targets (issue 52)", "", "| store | target | ratio (median) | met |", "|---|---|---|---|"]
    for name in SAVERS[1:]:
        for goal, key, ok in (
            ("full collection <= 2x InMemorySaver's", "collection_x", lambda r: r <= 2.0),
            ("get_tuple >= InMemorySaver's", "get_tuple_x", lambda r: r >= 1.0),
        ):
            ratio = med[name][key]
            lines.append(f"| {name} | {goal} | {_x(ratio)} | {'yes' if ratio is not None and ok(ratio) else 'no'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2000)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--label", help="results go to collector-LABEL.md/.json (default: collector.md/.json)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="the directory the results go to")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a saver: its figures in this process, as JSON
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(measure(args.one, args.threads, args.turns)))
        return 0
    command = shlex.join(["python", "-m", "benchmarks.collector", *(sys.argv[1:] if argv is None else argv)])
    began = time.time()
    runs, orders = [], []
    for run in range(args.runs):
        order = list(SAVERS) if run % 2 == 0 else list(reversed(SAVERS))
        found = {}
        for name in order:
            log(f"collector: run {run + 1}/{args.runs}, {name}")
            found[name] = one_process(name, args.threads, args.turns)
        runs.append(with_ratios(found))
        orders.append(order)
    results = {
        **results_of(command, began, list(SAVERS)),
        "settings": {"threads": args.threads, "turns": args.turns, "runs": args.runs, "collections": COLLECTIONS,
                     "read_seconds": READ_SECONDS},  # fmt: skip
        "orders": orders,
        "runs": runs,
        "medians": medians(runs),
    }
    write_results(args.out, f"collector-{args.label}" if args.label else "collector", results, markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
