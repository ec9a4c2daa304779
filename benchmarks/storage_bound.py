"""How large a thread with a large, unchanging state grows under `max_history`, and what a cold
read of it costs (issue 19: a 10 MB value kept whole in every checkpoint).

    python -m benchmarks.storage_bound --mb 10 --turns 30 --max-history 3

A real LangGraph graph counts turns in a state that also holds a document of `--mb` MB given on
the first turn and never changed; the file store's size is read after every turn. Then a new
process reads the thread cold (`get_tuple`), reporting its time and peak memory (ru_maxrss).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from typing_extensions import TypedDict


class State(TypedDict, total=False):
    doc: dict[str, Any]
    turns: int


def _graph(checkpointer: Any) -> Any:
    from langgraph.graph import START, StateGraph

    builder = StateGraph(State)
    builder.add_node("count", lambda s: {"turns": s.get("turns", 0) + 1})
    builder.add_edge(START, "count")
    return builder.compile(checkpointer=checkpointer)


def fill(directory: Path, mb: int, turns: int, max_history: int) -> dict[str, Any]:
    from telar_checkpoint import FileStore, TelarSaver

    saver = TelarSaver(FileStore(directory, fsync=False), max_history=max_history)
    graph, config = _graph(saver), {"configurable": {"thread_id": "big"}}
    doc = {"text": "x" * (mb * 1024 * 1024)}
    sizes, started = [], time.perf_counter()
    for turn in range(turns):
        graph.invoke({"doc": doc} if turn == 0 else {}, config)
        sizes.append(sum(p.stat().st_size for p in directory.rglob("*.jsonl")))
    return {"seconds": round(time.perf_counter() - started, 2), "largest_mb": round(max(sizes) / 2**20, 1),
            "final_mb": round(sizes[-1] / 2**20, 1)}


def cold_read(directory: Path) -> dict[str, Any]:
    """In this (new) process: one get_tuple on the stored thread."""
    from telar_checkpoint import FileStore, TelarSaver

    saver = TelarSaver(FileStore(directory, fsync=False))
    started = time.perf_counter()
    got = saver.get_tuple({"configurable": {"thread_id": "big"}})
    seconds = time.perf_counter() - started
    assert got is not None and len(got.checkpoint["channel_values"]["doc"]["text"]) > 0
    return {"cold_get_tuple_s": round(seconds, 2), "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=10)
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--max-history", type=int, default=3)
    parser.add_argument("--cold-read", metavar="DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cold_read:
        print(json.dumps(cold_read(Path(args.cold_read))))
        return
    with tempfile.TemporaryDirectory() as tmp:
        filled = fill(Path(tmp), args.mb, args.turns, args.max_history)
        result = {"mb": args.mb, "turns": args.turns, "max_history": args.max_history, **filled}
        out = subprocess.run([sys.executable, "-m", "benchmarks.storage_bound", "--cold-read", tmp],
                             capture_output=True, text=True, timeout=600, check=True)
        result.update(json.loads(out.stdout))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
