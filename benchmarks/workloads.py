"""The workloads: five, and 2b (a long chat's put). Each runs every contender in one process, interleaved.

Interleaving: a workload is a sequence of rounds, and each round runs the same
step for every contender, in an order rotated by one per round (A B C, B C A, ...),
so drift in the machine's speed (other jobs, thermal, caches) spreads over all
contenders instead of landing on whichever ran last. Times are wall-clock
`perf_counter` nanoseconds; results are stored in milliseconds or microseconds.
"""

from __future__ import annotations

import gc
import math
import os
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from benchmarks.agent import agent_builder, human
from benchmarks.checkpoints import Chain, sample_messages, small_values, telar_lines, thread_config
from benchmarks.contenders import Contender

T = TypeVar("T")


@dataclass
class Settings:
    """Sizes of one run (see `FULL`, `QUICK` in run.py)."""

    turns: int = 100  # workload 1: invokes on one thread
    turn_budget_s: float = 75.0  # workload 1: a contender stops once its invokes took this long
    durability: str = "sync"  # of every invoke: the checkpoint is written before invoke returns
    micro_rounds: int = 200  # workload 2
    long_chat_messages: int = 1000  # workload 2b: the chat's length before the measured puts
    long_chat_rounds: int = 100  # workload 2b: measured puts, one message more each
    scale_levels: tuple[int, ...] = (10, 100, 1000, 5000)  # workload 3
    scale_repeats: int = 15
    max_history: int = 20
    workers: int = 8  # workload 5
    worker_turns: int = 20
    concurrency_rounds: int = 5

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def rotated(items: Sequence[T], k: int) -> list[T]:
    k %= max(len(items), 1)
    return [*items[k:], *items[:k]]


def summary(samples: Sequence[float]) -> dict[str, float | int | None]:
    """Median, 95th percentile (nearest rank), min and count."""
    if not samples:
        return {"median": None, "p95": None, "min": None, "n": 0}
    ordered = sorted(samples)
    return {
        "median": statistics.median(ordered),
        "p95": ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)],
        "min": ordered[0],
        "n": len(ordered),
    }


def timed(action: Callable[[], T]) -> tuple[T, float]:
    """The result of `action` and the seconds it took."""
    start = time.perf_counter_ns()
    result = action()
    return result, (time.perf_counter_ns() - start) / 1e9


# --- 1. the agent loop -----------------------------------------------------------------


def agent_loop(contenders: list[Contender], settings: Settings) -> dict[str, Any]:
    """`turns` invokes on one thread per contender; overhead over the same graph with no checkpointer.

    The no-checkpointer graph runs in every round too, fed the whole conversation so
    far (so its nodes see the same state), and each contender's overhead in a round
    is its invoke time minus the baseline's in that round. A contender whose invokes
    add up to more than `turn_budget_s` stops early; that is reported, not hidden.
    """
    builder = agent_builder()
    graphs = {c.name: builder.compile(checkpointer=c.saver) for c in contenders}
    baseline = builder.compile()
    conversation: list[BaseMessage] = []
    base_ms: list[float] = []
    invoke_ms: dict[str, list[float]] = {c.name: [] for c in contenders}
    spent = {c.name: 0.0 for c in contenders}
    active: list[Contender | None] = [None, *contenders]  # None: the baseline
    for turn in range(settings.turns):
        for c in rotated(active, turn):
            if c is None:
                out, seconds = timed(lambda: baseline.invoke({"messages": [*conversation, human(turn)]}))
                conversation = out["messages"]
                base_ms.append(seconds * 1e3)
                continue
            config = thread_config("agent")
            graph = graphs[c.name]
            _, seconds = timed(lambda: graph.invoke({"messages": [human(turn)]}, config, durability=settings.durability))
            invoke_ms[c.name].append(seconds * 1e3)
            spent[c.name] += seconds
            if spent[c.name] > settings.turn_budget_s and turn + 1 < settings.turns:
                log(f"  agent loop: {c.name} stops after {turn + 1} turns ({spent[c.name]:.0f} s, over the budget)")
                active.remove(c)
        if turn % 10 == 9:
            log(f"  agent loop: turn {turn + 1}/{settings.turns}")
        gc.collect()
    results: dict[str, Any] = {"baseline": {"invoke_ms": summary(base_ms), "samples_ms": base_ms}}
    for c in contenders:
        times = invoke_ms[c.name]
        overhead = [t - b for t, b in zip(times, base_ms)]
        results[c.name] = {
            "turns": len(times),
            "stopped_early": len(times) < settings.turns,
            "overhead_ms": summary(overhead),
            "invoke_ms": summary(times),
            "overhead_samples_ms": overhead,
        }
    return results


