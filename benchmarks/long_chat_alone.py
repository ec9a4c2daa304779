"""The 1,000-message put of the full benchmark (workload 2b), timed apart from the other contenders.

    python -m benchmarks.long_chat_alone [--rounds 200] [--ballast N]

One thread per saver, Telar/memory and InMemorySaver, holding a chat of 1,000 messages; each
round puts a child checkpoint whose messages grow by one (what `add_messages` leaves), each
saver in turn, timed with `workloads.timed`. `--ballast N` keeps N small dicts alive beside
them, for a heap the size of the full run's (the cost of Python's garbage collector grows with
it). Prints one JSON line: the median µs of each and their ratio. PERFORMANCE.md ("The runs of
2026-12-06") gives the runs made with it.
"""

from __future__ import annotations

import argparse
import json
import statistics
from typing import Any

from langgraph.checkpoint.memory import InMemorySaver

from benchmarks.checkpoints import Chain
from benchmarks.workloads import chat_message, timed
from telar_checkpoint import TelarSaver
from telar_checkpoint.stores.memory import MemoryStore

MESSAGES = 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--ballast", type=int, default=0, help="small objects kept alive beside the savers")
    args = parser.parse_args()
    ballast = [{"item": [i]} for i in range(args.ballast)]
    savers: dict[str, Any] = {"InMemorySaver": InMemorySaver(), "Telar/memory": TelarSaver(MemoryStore())}
    chains = {name: Chain(saver, "long-chat") for name, saver in savers.items()}
    chats = {name: [chat_message(i) for i in range(MESSAGES)] for name in savers}
    for name, chain in chains.items():
        chain.put({"messages": chats[name]})
    samples: dict[str, list[float]] = {name: [] for name in savers}
    for round_ in range(args.rounds):
        for name, chain in chains.items():
            grown = chats[name] = [*chats[name], chat_message(MESSAGES + round_)]
            config, checkpoint, metadata, versions = chain.next({"messages": grown})
            stored, seconds = timed(lambda: savers[name].put(config, checkpoint, metadata, versions))  # noqa: B023
            samples[name].append(seconds * 1e6)
            chain.done(stored, versions)
    medians = {name: statistics.median(us) for name, us in samples.items()}
    ratio = medians["Telar/memory"] / medians["InMemorySaver"]
    print(json.dumps({**{f"{name}_us": round(us, 1) for name, us in medians.items()}, "ratio": round(ratio, 3), "ballast": len(ballast)}))


if __name__ == "__main__":
    main()
