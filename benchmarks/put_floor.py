"""What a put must cost at least when it stores exact JSON lines: the floor of our design.

    python -m benchmarks.put_floor            # 10-message and empty chats, 2,000 puts each, alone
    python -m benchmarks.put_floor --runs 3

`LineFloor.put` does what every put of ours must do and nothing else: the config's thread, the
metadata made plain (as `changes.put_change` does), the changed channels encoded by our encoder,
one JSON line, appended to a list under a lock. No history, no rules (no replaced branch, no
`max_history`, no list stored as what it added), no caches, no index. Each saver runs alone in a
process of its own, puts one after another on one thread (the micro workload's checkpoints);
the table gives each process's median put, InMemorySaver's beside ours and the floor's.
What TelarSaver costs above the floor is its history and write path, not encoding
(docs/PERFORMANCE.md, the runs of 2026-12-04 and 2026-12-05).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
from typing import Any

import orjson
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import Checkpoint, CheckpointMetadata
from langgraph.checkpoint.memory import InMemorySaver

from benchmarks.checkpoints import Chain, sample_messages
from benchmarks.workloads import timed
from telar_checkpoint import TelarSaver
from telar_checkpoint.changes import stored_metadata, thread_and_ns
from telar_checkpoint.format import plain_metadata
from telar_checkpoint.serializer._encode import to_jsonable
from telar_checkpoint.stores.memory import MemoryStore

SAVERS = ("InMemorySaver", "floor", "Telar/memory")


class LineFloor:
    """A put that encodes and appends one exact JSON line, and nothing more (see the module)."""

    def __init__(self) -> None:
        self.lines: dict[str, list[str]] = {}
        self._lock = threading.Lock()
        self._versions = InMemorySaver()

    def get_next_version(self, current: Any, channel: Any) -> Any:
        return self._versions.get_next_version(current, channel)

    def put(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata, new_versions: dict[str, Any]
    ) -> RunnableConfig:
        thread_id, ns = thread_and_ns(config)
        values = checkpoint["channel_values"]
        line = {
            "format": 1, "kind": "checkpoint", "id": checkpoint["id"], "parent": config["configurable"].get("checkpoint_id"),
            "metadata": plain_metadata(stored_metadata(config, metadata)),
            "checkpoint": {k: checkpoint[k] for k in ("v", "ts", "channel_versions", "versions_seen")},  # type: ignore[literal-required]
            "values": {ch: to_jsonable(values[ch]) for ch in new_versions if ch in values},
        }  # fmt: skip
        text = orjson.dumps(line).decode()
        with self._lock:
            self.lines.setdefault(thread_id, []).append(text)
        return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint["id"]}}


def median_put(saver_name: str, messages: int, puts: int) -> float:
    """The median put, in µs, of `puts` puts of a `messages`-message chat and a counter."""
    saver: Any = {"InMemorySaver": InMemorySaver, "floor": LineFloor, "Telar/memory": lambda: TelarSaver(MemoryStore())}[saver_name]()
    chat = sample_messages(messages)
    chain = Chain(saver, "floor")
    for step in range(3):
        chain.put({"messages": chat, "step": step})
    times = []
    for step in range(puts):
        config, checkpoint, metadata, versions = chain.next({"messages": chat, "step": step})
        stored, seconds = timed(lambda: saver.put(config, checkpoint, metadata, versions))
        times.append(seconds * 1e6)
        chain.done(stored, versions)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=2, help="processes per saver and chat (default 2)")
    parser.add_argument("--puts", type=int, default=2000)
    parser.add_argument("--one", help=argparse.SUPPRESS)  # "saver,messages": one process's median, as JSON
    args = parser.parse_args(argv)
    if args.one:
        name, messages = args.one.rsplit(",", 1)
        print(json.dumps(median_put(name, int(messages), args.puts)))
        return
    print("| chat | run | InMemorySaver µs | floor µs | Telar/memory µs | floor / InMemorySaver | Telar / InMemorySaver |")
    print("|---|---|---|---|---|---|---|")
    for messages in (10, 0):
        for run in range(1, args.runs + 1):
            found = {}
            for name in SAVERS:  # one process each, in turn
                command = [sys.executable, "-m", "benchmarks.put_floor", "--one", f"{name},{messages}", "--puts", str(args.puts)]
                found[name] = json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout)
            ims, floor, telar = (found[name] for name in SAVERS)
            ratios = f"{floor / ims:.2f} | {telar / ims:.2f}"
            print(f"| {messages} messages | {run} | {ims:.1f} | {floor:.1f} | {telar:.1f} | {ratios} |", flush=True)


if __name__ == "__main__":
    main()
