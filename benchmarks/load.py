"""A server's load (issue 41): many concurrent runs of a chat agent on one store, beside the official savers.

    python -m benchmarks.load                                  # every store and mode, 3 runs each
    python -m benchmarks.load --stores postgres --modes async --concurrency 64 --runs 1

Each run is `concurrency` conversations at once, each its own thread of `--turns` turns: a human
message, an AI tool call, the tool (which asks for approval by an interrupt every
`INTERRUPT_EVERY`-th turn, answered by a resume), an AI answer of about 500 bytes; real
langchain-core messages, fake nodes. Every invoke (a turn, or a resume) is one latency.

Modes: ``async`` (one process, one event loop, ``ainvoke``: the LangGraph server's way),
``processes`` (the same runs spread over `PROCESSES` processes on one store, as server replicas),
``threads`` (one process, a pool of `concurrency` threads calling ``invoke``: a WSGI app). Savers:
Postgres against AsyncPostgresSaver / PostgresSaver (an AsyncConnectionPool / ConnectionPool of
``--pool`` connections, as their documentation sets one up), Redis against the plain Redis savers
(a client on a blocking pool of 64 connections, as our store's: redis-py's default pool refuses
a command past 100 connections, which 64 concurrent runs reach), the memory store against
InMemorySaver (``async`` and ``threads`` only). Telar's
Postgres store gets the same number of connections (`max_size`).

Interleaved: a run gives every saver the same load in turn, in an order that rotates each run;
the report gives each run's ratios (Telar against the official saver of the same run) and their
median. Figures: invokes per second; p50, p99 and p99.9 latency; the event loop's longest stall (a
task that sleeps 2 ms and measures how late it wakes); the saver's longest hold of the loop (its
async methods timed from each resumption to the next suspension, so only the time the saver
itself keeps the loop); the time spent waiting for a connection, per invoke (psycopg_pool's
``requests_wait_ms`` for the official savers, the wait in `AsyncConnections.get` / `Connections.get`
for ours; Redis clients never wait: they open another connection).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import multiprocessing
import os
import statistics
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Command, interrupt

from benchmarks.agent import _answer
from benchmarks.contenders import POSTGRES_URL, REDIS_URL, _drop_redis_prefix, _ensure_database

INTERRUPT_EVERY = 4  # every 4th turn's tool call waits for an approval (an interrupt, then a resume)
PROCESSES = 4
STALL_TICK = 0.002  # seconds the loop watcher sleeps between looks
SAVERS = {  # store -> (official saver, ours), by mode
    "postgres": {"async": ("AsyncPostgresSaver", "Telar/postgres"), "threads": ("PostgresSaver", "Telar/postgres")},
    "redis": {"async": ("AsyncRedisSaver", "Telar/redis"), "threads": ("RedisSaver", "Telar/redis")},
    "memory": {"async": ("InMemorySaver", "Telar/memory"), "threads": ("InMemorySaver", "Telar/memory")},
}


# --- the graph ---------------------------------------------------------------------------------


def _tool_call(state: MessagesState) -> dict[str, Any]:
    turn = len([m for m in state["messages"] if isinstance(m, HumanMessage)])
    call = {"name": "weather", "args": {"city": f"city-{turn}", "day": "tomorrow"}, "id": f"call_{turn:06d}"}
    return {"messages": [AIMessage(content="", tool_calls=[call])]}


def _tool(state: MessagesState) -> dict[str, Any]:
    call = state["messages"][-1].tool_calls[0]  # type: ignore[union-attr]
    turn = int(call["id"].split("_")[1])
    if turn % INTERRUPT_EVERY == 0:
        interrupt({"question": f"may I look up the weather in {call['args']['city']}?"})
    content = f'{{"city": "{call["args"]["city"]}", "high": 21, "low": 12, "rain": 0.3}}'
    return {"messages": [ToolMessage(content=content, tool_call_id=call["id"], name="weather")]}


def _answer_node(state: MessagesState) -> dict[str, Any]:
    return {"messages": [AIMessage(content=_answer(len(state["messages"])))]}


async def _atool_call(state: MessagesState) -> dict[str, Any]:
    return _tool_call(state)


async def _atool(state: MessagesState) -> dict[str, Any]:
    return _tool(state)


async def _aanswer(state: MessagesState) -> dict[str, Any]:
    return _answer_node(state)


def agent(asynchronous: bool) -> StateGraph:
    """The chat agent: agent (a tool call) -> tools (an interrupt now and then) -> answer."""
    builder = StateGraph(MessagesState)
    builder.add_node("agent", _atool_call if asynchronous else _tool_call)  # type: ignore[arg-type]
    builder.add_node("tools", _atool if asynchronous else _tool)  # type: ignore[arg-type]
    builder.add_node("answer", _aanswer if asynchronous else _answer_node)  # type: ignore[arg-type]
    builder.add_edge(START, "agent")
    builder.add_edge("agent", "tools")
    builder.add_edge("tools", "answer")
    builder.add_edge("answer", END)
    return builder


# --- the savers --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Spec:
    """What any process needs to open one saver on the run's space (picklable)."""

    name: str
    store: str
    space: str  # a Postgres schema or a Redis key prefix, made for the run
    pool: int
    postgres_url: str = POSTGRES_URL
    redis_url: str = REDIS_URL


