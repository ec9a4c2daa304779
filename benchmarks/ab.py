"""Does a piece of machinery pay? An interleaved A/B of the agent loop, with an A/A control.

    python -m benchmarks.ab histories --stores postgres,file,sqlite,redis,memory --runs 4

Each run opens the same store three times, in spaces of their own: A and A' as they ship,
B with the machinery switched the other way, and runs the benchmark's agent loop on the
three interleaved (`workloads.agent_loop`, the order rotating every turn). A'/A is the
noise of the run, B/A the effect; a piece pays when B is slower than A by more than the
noise, in every run. Results go to `results/ab.json` and `results/ab.md` (one section an
experiment, replaced when it runs again).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver

from benchmarks.contenders import Contender, Lab, open_contenders, server_problems
from benchmarks.workloads import Settings, agent_loop, log
from telar_checkpoint import TelarSaver
from telar_checkpoint.history import History
from telar_checkpoint.threads import ThreadRecords

RESULTS = Path(__file__).parent / "results"


def _records(saver: TelarSaver, records: ThreadRecords) -> None:
    """Give the saver (its writer and index) other records of its threads."""
    saver._records = saver._writer.records = saver._index.records = records


def _histories_off(contender: Contender) -> str:
    """B: no parsed history kept (`ThreadRecords` of no thread): every read reads and parses the
    thread, every write takes the store's update."""
    _records(contender.saver, ThreadRecords(0))  # type: ignore[arg-type]
    return "no histories kept"


class _VersionsOnly(ThreadRecords):
    """`ThreadRecords` that keep no text: a string read after another writer appended is parsed whole."""

    def keep(self, thread_id: str, version: Any, history: History, text: str | None) -> None:
        super().keep(thread_id, version, history, None)


class Replicas(BaseCheckpointSaver[Any]):
    """Two savers on one store that serve the invokes of a thread in turn, as two replicas of a
    server behind a load balancer do: each invoke starts with `get_tuple`, which passes the turn.
    Each replica then finds the thread moved on by the other (its kept history is stale), reads
    the string, and parses it: whole, or with the text `ThreadRecords` keep only the lines the other appended."""

    def __init__(self, first: TelarSaver, second: TelarSaver) -> None:
        super().__init__(serde=first.serde)
        self.replicas, self.turn = (first, second), 0

    @property
    def saver(self) -> TelarSaver:
        return self.replicas[self.turn]

    def get_tuple(self, config: Any) -> Any:
        self.turn = 1 - self.turn
        return self.saver.get_tuple(config)

    def list(self, config: Any, **kwargs: Any) -> Any:
        return self.saver.list(config, **kwargs)

    def put(self, *args: Any) -> Any:
        return self.saver.put(*args)

    def put_writes(self, *args: Any) -> None:
        self.saver.put_writes(*args)

    def get_next_version(self, current: Any, channel: None = None) -> Any:
        return self.saver.get_next_version(current, channel)


def _texts_off_replicas(contender: Contender) -> str:
    """B: two replicas (`Replicas`) whose `ThreadRecords` keep no text (`_VersionsOnly`): the string
    each reads after the other wrote is parsed whole, where A parses only the lines appended
    since its last read. The case the text is kept for."""
    assert isinstance(contender.saver, Replicas)
    for replica in contender.saver.replicas:
        _records(replica, _VersionsOnly())
    return "two replicas, no text kept"


EXPERIMENTS: dict[str, Callable[[Contender], str]] = {
    "histories": _histories_off,
    "texts-replicas": _texts_off_replicas,
}
REPLICATED = {"texts-replicas"}  # experiments whose A, A' and B are each two `Replicas`
# Measured and removed, their results kept in results/ab.md: "lone-durable-append" (B: a lone
# append left to `flush` for durability, as a batch is, instead of syncing itself as it writes,
# RWF_DSYNC for a file, a FULL commit for SQLite): within noise on both; "linger" (pending
# writes waiting up to 2 ms for the step's put to carry them in one store write): 3.6-4.6% on
# SQLite and Postgres in one experiment of two, noise on files and Redis, measured again at
# 9187c34 before lingering was removed (results/ab.md, "linger").


