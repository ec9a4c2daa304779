"""Where a saver's time goes: pyinstrument over the agent loop, or over puts on a long thread.

    python -m benchmarks.profile Telar/file --turns 40          # agent loop, profiles the last 10 turns
    python -m benchmarks.profile Telar/redis --scale 5000       # put/put_writes/get_tuple at 5000 checkpoints

Needs pyinstrument (`pip install pyinstrument`); prints the call tree to stdout.
pyinstrument sees only the calling thread, and LangGraph runs checkpoint writes in
executor threads: for the agent loop, sample every thread with py-spy instead,
counting time spent waiting (fsync, the network) too:

    py-spy record --idle --threads -f raw -o loop.txt -- python -m benchmarks.profile Telar/file --profiler none
"""

from __future__ import annotations

import argparse
import sys
import threading
from typing import Any

from benchmarks.agent import agent_builder, human
from benchmarks.checkpoints import Chain, small_values, telar_lines, thread_config
from benchmarks.contenders import ALL, Lab, open_contenders


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile", description=__doc__.split("\n\n")[0])
    parser.add_argument("saver", choices=ALL)
    parser.add_argument("--turns", type=int, default=40, help="agent-loop turns in all (default 40)")
    parser.add_argument("--profiled", type=int, default=10, help="how many of the last turns (or calls) to profile")
    parser.add_argument("--scale", type=int, help="profile put/put_writes/get_tuple on a thread this long instead")
    parser.add_argument("--max-history", type=int, help="TelarSaver's max_history for --scale")
    parser.add_argument("--workers", type=int, help="run the agent loop in this many threads at once (no pyinstrument)")
    parser.add_argument("--profiler", choices=["pyinstrument", "none"], default="pyinstrument",
                        help="none: just run (under py-spy, say)")  # fmt: skip
    args = parser.parse_args(argv)
    profiler = _Nothing()
    if args.profiler == "pyinstrument":
        from pyinstrument import Profiler

        profiler = Profiler(interval=0.0005)
    lab = Lab.create()
    (contender,) = open_contenders([args.saver], lab)
    try:
        if args.scale:
            saver = contender.telar(args.max_history) if contender.is_telar else contender.saver
            chain = Chain(saver, "profile")
            if contender.is_telar:
                lines, ids = telar_lines(saver.codec, args.scale)
                contender.store.write("profile", "".join(lines))  # type: ignore[union-attr]
                chain.ids, chain.versions = ids, {"step": args.scale, "note": args.scale}
            else:
                while len(chain.ids) < args.scale:
                    chain.put(small_values(len(chain.ids)))
            with profiler:
                for r in range(args.profiled):
                    stored = chain.put(small_values(len(chain.ids)))
                    saver.put_writes(stored, [("step", r)], f"task-{r}")
                    saver.get_tuple(thread_config("profile"))
        elif args.workers:
            graph = agent_builder().compile(checkpointer=contender.saver)
            threads = [
                threading.Thread(target=_loop, args=(graph, f"profile-{w}", args.turns)) for w in range(args.workers)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        else:
            graph = agent_builder().compile(checkpointer=contender.saver)
            config = thread_config("profile")
            for turn in range(args.turns):
                if turn == args.turns - args.profiled:
                    profiler.start()
                graph.invoke({"messages": [human(turn)]}, config, durability="sync")
            profiler.stop()
    finally:
        contender.close()
        lab.cleanup()
    if args.profiler == "pyinstrument":
        print(profiler.output_text(unicode=True, color=False, show_all=False))
    return 0


def _loop(graph: Any, thread_id: str, turns: int) -> None:
    for turn in range(turns):
        graph.invoke({"messages": [human(turn)]}, thread_config(thread_id), durability="sync")


class _Nothing:
    """A profiler that does not profile."""

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def __enter__(self) -> None: ...

    def __exit__(self, *exc: object) -> None: ...


if __name__ == "__main__":
    sys.exit(main())
