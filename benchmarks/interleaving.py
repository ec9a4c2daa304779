"""How much do the other savers of a run slow a `put`? The micro workload's put, timed beside chosen contenders.

    python -m benchmarks.interleaving --with InMemorySaver,Telar/memory --with InMemorySaver,Telar/memory,SqliteSaver

Each `--with` is one run of `workloads.micro` (a put of a 10-message chat, then a put_writes,
two reads and a list, every contender in turn, the order rotating every round) in a process of
its own, on those contenders. It prints the median put of InMemorySaver and of Telar/memory,
their ratio, and Telar/memory's put split in two: preparing it (`changes.put_change`: the values
encoded, the metadata made plain; no history, no store) and writing it (`Writer.write`). A
`--with` holding Telar/memory and InMemorySaver alone shows the put as the two savers cost
it; the other contenders add the cost of running beside them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from benchmarks.contenders import Lab, open_contenders
from benchmarks.workloads import Settings, micro
from telar_checkpoint import saver as saver_module
from telar_checkpoint.changes import put_change

MEASURED = ("InMemorySaver", "Telar/memory")


def once(names: list[str], rounds: int) -> dict[str, Any]:
    """One run of the micro workload on `names` (InMemorySaver and Telar/memory among them)."""
    lab = Lab.create()
    opened = open_contenders(names, lab)
    split: dict[str, list[float]] = {"prepare": [], "write": []}
    try:
        saver: Any = next(c.saver for c in opened if c.name == "Telar/memory")

        def timing(method: Callable[..., Any], part: str) -> Callable[..., Any]:
            def timed(*args: Any) -> Any:
                start = time.perf_counter_ns()
                try:
                    return method(*args)
                finally:
                    split[part].append((time.perf_counter_ns() - start) / 1e3)

            return timed

        saver_module.put_change = timing(put_change, "prepare")  # (Telar/memory is the one TelarSaver of a run)
        saver._writer.write = timing(saver._writer.write, "write")
        results = micro(opened, Settings(micro_rounds=rounds))
    finally:
        saver_module.put_change = put_change
        for contender in opened:
            contender.close()
        lab.cleanup()
    ims, telar = (results[name]["put"]["median"] for name in MEASURED)
    return {
        "with": names, "InMemorySaver_us": ims, "Telar/memory_us": telar, "ratio": telar / ims,
        "prepare_us": statistics.median(split["prepare"]), "write_us": statistics.median(split["write"]),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--with", dest="runs", action="append", required=True,
                        help="comma-separated contenders of one run (InMemorySaver and Telar/memory are added)")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a run in this process: its figures as JSON
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(once(args.one.split(","), args.rounds)))
        return
    print("| contenders | InMemorySaver put µs | Telar/memory put µs | ratio | preparing µs | writing µs |")
    print("|---|---|---|---|---|---|")
    for run in args.runs:
        names = list(dict.fromkeys([*MEASURED, *run.split(",")]))
        done = subprocess.run(
            [sys.executable, "-m", "benchmarks.interleaving", "--with", run, "--one", ",".join(names), "--rounds", str(args.rounds)],
            capture_output=True, text=True, check=True,
        )
        r = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"| {', '.join(names)} | {r['InMemorySaver_us']:.1f} | {r['Telar/memory_us']:.1f} | {r['ratio']:.2f} "
              f"| {r['prepare_us']:.1f} | {r['write_us']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
