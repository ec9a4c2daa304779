"""Does group commit pay? A/A'/B where B makes each append durable inside the writer's turn.

    python -m benchmarks.group_commit --stores file,sqlite --runs 6

A and A' append inside the thread's turn and flush after it (`Store.defers_appends`: the next
writer appends while this one waits for the disk, and one fsync serves both). B flushes
inside the append, as a store with one durable conditional append (`Store.append_if`)
would, so the turn is held during the fsync. Two workloads, interleaved, the order rotating
every run: `workers` Python threads each running the agent loop on a thread of its own, and a
`Send` fan-out of 8 branches on one thread (its pending writes arrive together). Figures are
throughput (invokes a second, higher is better); results go to results/ab.json and ab.md.
"""

from __future__ import annotations

import argparse
import operator
import statistics
import time
import uuid
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import Send

from benchmarks.ab import RESULTS, publish
from benchmarks.checkpoints import thread_config
from benchmarks.contenders import Contender, Lab, open_contenders
from benchmarks.workloads import Settings, concurrency, log
from telar_checkpoint.stores import Store


def flush_in_the_append(store: Store) -> None:
    """B: `append_if_deferred` flushes before it returns (the turn is held during the fsync)."""
    append, flush = store.append_if_deferred, store.flush

    def durable(key: str, suffix: str, version: Any) -> Any:
        moved = append(key, suffix, version)
        if moved is not None:
            flush(key)
        return moved

    store.append_if_deferred = durable  # type: ignore[method-assign]
    store.flush = lambda key: None  # type: ignore[method-assign]


def workers(contender: Contender) -> float:
    """`workloads.concurrency`: 8 threads, 3 agent-loop turns each, LangGraph's default durability."""
    settings = Settings(workers=8, worker_turns=3, concurrency_rounds=1, durability="async")
    return float(concurrency([contender], settings)[contender.name]["invokes_per_s"])


class _Fan(TypedDict):
    items: Annotated[list[int], operator.add]


def _branch(state: _Fan) -> dict[str, list[int]]:
    time.sleep(0.001)
    return {"items": [state["items"][0] * 10]}


def fan_out(contender: Contender, invokes: int = 20) -> float:
    builder = StateGraph(_Fan)
    builder.add_node("branch", _branch)
    builder.add_conditional_edges(START, lambda state: [Send("branch", {"items": [i]}) for i in range(8)], ["branch"])
    builder.add_edge("branch", END)
    graph, tag = builder.compile(checkpointer=contender.saver), uuid.uuid4().hex[:6]
    began = time.perf_counter()
    for i in range(invokes):
        graph.invoke({"items": []}, thread_config(f"f-{tag}-{i}"))
    return invokes / (time.perf_counter() - began)


WORKLOADS = {"8 workers": workers, "Send fan-out": fan_out}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stores", default="file,sqlite")
    parser.add_argument("--runs", type=int, default=6)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    rows = ["## group-commit", "", (__doc__ or "").split("\n\n")[2].replace("\n", " "), "",
            "| store | workload | A | A' | B | A'/A | B/A | runs (A; A'; B) |", "|---|---|---|---|---|---|---|---|"]
    results: dict[str, Any] = {}
    for store in args.stores.split(","):
        labs = [Lab.create() for _ in range(3)]
        contenders = [open_contenders([f"Telar/{store}"], lab)[0] for lab in labs]
        try:
            b = contenders[2].store
            assert b.defers_appends, f"{store} has no deferred appends"
            flush_in_the_append(b)
            rates: dict[str, list[list[float]]] = {w: [[], [], []] for w in WORKLOADS}
            for run in range(args.runs):
                log(f"group commit on {store}: run {run + 1}/{args.runs}")
                order = [(run + k) % 3 for k in range(3)]
                for name, workload in WORKLOADS.items():
                    for k in order:
                        rates[name][k].append(workload(contenders[k]))
        finally:
            for contender in contenders:
                contender.close()
            for lab in labs:
                lab.cleanup()
        results[store] = rates
        for name, (a, a2, bb) in rates.items():
            ma, ma2, mb = (statistics.median(x) for x in (a, a2, bb))
            runs = "; ".join(", ".join(f"{v:.0f}" for v in x) for x in (a, a2, bb))
            rows.append(f"| {store} | {name} | {ma:.1f} | {ma2:.1f} | {mb:.1f} | {ma2 / ma:.3f} | **{mb / ma:.3f}** | {runs} |")
    text = "\n".join(rows) + "\n"
    publish(args.out, "group-commit", {"runs": args.runs, "results": results, "markdown": text})
    print(text)


if __name__ == "__main__":
    main()