def run_once(experiment: str, store: str, settings: Settings) -> dict[str, Any]:
    labs = [Lab.create() for _ in range(3)]
    contenders: list[Contender] = []
    try:
        for lab, name in zip(labs, ("A", "A'", "B")):
            contender = open_contenders([f"Telar/{store}"], lab)[0]
            contender.name = name
            if experiment in REPLICATED:
                assert isinstance(contender.saver, TelarSaver) and contender.store is not None
                contender.saver = Replicas(contender.saver, TelarSaver(contender.store))
            contenders.append(contender)
        change = EXPERIMENTS[experiment](contenders[2])
        loop = agent_loop(contenders, settings)
    finally:
        for contender in contenders:
            contender.close()
        for lab in labs:
            lab.cleanup()
    medians = {name: loop[name]["overhead_ms"]["median"] for name in ("A", "A'", "B")}
    return {"B": change, "overhead_ms": medians, "noise": medians["A'"] / medians["A"], "effect": medians["B"] / medians["A"]}


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The verdict: B slower than both A and A' in every run, so the setting A ships with
    pays ("as shipped"); B faster than both in every run, so switching pays ("switch");
    else the difference is within the noise ("noise")."""
    effect = [r["effect"] for r in runs]
    noise = [r["noise"] for r in runs]
    ms = [r["overhead_ms"] for r in runs]
    if all(m["B"] > max(m["A"], m["A'"]) for m in ms):
        verdict = "as shipped"
    elif all(m["B"] < min(m["A"], m["A'"]) for m in ms):
        verdict = "switch"
    else:
        verdict = "noise"
    return {
        "B": runs[0]["B"],
        "effect_median": statistics.median(effect),
        "effect_range": [min(effect), max(effect)],
        "noise_range": [min(noise), max(noise)],
        "verdict": verdict,
    }


def markdown(experiment: str, doc: str, results: dict[str, Any], settings: Settings) -> str:
    lines = [f"## {experiment}", "", doc.strip().replace("\n    ", " "), "",
             f"{settings.turns} turns of the agent loop a run, {len(next(iter(results.values()))['runs'])} runs a store; "
             "per-invoke overhead median in ms. A'/A is the noise of the run, B/A the effect. Verdict: *as shipped* "
             "when B is slower than both A and A' in every run (the setting A ships with pays), *switch* when B is faster "
             "than both in every run, else *noise*.", "",
             "| store | B is | A | A' | B | A'/A | B/A | verdict |", "|---|---|---|---|---|---|---|---|"]
    for store, result in results.items():
        for run in result["runs"]:
            a, a2, b = (run["overhead_ms"][name] for name in ("A", "A'", "B"))
            lines.append(f"| {store} | {run['B']} | {a:.2f} | {a2:.2f} | {b:.2f} | {run['noise']:.3f} | {run['effect']:.3f} | |")
        s = summarize(result["runs"])
        lines.append(f"| **{store}** | | | | | {s['noise_range'][0]:.3f}-{s['noise_range'][1]:.3f} "
                     f"| **{s['effect_median']:.3f}** ({s['effect_range'][0]:.3f}-{s['effect_range'][1]:.3f}) "
                     f"| **{s['verdict']}** |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("experiment", choices=sorted(EXPERIMENTS))
    parser.add_argument("--stores", default="file,sqlite,postgres,redis")
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--out", type=Path, default=RESULTS, help="where ab.json and ab.md go")
    args = parser.parse_args(argv)
    settings = Settings(turns=args.turns, turn_budget_s=1e9)
    stores = args.stores.split(",")
    problems = server_problems([f"Telar/{s}" for s in stores], Lab.create())
    results: dict[str, Any] = {}
    for store in stores:
        if f"Telar/{store}" in problems:
            log(f"{store}: skipped ({problems[f'Telar/{store}']})")
            continue
        runs = []
        for i in range(args.runs):
            log(f"{args.experiment} on {store}: run {i + 1}/{args.runs}")
            runs.append(run_once(args.experiment, store, settings))
        results[store] = {"runs": runs, "summary": summarize(runs)}
        log(f"{store}: {results[store]['summary']}")
    text = markdown(args.experiment, EXPERIMENTS[args.experiment].__doc__ or "", results, settings)
    publish(args.out, args.experiment, {"turns": args.turns, "results": results, "markdown": text})
    print(text)


def publish(out: Path, experiment: str, entry: dict[str, Any]) -> None:
    """Keep `entry` (with its "markdown") as the experiment's section of ab.json and ab.md."""
    out.mkdir(parents=True, exist_ok=True)
    stored_path = out / "ab.json"
    stored = json.loads(stored_path.read_text()) if stored_path.exists() else {}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=Path(__file__).parent)
    stored[experiment] = {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "commit": commit.stdout.strip(), **entry}
    stored_path.write_text(json.dumps(stored, indent=1) + "\n")
    report = ["# Machinery A/B (benchmarks/ab.py, benchmarks/group_commit.py)", ""]
    report += [f"{e['markdown']}\n_run {e['date']} at commit {e.get('commit', '?')}_\n" for e in stored.values()]
    (out / "ab.md").write_text("\n".join(report))


if __name__ == "__main__":
    main()