# --- 4. storage (right after the agent loop, before anything else is written) ------------


def storage(contenders: list[Contender]) -> dict[str, Any]:
    results = {}
    for c in contenders:
        if c.storage is None:  # the floor serializes nothing: there are no bytes to weigh
            continue
        held = c.storage()
        checkpoints = sum(1 for _ in c.saver.list(thread_config("agent")))

        def per(n: int, checkpoints: int = checkpoints) -> float | None:
            return round(n / checkpoints, 1) if checkpoints else None

        results[c.name] = {
            "checkpoints": checkpoints,
            "bytes": held.bytes,
            "other_bytes": held.other,
            "per_checkpoint": per(held.bytes),
            "other_per_checkpoint": per(held.other),
            "how": held.how,
        }
    return results


# --- 2. micro operations -------------------------------------------------------------------

MICRO_OPS = ("put", "put_writes", "get_tuple latest", "get_tuple by id", "list limit=10")


def micro(contenders: list[Contender], settings: Settings) -> dict[str, Any]:
    """Each round: a put (a chat of 10 messages and a counter, both channels in `new_versions`),
    a put_writes on it, two reads and a list.

    The thread grows by one checkpoint a round, from a few to `micro_rounds`; the
    scaling workload is the one that isolates thread length.
    """
    messages = sample_messages(10)
    extra = [AIMessage(content="a pending write of one message", id="pending-1")]
    chains = {c.name: Chain(c.saver, "micro") for c in contenders}
    for c in contenders:  # a few checkpoints to read from at the start
        for step in range(3):
            chains[c.name].put({"messages": messages, "step": step})
    samples: dict[str, dict[str, list[float]]] = {c.name: {op: [] for op in MICRO_OPS} for c in contenders}
    for round_ in range(settings.micro_rounds):
        for c in rotated(contenders, round_):
            saver, chain, us = c.saver, chains[c.name], samples[c.name]
            config, checkpoint, metadata, versions = chain.next({"messages": messages, "step": round_})
            stored, seconds = timed(lambda: saver.put(config, checkpoint, metadata, versions))  # type: ignore[arg-type]
            us["put"].append(seconds * 1e6)
            chain.done(stored, versions)
            _, seconds = timed(lambda: saver.put_writes(stored, [("messages", extra), ("step", round_)], f"task-{round_}"))
            us["put_writes"].append(seconds * 1e6)
            _, seconds = timed(lambda: saver.get_tuple(thread_config("micro")))
            us["get_tuple latest"].append(seconds * 1e6)
            old = chain.ids[len(chain.ids) // 2]
            _, seconds = timed(lambda: saver.get_tuple(thread_config("micro", old)))
            us["get_tuple by id"].append(seconds * 1e6)
            _, seconds = timed(lambda: list(saver.list(thread_config("micro"), limit=10)))
            us["list limit=10"].append(seconds * 1e6)
        if round_ % 50 == 49:
            log(f"  micro: round {round_ + 1}/{settings.micro_rounds}")
    return {name: {op: summary(v) for op, v in ops.items()} for name, ops in samples.items()}


# --- 2b. put of a long chat, one message more each put ------------------------------------------


def chat_message(i: int) -> BaseMessage:
    """Message `i` of the long chat (about 150 bytes, with an id, as `add_messages` gives one)."""
    kind = HumanMessage if i % 2 == 0 else AIMessage
    return kind(content=f"Message {i}: a sentence of ordinary length, about the weather and the trains.", id=f"chat-{i:06d}")


def long_chat(contenders: list[Contender], settings: Settings) -> dict[str, Any]:
    """`put` of a chat of `long_chat_messages` messages that grows by one message a put.

    Each contender's thread starts with one checkpoint holding the first
    `long_chat_messages` messages (not timed). Each round then puts a child checkpoint whose
    messages channel is a new list, the parent's message objects plus one new message, and
    whose `new_versions` names only that channel: what LangGraph passes after a node added
    one message with `add_messages`. Every checkpoint holds the whole conversation.
    """
    n = settings.long_chat_messages
    chains = {c.name: Chain(c.saver, "long-chat") for c in contenders}
    # message objects of its own for each contender: no saver sees objects another has encoded
    chats = {c.name: [chat_message(i) for i in range(n)] for c in contenders}
    for c in contenders:
        chains[c.name].put({"messages": chats[c.name]})
    samples: dict[str, list[float]] = {c.name: [] for c in contenders}
    for round_ in range(settings.long_chat_rounds):
        for c in rotated(contenders, round_):
            grown = chats[c.name] = [*chats[c.name], chat_message(n + round_)]
            config, checkpoint, metadata, versions = chains[c.name].next({"messages": grown})
            stored, seconds = timed(lambda: c.saver.put(config, checkpoint, metadata, versions))  # type: ignore[arg-type]
            samples[c.name].append(seconds * 1e6)
            chains[c.name].done(stored, versions)
        if round_ % 50 == 49:
            log(f"  long chat: round {round_ + 1}/{settings.long_chat_rounds}")
    return {
        name: {"put_us": summary(us), "messages": [n + 1, n + len(us)], "samples_us": us} for name, us in samples.items()
    }


# --- 3. scaling with thread length -------------------------------------------------------------

SCALE_OPS = ("put", "put_writes", "get_tuple")


@dataclass
class _Scaled:
    """One thread measured at one length: a contender, unbounded or with max_history."""

    contender: Contender
    variant: str  # "unbounded" or "max_history=N"
    saver: Any
    chain: Chain
    level: int


def scaling(contenders: list[Contender], settings: Settings) -> dict[str, Any]:
    """put, put_writes and get_tuple on threads of each length in `scale_levels`.

    Every (saver, length) pair has a thread of its own, all built first, so the
    rounds interleave lengths as well as savers: a burst of noise (a neighbour's
    fsyncs, say) lands on every length alike. TelarSaver threads are written whole
    from codec-encoded lines (with max_history, trimmed as N puts would leave them);
    other savers' threads grow by real puts (SqliteSaver's with ``synchronous=OFF``
    while building, to save time).
    """
    levels = sorted(settings.scale_levels)
    mh = settings.max_history
    scaled: list[_Scaled] = []
    for c in contenders:
        variants = [("unbounded", c.saver)] + ([(f"max_history={mh}", c.telar(mh))] if c.is_telar else [])
        for tag, (variant, saver) in enumerate(variants):
            for level in levels:
                scaled.append(_Scaled(c, variant, saver, Chain(saver, f"scale-{tag}-{level}"), level))
    lines: list[str] = []
    ids: list[str] = []
    telar = [s for s in scaled if s.contender.is_telar]
    if telar:
        lines, ids = telar_lines(telar[0].saver.codec, levels[-1])
    for s in scaled:
        _, seconds = timed(lambda: _grow(s, lines, ids, mh))
        if seconds > 5:
            log(f"  scaling: built {s.contender.name} ({s.variant}) to {s.level} checkpoints in {seconds:.0f} s")
    # Building leaves megabytes of dirty pages (SqliteSaver builds with synchronous=OFF): flush them
    # first, or the fsyncs measured next wait for that writeback.
    os.sync()
    time.sleep(0.5)
    log(f"  scaling: built {len(scaled)} threads")
    samples: dict[str, dict[str, dict[int, dict[str, list[float]]]]] = {}
    for r in range(settings.scale_repeats):
        for s in rotated(scaled, r):
            us = samples.setdefault(s.contender.name, {}).setdefault(s.variant, {}).setdefault(
                s.level, {op: [] for op in SCALE_OPS}
            )
            config, checkpoint, metadata, versions = s.chain.next(small_values(len(s.chain.ids)))
            stored, seconds = timed(lambda: s.saver.put(config, checkpoint, metadata, versions))
            us["put"].append(seconds * 1e6)
            s.chain.done(stored, versions)
            _, seconds = timed(lambda: s.saver.put_writes(stored, [("step", r)], f"task-{r}"))
            us["put_writes"].append(seconds * 1e6)
            _, seconds = timed(lambda: s.saver.get_tuple(thread_config(s.chain.thread_id)))
            us["get_tuple"].append(seconds * 1e6)
    return {
        name: {
            variant: {str(level): {op: summary(v) for op, v in ops.items()} for level, ops in sorted(by_level.items())}
            for variant, by_level in variants.items()
        }
        for name, variants in samples.items()
    }


def _grow(s: _Scaled, lines: list[str], ids: list[str], max_history: int) -> None:
    """Bring the thread of `s` to `s.level` checkpoints."""
    c = s.contender
    if c.is_telar:
        text = "".join(lines[: s.level])
        if s.variant != "unbounded":
            text = s.saver.codec.trim(text, max_history)
        assert c.store is not None
        c.store.write(s.chain.thread_id, text)
        s.chain.ids = list(ids[: s.level])
        s.chain.versions = {"step": s.level, "note": s.level}
        return
    conn = getattr(c.saver, "conn", None) if c.name == "SqliteSaver" else None
    if conn is not None:
        conn.execute("PRAGMA synchronous = OFF")
    try:
        while len(s.chain.ids) < s.level:
            s.chain.put(small_values(len(s.chain.ids)))
    finally:
        if conn is not None:
            conn.execute("PRAGMA synchronous = FULL")


# --- 5. concurrency ---------------------------------------------------------------------------


def concurrency(contenders: list[Contender], settings: Settings) -> dict[str, Any]:
    """`workers` Python threads, each invoking the agent loop on a thread id of its own, all at once.

    One process: the threads share the GIL, so only I/O waits (fsync, the network)
    overlap; the encoding work of every worker runs one at a time.
    """
    builder = agent_builder()
    rates: dict[str, list[float]] = {c.name: [] for c in contenders}
    for round_ in range(settings.concurrency_rounds):
        for c in rotated(contenders, round_):
            graph = builder.compile(checkpointer=c.saver)
            tag = uuid.uuid4().hex[:6]
            start = threading.Barrier(settings.workers + 1)
            errors: list[BaseException] = []

            def work(worker: int) -> None:
                config = thread_config(f"conc-{tag}-{worker}")
                start.wait()
                try:
                    for turn in range(settings.worker_turns):
                        graph.invoke({"messages": [human(turn)]}, config, durability=settings.durability)
                except BaseException as exc:  # reported by the main thread
                    errors.append(exc)

            threads = [threading.Thread(target=work, args=(w,)) for w in range(settings.workers)]
            for t in threads:
                t.start()
            start.wait()
            began = time.perf_counter()
            for t in threads:
                t.join()
            elapsed = time.perf_counter() - began
            if errors:
                raise RuntimeError(f"concurrency: {c.name} failed: {errors[0]!r}") from errors[0]
            rates[c.name].append(settings.workers * settings.worker_turns / elapsed)
            log(f"  concurrency: {c.name} round {round_ + 1}: {rates[c.name][-1]:.1f} invokes/s")
    return {
        name: {"invokes_per_s": statistics.median(r), "rounds": r, "workers": settings.workers, "turns": settings.worker_turns}
        for name, r in rates.items()
    }