@dataclass
class Opened:
    saver: Any
    close: Callable[[], Any]  # a coroutine function for async savers
    waited: Callable[[], float]  # seconds spent waiting for a connection so far


class _Waits:
    """Seconds callers spent in a lender's `get` (our stores' wait for a connection)."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def wrap_sync(self, lender: Any) -> None:
        get = lender.get

        def timed() -> Any:
            start = time.perf_counter()
            try:
                return get()
            finally:
                self.seconds += time.perf_counter() - start

        lender.get = timed

    def wrap_async(self, lender: Any) -> None:
        get = lender.get

        async def timed() -> Any:
            start = time.perf_counter()
            try:
                return await get()
            finally:
                self.seconds += time.perf_counter() - start

        lender.get = timed


def _pool_waited(pool: Any) -> Callable[[], float]:
    return lambda: pool.get_stats().get("requests_wait_ms", 0) / 1000


def _pg_kwargs(schema: str) -> dict[str, Any]:
    from psycopg.rows import dict_row

    return {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row, "options": f"-c search_path={schema}"}


def _telar_postgres(spec: Spec, asynchronous: bool) -> Opened:
    from telar_checkpoint import TelarSaver
    from telar_checkpoint.stores.postgres import PostgresStore

    store = PostgresStore(spec.postgres_url, schema=spec.space, max_size=spec.pool)
    waits = _Waits()
    if asynchronous:
        make = store._async_connections._make

        def made() -> Any:
            lender = make()
            waits.wrap_async(lender)
            return lender

        store._async_connections._make = made
    else:
        waits.wrap_sync(store._connections)
    return Opened(TelarSaver(store), store.aclose if asynchronous else store.close, lambda: waits.seconds)


def open_sync(spec: Spec) -> Opened:
    """The saver of `spec` for sync calls."""
    if spec.name == "Telar/postgres":
        return _telar_postgres(spec, asynchronous=False)
    if spec.name == "PostgresSaver":
        from langgraph.checkpoint.postgres import PostgresSaver
        from psycopg_pool import ConnectionPool

        pool = ConnectionPool(spec.postgres_url, min_size=spec.pool, max_size=spec.pool, open=True, kwargs=_pg_kwargs(spec.space))
        return Opened(PostgresSaver(pool), pool.close, _pool_waited(pool))  # type: ignore[arg-type]
    if spec.name == "Telar/redis":
        from telar_checkpoint import TelarSaver
        from telar_checkpoint.stores.redis import RedisStore

        store = RedisStore(spec.redis_url, prefix=spec.space)
        return Opened(TelarSaver(store), store.close, lambda: 0.0)
    if spec.name == "RedisSaver":
        import redis
        from langgraph_checkpoint_plainredis import RedisSaver

        client = redis.Redis(connection_pool=redis.BlockingConnectionPool.from_url(spec.redis_url, max_connections=64, timeout=30))
        return Opened(RedisSaver(client, prefix=spec.space.rstrip(":")), client.close, lambda: 0.0)
    return _open_memory(spec)


def _open_memory(spec: Spec) -> Opened:
    if spec.name == "Telar/memory":
        from telar_checkpoint import TelarSaver
        from telar_checkpoint.stores import MemoryStore

        return Opened(TelarSaver(MemoryStore()), lambda: None, lambda: 0.0)
    from langgraph.checkpoint.memory import InMemorySaver

    return Opened(InMemorySaver(), lambda: None, lambda: 0.0)


async def open_async(spec: Spec) -> Opened:
    """The saver of `spec` for async calls, opened in the running loop."""
    if spec.name == "Telar/postgres":
        return _telar_postgres(spec, asynchronous=True)
    if spec.name == "AsyncPostgresSaver":
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
        from psycopg_pool import AsyncConnectionPool

        pool = AsyncConnectionPool(spec.postgres_url, min_size=spec.pool, max_size=spec.pool, open=False, kwargs=_pg_kwargs(spec.space))
        await pool.open()
        return Opened(AsyncPostgresSaver(pool), pool.close, _pool_waited(pool))  # type: ignore[arg-type]
    if spec.name == "Telar/redis":
        from telar_checkpoint import TelarSaver
        from telar_checkpoint.stores.redis import RedisStore

        store = RedisStore(spec.redis_url, prefix=spec.space)
        return Opened(TelarSaver(store), store.aclose, lambda: 0.0)
    if spec.name == "AsyncRedisSaver":
        import redis.asyncio
        from langgraph_checkpoint_plainredis import AsyncRedisSaver

        pool = redis.asyncio.BlockingConnectionPool.from_url(spec.redis_url, max_connections=64, timeout=30)
        client = redis.asyncio.Redis(connection_pool=pool)
        return Opened(AsyncRedisSaver(client, prefix=spec.space.rstrip(":")), client.aclose, lambda: 0.0)
    return _open_memory(spec)


@contextmanager
def space(store: str, saver: str) -> Iterator[str]:
    """A schema or key prefix of its own for one saver's run (set up for PostgresSaver's), removed after."""
    name = f"load_{uuid.uuid4().hex[:10]}"
    if store == "postgres":
        import psycopg
        from psycopg import sql

        _ensure_database(POSTGRES_URL)
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
        if saver.endswith("PostgresSaver"):
            from langgraph.checkpoint.postgres import PostgresSaver

            with psycopg.connect(POSTGRES_URL, **_pg_kwargs(name)) as conn:
                PostgresSaver(conn).setup()  # type: ignore[arg-type]
        try:
            yield name
        finally:
            with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
                conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))
    elif store == "redis":
        try:
            yield name + ":"
        finally:
            _drop_redis_prefix(REDIS_URL, name + ":")
    else:
        yield name


# --- measuring ---------------------------------------------------------------------------------


class Collector:
    """The cyclic garbage collector's pauses in this process (`gc.callbacks`): their total and the longest."""

    def __init__(self) -> None:
        self.total = self.longest = 0.0
        self._began = 0.0
        gc.callbacks.append(self._note)

    def _note(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
        else:
            pause = time.perf_counter() - self._began
            self.total += pause
            self.longest = max(self.longest, pause)

    def reset(self) -> None:
        self.longest = 0.0


COLLECTOR = Collector()


class Holds:
    """The longest time a saver's coroutine kept the loop between two suspensions, in seconds:
    on the wall clock, in the thread's CPU time, and in CPU time less the collector's pauses
    (`own`: the saver's code alone; the collector runs wherever an allocation triggers it)."""

    METHODS = ("aget_tuple", "aput", "aput_writes")

    def __init__(self) -> None:
        self.longest = 0.0  # wall time (the process may have been descheduled: the machine's load)
        self.longest_cpu = 0.0  # the thread's CPU time (the collector's pauses included)
        self.longest_own = 0.0  # the thread's CPU time less the collector's pauses
        self.steps = 0

    def wrap(self, saver: Any) -> None:
        for name in self.METHODS:
            setattr(saver, name, self._timed(getattr(saver, name)))

    def _timed(self, method: Callable[..., Any]) -> Callable[..., Any]:
        holds = self

        class Stepped:
            def __init__(self, coro: Any) -> None:
                self.coro = coro

            def __await__(self) -> Any:
                coro, value, error = self.coro, None, None
                while True:
                    began = (time.perf_counter(), time.thread_time(), COLLECTOR.total)
                    try:
                        sent = coro.throw(error) if error is not None else coro.send(value)
                    except StopIteration as done:
                        holds._note(*began)
                        return done.value
                    except BaseException:
                        holds._note(*began)
                        raise
                    holds._note(*began)
                    try:
                        value, error = (yield sent), None
                    except BaseException as exc:  # (cancellation included: passed on to the coroutine)
                        value, error = None, exc

        async def timed(*args: Any, **kwargs: Any) -> Any:  # (LangGraph wants a coroutine)
            return await Stepped(method(*args, **kwargs))

        return timed

    def _note(self, wall: float, cpu: float, collected: float) -> None:
        self.steps += 1
        cpu = time.thread_time() - cpu
        self.longest = max(self.longest, time.perf_counter() - wall)
        self.longest_cpu = max(self.longest_cpu, cpu)
        self.longest_own = max(self.longest_own, cpu - (COLLECTOR.total - collected))


async def _watch_loop(stop: asyncio.Event, lateness: list[float]) -> None:
    """Note the longest time the loop was held: how late a short sleep wakes."""
    worst = 0.0
    while not stop.is_set():
        start = time.perf_counter()
        await asyncio.sleep(STALL_TICK)
        worst = max(worst, time.perf_counter() - start - STALL_TICK)
    lateness.append(worst)


@dataclass
class Part:
    """What one process measured of one saver's run."""

    latencies: list[float] = field(default_factory=list)
    started: float = 0.0
    ended: float = 0.0
    stall: float = 0.0
    hold: float = 0.0
    hold_cpu: float = 0.0
    hold_own: float = 0.0
    collector: float = 0.0  # the collector's longest pause
    waited: float = 0.0


def _conversation(conversation: int, turn: int) -> dict[str, Any]:
    return {"messages": [HumanMessage(content=f"Turn {turn} of conversation {conversation}: the weather in city {turn}?")]}


async def _converse(graph: Any, thread_id: str, turns: int, conversation: int, latencies: list[float]) -> None:
    config = {"configurable": {"thread_id": thread_id}}
    for turn in range(1, turns + 1):
        start = time.perf_counter()
        result = await graph.ainvoke(_conversation(conversation, turn), config)
        latencies.append(time.perf_counter() - start)
        if "__interrupt__" in result:
            start = time.perf_counter()
            await graph.ainvoke(Command(resume="yes"), config)
            latencies.append(time.perf_counter() - start)


def _converse_sync(graph: Any, thread_id: str, turns: int, conversation: int, latencies: list[float]) -> None:
    config = {"configurable": {"thread_id": thread_id}}
    for turn in range(1, turns + 1):
        start = time.perf_counter()
        result = graph.invoke(_conversation(conversation, turn), config)
        latencies.append(time.perf_counter() - start)
        if "__interrupt__" in result:
            start = time.perf_counter()
            graph.invoke(Command(resume="yes"), config)
            latencies.append(time.perf_counter() - start)


async def run_async(spec: Spec, conversations: range, turns: int, tag: str, start_at: Any = None) -> Part:
    """`conversations` at once on one event loop (`start_at`: a barrier the processes wait at)."""
    opened = await open_async(spec)
    try:
        return await _run_opened(opened, conversations, turns, tag, start_at, spec.pool)
    finally:
        closed = opened.close()  # (a psycopg pool left open hangs the loop's shutdown)
        if asyncio.iscoroutine(closed):
            await closed


async def _run_opened(opened: Opened, conversations: range, turns: int, tag: str, start_at: Any, pool: int) -> Part:
    graph = agent(asynchronous=True).compile(checkpointer=opened.saver)
    holds = Holds()
    holds.wrap(graph.checkpointer)
    part = Part()
    stop, lateness = asyncio.Event(), []
    # not timed: a first turn of a conversation of its own (the schema made), then as many reads at
    # once as the saver has connections (they are open, as the official savers' pools open theirs)
    await graph.ainvoke(_conversation(-1, 1), {"configurable": {"thread_id": f"{tag}-warm-{os.getpid()}"}})
    await asyncio.gather(*(graph.checkpointer.aget_tuple({"configurable": {"thread_id": f"{tag}-w{i}"}}) for i in range(pool)))
    waited_before, holds.longest, holds.longest_cpu, holds.longest_own = opened.waited(), 0.0, 0.0, 0.0
    COLLECTOR.reset()
    if start_at is not None:
        await asyncio.to_thread(start_at.wait, 120)
    watcher = asyncio.create_task(_watch_loop(stop, lateness))
    part.started = time.time()
    await asyncio.gather(*(_converse(graph, f"{tag}-{i}", turns, i, part.latencies) for i in conversations))
    part.ended = time.time()
    stop.set()
    await watcher
    part.stall, part.waited = lateness[0], opened.waited() - waited_before
    part.hold, part.hold_cpu, part.hold_own, part.collector = holds.longest, holds.longest_cpu, holds.longest_own, COLLECTOR.longest
    return part


def run_threads(spec: Spec, conversations: range, turns: int, tag: str) -> Part:
    """`conversations` at once, each on a thread of a pool as large."""
    opened = open_sync(spec)
    graph = agent(asynchronous=False).compile(checkpointer=opened.saver)
    graph.invoke(_conversation(-1, 1), {"configurable": {"thread_id": f"{tag}-warm"}})
    with ThreadPoolExecutor(max_workers=spec.pool) as warm:  # the connections open, as in `run_async`
        list(warm.map(lambda i: graph.checkpointer.get_tuple({"configurable": {"thread_id": f"{tag}-w{i}"}}), range(spec.pool)))
    part, waited_before = Part(), opened.waited()
    lock = threading.Lock()

    def one(i: int) -> None:
        mine: list[float] = []
        _converse_sync(graph, f"{tag}-{i}", turns, i, mine)
        with lock:
            part.latencies.extend(mine)

    with ThreadPoolExecutor(max_workers=len(conversations)) as pool:
        part.started = time.time()
        list(pool.map(one, conversations))
        part.ended = time.time()
    part.waited = opened.waited() - waited_before
    opened.close()
    return part


def _process_main(spec: Spec, conversations: range, turns: int, tag: str, start_at: Any, results: Any) -> None:
    try:
        results.put(asdict(asyncio.run(run_async(spec, conversations, turns, tag, start_at))))
    except BaseException as exc:
        results.put({"error": repr(exc)})
        raise


def run_processes(spec: Spec, concurrency: int, turns: int, tag: str) -> Part:
    """`concurrency` conversations spread over `PROCESSES` processes of one event loop each, on one store."""
    context = multiprocessing.get_context("spawn")
    start_at, results = context.Barrier(PROCESSES), context.Queue()
    share = concurrency // PROCESSES
    workers = [
        context.Process(target=_process_main, args=(spec, range(p * share, (p + 1) * share), turns, tag, start_at, results))
        for p in range(PROCESSES)
    ]
    for worker in workers:
        worker.start()
    parts = [results.get(timeout=900) for _ in workers]
    for worker in workers:
        worker.join(60)
    errors = [p["error"] for p in parts if "error" in p]
    if errors:
        raise RuntimeError(f"{spec.name}: a process failed: {errors[0]}")
    whole = Part(started=min(p["started"] for p in parts), ended=max(p["ended"] for p in parts))
    for p in parts:
        whole.latencies.extend(p["latencies"])
        for name in ("stall", "hold", "hold_cpu", "hold_own", "collector"):
            setattr(whole, name, max(getattr(whole, name), p[name]))
        whole.waited += p["waited"]
    return whole


# --- one run of every saver, and the report ----------------------------------------------------


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def figures(part: Part) -> dict[str, float]:
    n = len(part.latencies)
    return {
        "invokes": n,
        "throughput": n / (part.ended - part.started),
        "p50_ms": 1000 * statistics.median(part.latencies),
        "p99_ms": 1000 * _quantile(part.latencies, 0.99),
        "p999_ms": 1000 * _quantile(part.latencies, 0.999),
        "stall_ms": 1000 * part.stall,
        "hold_ms": 1000 * part.hold,
        "hold_cpu_ms": 1000 * part.hold_cpu,
        "hold_own_ms": 1000 * part.hold_own,
        "collector_ms": 1000 * part.collector,
        "wait_ms_per_invoke": 1000 * part.waited / n,
    }


def measure(store: str, mode: str, name: str, concurrency: int, turns: int, pool: int) -> dict[str, float]:
    with space(store, name) as where:
        spec = Spec(name, store, where, pool)
        tag = f"{uuid.uuid4().hex[:6]}"
        if mode == "async":
            part = asyncio.run(run_async(spec, range(concurrency), turns, tag))
        elif mode == "processes":
            part = run_processes(spec, concurrency, turns, tag)
        else:
            part = run_threads(spec, range(concurrency), turns, tag)
    return figures(part)


def _line(name: str, f: dict[str, float]) -> str:
    return (
        f"{name} {f['throughput']:.0f}/s p50 {f['p50_ms']:.0f} p99 {f['p99_ms']:.0f} p99.9 {f['p999_ms']:.0f} ms, "
        f"stall {f['stall_ms']:.1f} hold {f['hold_ms']:.1f} (cpu {f['hold_cpu_ms']:.1f}, own {f['hold_own_ms']:.1f}) "
        f"gc {f['collector_ms']:.1f} wait {f['wait_ms_per_invoke']:.2f}"
    )


TARGETS = {"throughput": (">=", 2.0), "p99": ("<=", 0.6)}  # Telar / the official saver, median of the runs
HOLD_TARGET_MS = 20.0  # the saver's own longest hold of the loop


def report(rows: list[dict[str, Any]]) -> str:
    """Markdown: every run's figures, then per store, mode and concurrency the median of the
    ratios against the targets."""
    lines = [
        "| store | mode | runs at once | run | saver | invokes/s | p50 ms | p99 ms | p99.9 ms | loop stall ms | saver's hold ms "
        "(own) | collector's pause ms | connection wait ms/invoke |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    groups: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault((row["store"], row["mode"], row["concurrency"]), []).append(row)
        for name in (n for n in row if "/" in n or n.endswith("Saver")):
            f = row[name]
            lines.append(
                f"| {row['store']} | {row['mode']} | {row['concurrency']} | {row['run']} | {name} | {f['throughput']:.0f} | "
                f"{f['p50_ms']:.0f} | {f['p99_ms']:.0f} | {f['p999_ms']:.0f} | {f['stall_ms']:.1f} | "
                f"{f['hold_ms']:.1f} ({f.get('hold_own_ms', 0):.1f}) | {f.get('collector_ms', 0):.1f} | {f['wait_ms_per_invoke']:.2f} |"
            )
    lines += ["", "| store | mode | runs at once | throughput x (runs) | median | p99 x (runs) | median | own hold ms, max | targets |",
              "|---|---|---|---|---|---|---|---|---|"]
    for (store, mode, concurrency), runs in groups.items():
        throughput = [r["ratios"]["throughput"] for r in runs]
        p99 = [r["ratios"]["p99"] for r in runs]
        ours = next(n for n in runs[0] if n.startswith("Telar/"))
        hold = max(r[ours].get("hold_own_ms", 0.0) for r in runs)
        met = statistics.median(throughput) >= TARGETS["throughput"][1] and statistics.median(p99) <= TARGETS["p99"][1]
        met = met and (mode == "threads" or hold <= HOLD_TARGET_MS)
        lines.append(
            f"| {store} | {mode} | {concurrency} | {', '.join(f'{x:.2f}' for x in throughput)} | **{statistics.median(throughput):.2f}** | "
            f"{', '.join(f'{x:.2f}' for x in p99)} | **{statistics.median(p99):.2f}** | {hold:.1f} | {'met' if met else 'not met'} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stores", default="postgres,redis,memory")
    parser.add_argument("--modes", default="async,processes,threads")
    parser.add_argument("--concurrency", default="16,64,256")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--pool", type=int, default=16, help="connections of each Postgres saver (per process)")
    parser.add_argument("--out", default="benchmarks/results/load.json", help="appends each run's figures (JSON lines)")
    parser.add_argument("--report", action="store_true", help="print the Markdown tables of --out's runs, and run nothing")
    args = parser.parse_args(argv)
    if args.report:
        print(report([json.loads(line) for line in Path(args.out).read_text().splitlines() if line.strip()]), end="")
        return
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    for store in args.stores.split(","):
        for mode in args.modes.split(","):
            if mode == "processes" and store == "memory":
                continue  # a memory store is one process's
            official, ours = SAVERS[store]["threads" if mode == "threads" else "async"]
            for concurrency in (int(c) for c in args.concurrency.split(",")):
                for run in range(args.runs):
                    order = [official, ours] if run % 2 == 0 else [ours, official]
                    row: dict[str, Any] = {"store": store, "mode": mode, "concurrency": concurrency, "run": run + 1,
                                           "turns": args.turns, "pool": args.pool, "at": time.strftime("%Y-%m-%d %H:%M:%S")}
                    for name in order:
                        row[name] = measure(store, mode, name, concurrency, args.turns, args.pool)
                    a, b = row[ours], row[official]
                    row["ratios"] = {
                        "throughput": a["throughput"] / b["throughput"],
                        "p99": a["p99_ms"] / b["p99_ms"],
                        "p50": a["p50_ms"] / b["p50_ms"],
                    }
                    with out.open("a") as f:
                        f.write(json.dumps(row) + "\n")
                    print(f"{store:8} {mode:9} c={concurrency:<3} run {run + 1}: {_line(ours, a)} | {_line(official, b)} | "
                          f"x{row['ratios']['throughput']:.2f} p99 x{row['ratios']['p99']:.2f}", flush=True)


if __name__ == "__main__":
    main()
