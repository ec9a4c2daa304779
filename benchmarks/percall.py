"""Calls per second of `put`, `put_writes` and `get_tuple` with a 20-message state (issue 52).

    python -m benchmarks.percall [--runs 3] [--rounds 1000] [--label before] [--out DIR]

TelarSaver on the memory store and on the file store, beside InMemorySaver and SqliteSaver (a
temporary file, `setup()` first), every saver in one process, interleaved: each round runs on
every saver, in an order rotated by one a round (as `workloads` does), a `put` of the next
checkpoint on the saver's one thread (a chat of 20 messages, `checkpoints.sample_messages`, and a
counter, both channels in `new_versions`, the same message objects each put, as in the micro
workload of `benchmarks.run`; each saver has objects of its own), a `put_writes` of one message write on it, and a
`get_tuple` of the latest checkpoint. The thread grows by a checkpoint a round. Each call is
timed alone; the figure is the median call, as calls per second, with ratios against
InMemorySaver and SqliteSaver. A run is a process of its own; every run is published, then the
medians. Results: `results/percall[-LABEL].md` and `.json`.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage

from benchmarks.checkpoints import Chain, sample_messages, thread_config
from benchmarks.contenders import Lab, open_contenders
from benchmarks.run import RESULTS, results_of, write_results
from benchmarks.workloads import log, rotated, timed

SAVERS = ("InMemorySaver", "SqliteSaver", "Telar/memory", "Telar/file")
BASES = ("InMemorySaver", "SqliteSaver")
OPS = ("put", "put_writes", "get_tuple")
MESSAGES = 20
ROOT = Path(__file__).resolve().parent.parent


def measure(rounds: int) -> dict[str, Any]:
    """One run, in this process: each saver's median µs per call of each operation."""
    lab = Lab.create()
    contenders = open_contenders(list(SAVERS), lab)
    try:
        # message objects of their own for each saver: none sees objects another has encoded
        chats = {c.name: sample_messages(MESSAGES) for c in contenders}
        chains = {c.name: Chain(c.saver, "percall") for c in contenders}
        for c in contenders:  # a few checkpoints to start from
            for step in range(3):
                chains[c.name].put({"messages": chats[c.name], "step": step})
        samples: dict[str, dict[str, list[float]]] = {c.name: {op: [] for op in OPS} for c in contenders}
        for round_ in range(rounds):
            for c in rotated(contenders, round_):
                saver, chain, us = c.saver, chains[c.name], samples[c.name]
                write = [("messages", [AIMessage(content=f"A pending write of one message, round {round_}.", id=f"pending-{round_}")])]
                config, checkpoint, metadata, versions = chain.next({"messages": chats[c.name], "step": round_})
                stored, seconds = timed(lambda: saver.put(config, checkpoint, metadata, versions))  # type: ignore[arg-type]
                us["put"].append(seconds * 1e6)
                chain.done(stored, versions)
                _, seconds = timed(lambda: saver.put_writes(stored, write, f"task-{round_}"))
                us["put_writes"].append(seconds * 1e6)
                _, seconds = timed(lambda: saver.get_tuple(thread_config("percall")))
                us["get_tuple"].append(seconds * 1e6)
        found = {name: {op: statistics.median(v) for op, v in ops.items()} for name, ops in samples.items()}
        last = {c.name: c.saver.get_tuple(thread_config("percall")) for c in contenders}
        assert all(t is not None and len(t.checkpoint["channel_values"]["messages"]) == MESSAGES for t in last.values())
        return {"rounds": rounds, "median_us": found}
    finally:
        for c in contenders:
            c.close()
        lab.cleanup()


def per_second(run: dict[str, Any]) -> dict[str, dict[str, float]]:
    return {name: {op: 1e6 / us for op, us in ops.items()} for name, ops in run["median_us"].items()}


def ratios(rates: dict[str, dict[str, float]]) -> dict[str, dict[str, dict[str, float]]]:
    """saver -> operation -> base -> calls per second over the base's (above 1: faster)."""
    return {name: {op: {b: rates[name][op] / rates[b][op] for b in BASES} for op in OPS} for name in SAVERS}


def _table(rates: dict[str, dict[str, float]], x: dict[str, dict[str, dict[str, float]]]) -> list[str]:
    head = "| saver | " + " | ".join(f"{op} /s | x InMemorySaver | x SqliteSaver" for op in OPS) + " |"
    lines = [head, "|---|" + "---|" * (3 * len(OPS))]
    for name in SAVERS:
        cells = [f"{rates[name][op]:,.0f} | {x[name][op]['InMemorySaver']:.2f} | {x[name][op]['SqliteSaver']:.2f}" for op in OPS]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def markdown(results: dict[str, Any]) -> str:
    lines = [
        "# Calls per second with a 20-message state (issue 52)",
        "",
        f"`{results['command']}`, commit {results['machine']['commit']}, Python {results['machine']['python']}, "
        f"{results['machine']['cpu_count']} CPUs, {results['date']}.",
        "",
        f"{results['settings']['rounds']} rounds, every saver in one process, the order rotated each round; a round is a "
        f"`put` (a chat of {MESSAGES} messages and a counter) on one thread growing by a checkpoint a round, a "
        "`put_writes` of one message on it and a `get_tuple` of the latest. Each figure is the median call as calls "
        "per second; ratios above 1 are faster than the saver named.",
        "",
    ]
    for i, run in enumerate(results["runs"], 1):
        lines += [f"## Run {i}", "", *_table(run["per_s"], run["ratios"]), ""]
    med = results["medians"]
    lines += [f"## Medians of {len(results['runs'])} runs (each ratio the median of the runs' ratios)", ""]
    lines += [*_table(med["per_s"], med["ratios"])]
    return "\n".join(lines) + "\n"


def medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "per_s": {n: {op: statistics.median(r["per_s"][n][op] for r in runs) for op in OPS} for n in SAVERS},
        "ratios": {
            n: {op: {b: statistics.median(r["ratios"][n][op][b] for r in runs) for b in BASES} for op in OPS} for n in SAVERS
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="processes, one after another")
    parser.add_argument("--rounds", type=int, default=1000, help="calls of each operation on each saver, a run")
    parser.add_argument("--label", help="results go to percall-LABEL.md/.json (default: percall.md/.json)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="the directory the results go to")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # one run in this process, as JSON
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(measure(args.rounds)))
        return 0
    command = shlex.join(["python", "-m", "benchmarks.percall", *(sys.argv[1:] if argv is None else argv)])
    began = time.time()
    runs = []
    for run in range(args.runs):
        log(f"percall: run {run + 1}/{args.runs}")
        child = [sys.executable, "-m", "benchmarks.percall", "--one", "--rounds", str(args.rounds)]
        done = subprocess.run(child, capture_output=True, text=True, cwd=ROOT)
        if done.returncode:
            raise RuntimeError(f"run {run + 1}: exit {done.returncode}\n{done.stderr}")
        found = json.loads(done.stdout)
        found["per_s"] = per_second(found)
        found["ratios"] = ratios(found["per_s"])
        runs.append(found)
    results = {
        **results_of(command, began, list(SAVERS)),
        "settings": {"runs": args.runs, "rounds": args.rounds, "messages": MESSAGES},
        "runs": runs,
        "medians": medians(runs),
    }
    write_results(args.out, f"percall-{args.label}" if args.label else "percall", results, markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
