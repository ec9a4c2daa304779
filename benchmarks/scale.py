"""Issue 20's scale benchmark: what each operation costs as the number of threads grows.

    python -m benchmarks.scale --quick                 # levels 100,1000, a smoke run under a minute
    python -m benchmarks.scale                         # levels 100,10000,100000
    python -m benchmarks.scale --levels 100,10000 --only Telar/sqlite,SqliteSaver
    python -m benchmarks.scale --fill text             # TelarSaver stores: copies of one encoded history,
                                                       # each written as a migration does (saver.rewrite)

Each saver is filled with N threads, cumulatively (100, then up to 10^4, ...), each the
history of one run: three checkpoints whose metadata holds `source`, `step`, `parents`, the
thread's own `run_id` and `thread_id`, and a `user_id` among 10 users. At each level every
operation runs on threads chosen at random, and the median time of a few calls is kept. A
saver runs in a child process of its own; a call that passes the timeout is reported as
"> T s" and not tried at higher levels: the parent kills the child and starts another on the
same data (filled again, for the savers that keep it in memory). Results go to
benchmarks/results/scale.{json,md}; see benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import datetime
import gc
import json
import multiprocessing
import os
import random
import shlex
import shutil
import signal
import socket
import sqlite3
import statistics
import sys
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from langgraph.checkpoint.base import BaseCheckpointSaver, empty_checkpoint

from benchmarks.checkpoints import thread_config
from benchmarks.contenders import Lab, server_problems
from benchmarks.run import RESULTS, machine
from benchmarks.workloads import log

CLUSTER_URL = "redis+cluster://127.0.0.1:7000"
TELAR = ["Telar/memory", "Telar/file", "Telar/sqlite", "Telar/postgres", "Telar/redis", "Telar/redis-cluster"]
OFFICIAL = ["InMemorySaver", "SqliteSaver", "PostgresSaver", "PlainRedisSaver"]
ALL = TELAR + OFFICIAL
IN_MEMORY = {"Telar/memory", "InMemorySaver"}  # lose their data with their process
OPS = ("put", "get_tuple", "list", "list_user", "list_run", "delete_for_runs")
SHOWN = {
    "put": "put (on an existing thread)",
    "get_tuple": "get_tuple",
    "list": "list(None, limit=10)",
    "list_user": "list(None, filter={user_id}, limit=10)",
    "list_run": "list(None, filter={run_id})",
    "delete_for_runs": "delete_for_runs([run_id])",
}
METHODS = {op: op if op in ("put", "get_tuple", "delete_for_runs") else "list" for op in OPS}  # the saver method each op calls
USERS = 10  # so that at 100 threads a user holds 30 checkpoints: list(filter user, limit=10) returns 10 at every level
TARGET = 2.0  # time at 10^5 threads / time at 10^2, for the operations across threads


@dataclass(frozen=True)
class Settings:
    """The sizes of one run (`FULL`, `QUICK`)."""

    levels: tuple[int, ...] = (100, 10_000, 100_000)
    reps: int = 5  # calls per operation and level; the median is reported
    timeout_s: float = 60.0  # a call taking longer is reported as "> timeout_s"
    op_budget_s: float = 20.0  # stop repeating an operation at a level once its calls took this long
    fill: str = "put"  # "put": every checkpoint through saver.put; "text": copies of one history, written as a migration does
    fill_workers: int | None = None  # threads filling a saver (None: 1 for in-process savers, 8 for the others)
    fill_budget_s: float = 3600.0  # a fill taking longer ends that saver's run
    jobs: int = 1  # savers measured at once (more than 1 disturbs the times: for smoke runs)
    seed: int = 20


FULL = Settings()
QUICK = Settings(levels=(100, 1000), reps=3, timeout_s=20.0, op_budget_s=1.0, jobs=3)


@dataclass(frozen=True)
class Place:
    """Where a run keeps its data: a directory, Postgres schemas and Redis prefixes named by `tag`."""

    root: str
    tag: str
    postgres_url: str
    redis_url: str
    cluster_url: str = CLUSTER_URL

    def dir(self, name: str) -> Path:
        return Path(self.root) / name.replace("/", "-")

    def schema(self, name: str) -> str:
        return f"scale_{self.tag}_{name.split('/')[-1].lower()}"

    def prefix(self, name: str) -> str:
        return f"scale{self.tag}{name.replace('/', '-')}:"

    @property
    def app(self) -> str:
        """The application_name of our Postgres connections (to end them after a killed child)."""
        return f"telar-scale-{self.tag}"


@dataclass(frozen=True)
class Ids:
    """Thread number i's thread id, run id and user: the same in every process of a run."""

    salt: str

    def _uuid(self, what: str, i: int) -> uuid.UUID:
        return uuid.uuid5(uuid.NAMESPACE_URL, f"{self.salt}/{what}/{i}")

    def thread(self, i: int) -> str:
        return str(self._uuid("thread", i))

    def run(self, i: int) -> str:
        return str(self._uuid("run", i))

    def user(self, i: int) -> str:
        return f"user-{self._uuid('user', i).int % USERS:03d}"


# --- opening savers (in the child) ------------------------------------------------------


def _telar_url(name: str, place: Place) -> tuple[str, dict[str, Any]]:
    """The URL and options `open_store` gets for a TelarSaver store."""
    if name == "Telar/memory":
        return "memory://", {}
    if name == "Telar/file":
        return f"file://{place.dir(name)}", {}
    if name == "Telar/sqlite":
        return f"sqlite:///{place.dir(name) / 'telar.db'}", {}
    if name == "Telar/postgres":
        return place.postgres_url, {"schema": place.schema(name), "application_name": place.app}
    if name == "Telar/redis":
        return place.redis_url, {"prefix": place.prefix(name)}
    return place.cluster_url, {"prefix": place.prefix(name)}


def open_saver(name: str, place: Place) -> tuple[BaseCheckpointSaver[Any], Callable[[], None]]:
    """The saver `name` on its data in `place`, and how to close it (opening it again finds the same data)."""
    if name.startswith("Telar/"):
        from telar_checkpoint import TelarSaver
        from telar_checkpoint.stores import open_store

        url, options = _telar_url(name, place)
        store = open_store(url, **options).store
        return TelarSaver(store), store.close
    if name == "InMemorySaver":
        from langgraph.checkpoint.memory import InMemorySaver

        return InMemorySaver(), lambda: None
    if name == "SqliteSaver":
        from langgraph.checkpoint.sqlite import SqliteSaver

        place.dir(name).mkdir(exist_ok=True)
        conn = sqlite3.connect(place.dir(name) / "saver.db", check_same_thread=False)
        saver = SqliteSaver(conn)
        saver.setup()
        return saver, conn.close
    if name == "PostgresSaver":
        from langgraph.checkpoint.postgres import PostgresSaver
        from psycopg.rows import dict_row
        from psycopg_pool import ConnectionPool

        options = f"-c search_path={place.schema(name)}"
        kwargs = {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row, "options": options, "application_name": place.app}
        pool = ConnectionPool(place.postgres_url, min_size=1, max_size=8, open=True, timeout=30, kwargs=kwargs)
        postgres = PostgresSaver(pool)  # type: ignore[arg-type]
        postgres.setup()
        return postgres, pool.close
    import redis
    from langgraph_checkpoint_plainredis import RedisSaver

    client = redis.Redis.from_url(place.redis_url, socket_connect_timeout=5, socket_timeout=120)
    return RedisSaver(client, prefix=place.prefix(name).rstrip(":")), client.close


# --- one thread's history ---------------------------------------------------------------


def _values(step: int) -> dict[str, Any]:
    """The graph's state at `step`: a question, then its answer."""
    question = "When does the 8:15 to Leeds leave on Sundays, and from which platform?"
    if step < 0:
        return {"__start__": {"question": question}}
    values: dict[str, Any] = {"question": question}
    if step > 0:
        values["answer"] = f"It leaves at 8:15 from platform 4 (answer {step})."
    return values


def put_checkpoint(saver: BaseCheckpointSaver[Any], config: Any, versions: dict[str, Any], step: int, meta: dict[str, Any]) -> Any:
    """Put the checkpoint of `step` after `config`'s; `versions` (the thread's channel versions) is updated."""
    values = _values(step)
    new = {ch: saver.get_next_version(versions.get(ch), None) for ch in values if ch not in versions or step > 0}
    versions.update(new)
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = values
    checkpoint["channel_versions"] = dict(versions)
    checkpoint["versions_seen"] = {"agent": dict(new)} if step >= 0 else {}
    metadata = {"source": "input" if step < 0 else "loop", "step": step, "parents": {}, **meta}
    return saver.put(config, checkpoint, metadata, new)  # type: ignore[arg-type]


def put_history(saver: BaseCheckpointSaver[Any], thread_id: str, run_id: str, user_id: str) -> None:
    """Three checkpoints of one run (input, then two steps) on a new thread."""
    config, versions = thread_config(thread_id), {}
    for step in (-1, 0, 1):
        config = put_checkpoint(saver, config, versions, step, {"run_id": run_id, "user_id": user_id, "thread_id": thread_id})


def history_text(ids: Ids) -> Callable[[int], str]:
    """Thread i's history as TelarSaver stores it: one history put on a memory store, its ids replaced."""
    from telar_checkpoint import TelarSaver
    from telar_checkpoint.stores import MemoryStore

    saver = TelarSaver(MemoryStore())
    template = (ids.thread(-1), ids.run(-1), "user-template")
    put_history(saver, *template)
    text = saver.store.read(template[0]) or ""
    missing = [t for t in template if t not in text]
    if missing:
        raise RuntimeError(f"the encoded history does not hold {missing}: text fill cannot substitute them")
    return lambda i: text.replace(template[0], ids.thread(i)).replace(template[1], ids.run(i)).replace(template[2], ids.user(i))


# --- the child: fill and measure one saver ----------------------------------------------


@dataclass(frozen=True)
class Plan:
    """Where a child starts: the next level and operation, the threads stored, those deleted."""

    level: int = 0  # index into Settings.levels
    op: int = 0  # index into OPS
    filled: int = 0
    deleted: frozenset[int] = frozenset()
    skip: frozenset[str] = frozenset()


class Bench:
    """Fills one saver level by level and times its operations, telling the parent each step."""

    def __init__(self, send: Callable[..., None], name: str, place: Place, settings: Settings) -> None:
        self.send, self.name, self.settings = send, name, settings
        self.saver, self.close = open_saver(name, place)
        self.ids = Ids(place.tag)
        self.live: list[int] = []  # the threads stored and not deleted
        self.filled = 0
        self.workers = settings.fill_workers or (1 if name in IN_MEMORY or name == "SqliteSaver" else 8)

    def run(self, plan: Plan) -> None:
        self.live = [i for i in range(plan.filled) if i not in plan.deleted]
        self.filled, skip = plan.filled, set(plan.skip)
        if plan.filled and self.name in IN_MEMORY:
            self.send("refilled", self.fill(plan.filled, self.live))
        for li in range(plan.level, len(self.settings.levels)):
            level = self.settings.levels[li]
            if self.filled < level:
                todo = list(range(self.filled, level))
                seconds = self.fill(level, todo)
                self.live += todo
                self.filled = level
                self.send("filled", level, seconds, len(self.live), self.mode, self.workers)
            for op in OPS[plan.op if li == plan.level else 0 :]:
                if op not in skip and not self.measure(level, op):
                    skip.add(op)
                self.send("op_done", level, op)

    @property
    def mode(self) -> str:
        return "text" if self.settings.fill == "text" and self.name.startswith("Telar/") else "put"

    def fill(self, level: int, todo: list[int]) -> float:
        """Store threads `todo`, telling the parent how far it got each second; the seconds it took."""
        if self.mode == "text":
            text, saver = history_text(self.ids), self.saver

            def write(i: int) -> None:  # as a migration writes a whole history: its terms first
                thread, history = self.ids.thread(i), text(i)
                saver.rewrite(thread, lambda old: history, text=history)  # type: ignore[attr-defined]

        else:

            def write(i: int) -> None:
                put_history(self.saver, self.ids.thread(i), self.ids.run(i), self.ids.user(i))

        chunks = [todo[j : j + 100] for j in range(0, len(todo), 100)]
        start, done = time.perf_counter(), 0

        def write_all(chunk: list[int]) -> int:
            for i in chunk:
                write(i)
            return len(chunk)

        with concurrent.futures.ThreadPoolExecutor(self.workers) as pool:
            pending = {pool.submit(write_all, c) for c in chunks}
            try:
                while pending:
                    finished, pending = concurrent.futures.wait(pending, timeout=1.0)
                    done += sum(f.result() for f in finished)
                    self.send("fill", level, done, time.perf_counter() - start)
            finally:
                for f in pending:
                    f.cancel()
        return time.perf_counter() - start

    def measure(self, level: int, op: str) -> bool:
        """Time `op` on random threads; False if the saver lacks it."""
        gc.collect()
        rng, spent = random.Random(f"{self.settings.seed}/{level}/{op}"), 0.0
        for _ in range(self.settings.reps):
            if not self.live:
                return True
            at = rng.randrange(len(self.live))
            index = self.live[at]
            if op != "put" and hasattr(self.saver, "rebuild_index"):  # a TelarSaver: a new one, nothing parsed kept,
                self.saver = type(self.saver)(self.saver.store)  # so a small store is not timed from its cache
            call = self.prepare(op, index)
            if op == "delete_for_runs":  # a different run each time
                self.live[at] = self.live[-1]
                self.live.pop()
            self.send("call", level, op, index)
            start = time.perf_counter()
            try:
                found = call()
            except NotImplementedError as exc:
                self.send("unsupported", level, op, f"{type(self.saver).__name__}.{METHODS[op]} raises NotImplementedError {exc}".strip())
                return False
            seconds = time.perf_counter() - start
            self.send("time", level, op, seconds, found)
            spent += seconds
            if spent > self.settings.op_budget_s:
                break
        return True

    def prepare(self, op: str, i: int) -> Callable[[], int]:
        """A call of `op` on thread i, returning how many checkpoints it found (untimed work done first)."""
        saver, thread, run, user = self.saver, self.ids.thread(i), self.ids.run(i), self.ids.user(i)
        if op == "put":
            latest = saver.get_tuple(thread_config(thread))
            assert latest is not None, f"thread {thread} is missing"
            versions, step = dict(latest.checkpoint["channel_versions"]), int(latest.metadata["step"]) + 1
            meta = {"run_id": run, "user_id": user, "thread_id": thread}

            def put() -> int:
                return 1 if put_checkpoint(saver, latest.config, versions, step, meta) else 0

            return put
        if op == "get_tuple":
            return lambda: int(saver.get_tuple(thread_config(thread)) is not None)
        if op == "delete_for_runs":

            def delete() -> int:
                saver.delete_for_runs([run])
                return 1

            return delete
        filters = {"list": (None, 10), "list_user": ({"user_id": user}, 10), "list_run": ({"run_id": run}, None)}
        chosen, limit = filters[op]
        return lambda: sum(1 for _ in saver.list(None, filter=chosen, limit=limit))


def _child(conn: Any, name: str, place: Place, settings: Settings, plan: Plan) -> None:
    """A child process: run `plan` on saver `name`, each step sent to the parent through `conn`."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when a child stops
    send: Callable[..., None] = lambda *message: conn.send(message)  # noqa: E731
    try:
        bench = Bench(send, name, place, settings)
        try:
            bench.run(plan)
        finally:
            bench.close()
        send("end")
    except BaseException:
        send("error", traceback.format_exc())


# --- the parent: one child at a time, killed when a call passes the timeout -------------


@dataclass
class Progress:
    """What the parent knows of one saver's run, to start a new child where a killed one stopped."""

    plan: Plan = field(default_factory=Plan)
    skip: dict[str, str] = field(default_factory=dict)  # op -> why it is not run at higher levels
    unsupported: dict[str, str] = field(default_factory=dict)  # op -> the saver's NotImplementedError
    fills: dict[str, Any] = field(default_factory=dict)
    ops: dict[str, dict[str, Any]] = field(default_factory=lambda: {op: {} for op in OPS})
    notes: list[str] = field(default_factory=list)

    def next_op(self) -> None:
        p = self.plan
        level, op = (p.level, p.op + 1) if p.op + 1 < len(OPS) else (p.level + 1, 0)
        self.plan = dataclasses.replace(p, level=level, op=op, skip=frozenset(self.skip))


def measure_saver(name: str, place: Place, settings: Settings) -> dict[str, Any]:
    """Every level and operation of saver `name`, a child process at a time."""
    progress = Progress()
    while progress.plan.level < len(settings.levels) and _follow_child(name, place, settings, progress):
        pass
    for op, by_level in progress.ops.items():
        for level in map(str, settings.levels):
            cell = by_level.get(level)
            if op in progress.unsupported:
                by_level[level] = {"unsupported": progress.unsupported[op]}
            elif not cell:
                by_level[level] = {"not_run": progress.skip.get(op, "the run stopped before this level")}
            elif cell["seconds"]:
                cell["median_s"] = statistics.median(cell["seconds"])
                expected = {"get_tuple": 1, "list_run": 3}.get(op, 0)
                if min(cell["found"]) < expected:
                    progress.notes.append(f"{op} at {level} found {min(cell['found'])} checkpoint(s) where {expected} were stored")
    return {"fill": progress.fills, "ops": progress.ops, "notes": progress.notes}


def _context() -> Any:
    """Children fork from a server that has imported the savers' packages (fast to start, and safe
    beside threads). Not this module itself: run with -m, the server imports it again as __main__."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["benchmarks.contenders", "benchmarks.run", "telar_checkpoint.stores.url"])
    return context


def _follow_child(name: str, place: Place, settings: Settings, progress: Progress) -> bool:
    """Run a child from `progress.plan` until it ends (False) or a call passes the timeout (True: go on)."""
    context = _context()
    receiver, sender = context.Pipe(duplex=False)
    child = context.Process(target=_child, args=(sender, name, place, settings, progress.plan), daemon=True)
    child.start()
    sender.close()
    idle_s = max(120.0, 2 * settings.timeout_s)  # waits outside a timed call: starting, preparing, each second of a fill
    current: tuple[str, str] | None = None  # (level, op) of the call under way
    try:
        while True:
            limit = settings.timeout_s if current else idle_s
            if not receiver.poll(limit):
                if current is None:
                    progress.notes.append(f"stopped: the child sent nothing for {limit:g} s (plan {progress.plan})")
                    return False
                level, op = current
                cell = progress.ops[op].setdefault(level, {"seconds": [], "found": []})
                cell["timed_out"] = True
                progress.skip[op] = f"> {settings.timeout_s:g} s at {level}"
                log(f"{name} {level} {op}: > {settings.timeout_s:g} s, killed; started again on the same data")
                progress.next_op()
                return True
            try:
                kind, *args = receiver.recv()
            except EOFError:
                progress.notes.append(f"stopped: the child died (exit code {child.exitcode})")
                return False
            if kind == "call":
                current = (str(args[0]), args[1])
                if args[1] == "delete_for_runs":
                    progress.plan = dataclasses.replace(progress.plan, deleted=progress.plan.deleted | {args[2]})
            elif kind == "time":
                cell = progress.ops[args[1]].setdefault(str(args[0]), {"seconds": [], "found": []})
                cell["seconds"].append(args[2])
                cell["found"].append(args[3])
                current = None
            elif kind == "fill" and args[2] > settings.fill_budget_s:
                progress.notes.append(f"stopped: filling to {args[0]} took over {settings.fill_budget_s:g} s ({args[1]} threads done)")
                return False
            elif kind == "filled":
                level, seconds, threads, mode, workers = args
                progress.fills[str(level)] = {"seconds": seconds, "threads": threads, "mode": mode, "workers": workers}
                progress.plan = dataclasses.replace(progress.plan, filled=level)
                log(f"{name}: filled to {level} threads in {seconds:.1f} s ({mode}, {workers} worker(s))")
            elif kind == "refilled":
                progress.notes.append(f"filled again in {args[0]:.1f} s after a child was killed (its data was in memory)")
            elif kind == "unsupported":
                progress.unsupported[args[1]] = progress.skip[args[1]] = args[2]
                log(f"{name}: {args[2]}")
            elif kind == "op_done":
                cell = progress.ops[args[1]].get(str(args[0]), {})
                if cell.get("seconds"):
                    log(f"{name} {args[0]} {args[1]}: median {_shown_s(statistics.median(cell['seconds']))} of {len(cell['seconds'])}")
                progress.next_op()
            elif kind == "error":
                progress.notes.append(f"stopped: {args[0].strip().splitlines()[-1]}")
                log(f"{name} failed:\n{args[0]}")
                return False
            elif kind == "end":
                return False
    finally:
        if child.is_alive():
            child.kill()
        child.join(30)
        receiver.close()


# --- data spaces: made before a saver runs, removed after -------------------------------


def _postgres(place: Place, statements: list[tuple[str, tuple[Any, ...]]]) -> None:
    import psycopg

    with psycopg.connect(place.postgres_url, autocommit=True, connect_timeout=5) as conn:
        conn.execute("SET lock_timeout = '30s'")
        for statement, params in statements:
            conn.execute(statement, params)  # type: ignore[arg-type]


def _drop_keys(client: Any, prefix: str) -> None:
    """Delete the keys under `prefix` (a key at a time, pipelined: a cluster's keys lie in many slots)."""
    pattern = "".join("\\" + c if c in "*?[]\\" else c for c in prefix) + "*"
    keys = list(client.scan_iter(match=pattern, count=1000))
    for start in range(0, len(keys), 1000):
        pipe = client.pipeline(transaction=False)
        for key in keys[start : start + 1000]:
            pipe.delete(key)
        pipe.execute()


def prepare(name: str, place: Place) -> None:
    """Make the space saver `name` needs before its first child (PostgresSaver's schema)."""
    place.dir(name).mkdir(parents=True, exist_ok=True)
    if name == "PostgresSaver":
        _postgres(place, [(f'CREATE SCHEMA "{place.schema(name)}"', ())])


def cleanup(name: str, place: Place) -> None:
    """Remove what saver `name` stored: its directory, schema or keys."""
    shutil.rmtree(place.dir(name), ignore_errors=True)
    if name in ("Telar/postgres", "PostgresSaver"):
        end = "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s AND pid <> pg_backend_pid()"
        _postgres(place, [(end, (place.app,)), (f'DROP SCHEMA IF EXISTS "{place.schema(name)}" CASCADE', ())])
    elif name in ("Telar/redis", "PlainRedisSaver"):
        import redis

        with redis.Redis.from_url(place.redis_url, socket_connect_timeout=5, socket_timeout=60) as client:
            _drop_keys(client, place.prefix(name))
    elif name == "Telar/redis-cluster":
        from redis.cluster import RedisCluster

        client = RedisCluster.from_url(place.cluster_url.replace("redis+cluster://", "redis://"), socket_timeout=60)
        try:
            _drop_keys(client, place.prefix(name))
        finally:
            client.close()


def cluster_problem(place: Place) -> str | None:
    """Why the Redis Cluster store cannot run (`open_store` refuses its URL, nothing answers), or None."""
    from telar_checkpoint.stores import open_store

    try:
        open_store(place.cluster_url, **_telar_url("Telar/redis-cluster", place)[1]).store.close()
    except Exception as exc:
        return f"open_store does not accept {place.cluster_url} yet ({exc})"
    parts = urlsplit(place.cluster_url)
    try:
        socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 7000), timeout=3).close()
    except OSError as exc:
        return f"nothing answers at {parts.hostname}:{parts.port} ({exc})"
    return None


# --- the run and its report ---------------------------------------------------------------


def run(settings: Settings, names: list[str], out_dir: Path | None = RESULTS, data_dir: str | None = None,
        command: str = "", merge: bool = False) -> dict[str, Any]:  # fmt: skip
    """Measure the savers `names`; write scale.json and scale.md to `out_dir` (None: don't).
    `merge`: keep the savers of the `out_dir`'s scale.json that this run does not measure."""
    began = time.time()
    lab = Lab.create(data_dir)
    place = Place(str(lab.root), lab.run_id, lab.postgres_url, lab.redis_url)
    skipped = server_problems(names, lab)
    if "Telar/redis-cluster" in names and (problem := cluster_problem(place)):
        skipped["Telar/redis-cluster"] = problem
    for name, why in skipped.items():
        log(f"{name} skipped: {why}")
    names = [n for n in names if n not in skipped]
    info = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": command,
        "machine": {**machine(names, lab), "cpu": _cpu_model(), "load": os.getloadavg()},
        "settings": dataclasses.asdict(settings),
        "savers": names,
        "skipped": skipped,
    }

    def measure(name: str) -> dict[str, Any]:
        log(f"{name}: levels {', '.join(map(str, settings.levels))}")
        try:
            prepare(name, place)
            return {**measure_saver(name, place, settings), "run": 0}
        finally:
            try:
                cleanup(name, place)
            except Exception as exc:  # go on; say what was left behind
                log(f"cleanup of {name}: {exc}")

    try:
        with concurrent.futures.ThreadPoolExecutor(settings.jobs) as pool:
            savers = dict(zip(names, pool.map(measure, names)))
    finally:
        lab.cleanup()
    info["seconds"] = round(time.time() - began)
    results = {"runs": [info], "savers": savers}
    if merge and out_dir is not None and (out_dir / "scale.json").exists():
        results = merged(json.loads((out_dir / "scale.json").read_text()), results)
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "scale.json").write_text(json.dumps(results, indent=1) + "\n")
        (out_dir / "scale.md").write_text(markdown(results))
        log(f"wrote {out_dir / 'scale.json'} and {out_dir / 'scale.md'}")
    return results


def merged(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """`new`, plus the savers of `old` that `new` did not measure (with the runs they came from)."""
    runs, savers = list(new["runs"]), dict(new["savers"])
    for name, entry in old["savers"].items():
        if name not in savers:
            run_info = old["runs"][entry["run"]]
            if run_info not in runs:
                runs.append(run_info)
            savers[name] = {**entry, "run": runs.index(run_info)}
    return {"runs": runs, "savers": dict(sorted(savers.items(), key=lambda item: ALL.index(item[0])))}


def _cpu_model() -> str:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return "unknown CPU"
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "unknown CPU")


def _shown_s(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale or unit == "µs":
            value = seconds / scale
            return f"{value:.{0 if value >= 100 else 1 if value >= 10 else 2}f} {unit}"
    raise AssertionError("unreachable")


def _cell(cell: dict[str, Any], timeout_s: float) -> str:
    if cell.get("timed_out"):
        return f"> {timeout_s:g} s"
    if "median_s" in cell:
        return _shown_s(cell["median_s"])
    return "n/a" if "unsupported" in cell else "—"


def ratio(by_level: dict[str, dict[str, Any]], timeout_s: float) -> tuple[float, bool, str, str] | None:
    """Time at the largest level measured / time at the smallest: (ratio, a lower bound?, top, bottom)."""
    measured = sorted((int(level), cell) for level, cell in by_level.items() if "median_s" in cell or cell.get("timed_out"))
    if len(measured) < 2 or "median_s" not in measured[0][1]:
        return None
    (bottom, low), (top, high) = measured[0], measured[-1]
    timed_out = bool(high.get("timed_out"))
    return (timeout_s if timed_out else high["median_s"]) / low["median_s"], timed_out, str(top), str(bottom)


def markdown(results: dict[str, Any]) -> str:
    """The report: a row per saver and operation, a column per level, and the ratio of the ends."""
    runs, savers = results["runs"], results["savers"]
    levels = sorted({int(level) for entry in savers.values() for level in entry["ops"]["put"]})
    out = [
        "# Scale benchmark (issue 20)",
        "",
        "Written by `python -m benchmarks.scale` (see benchmarks/README.md). Each thread holds three small checkpoints of "
        "one run; each cell is the median time of one call on a thread chosen at random (the JSON keeps every call's "
        "time). Ratio: time at the largest level measured over time at the smallest, of the medians and of the fastest "
        "calls (which a loaded machine disturbs least: load only adds time) "
        f"(the levels in brackets when they are not the table's last and first); ✗ marks a ratio above {TARGET:g}, the target for the "
        "operations across threads (the list and delete_for_runs rows).",
        "",
    ]
    for k, info in enumerate(runs, 1):
        m = info["machine"]
        servers = ", ".join(f"{s} {v}" for s, v in m.get("servers", {}).items())
        load = f", load average {' '.join(f'{x:.1f}' for x in m['load'])} at the start" if "load" in m else ""
        out.append(
            f"- Run {k}: {info['date']}, commit {m['commit']}, `{info['command']}` ({info['seconds'] / 60:.0f} min); "
            f"{m['cpu']}, {m['cpu_count']} CPUs{load}, {m['platform']}, Python {m['python']}{'; ' + servers if servers else ''}."
        )
        out += [f"  - skipped {name}: {why}" for name, why in info["skipped"].items()]
    out += ["", "Fill times (seconds to add the threads up to each level, levels cumulative):", ""]
    for name, entry in savers.items():
        fills = ", ".join(f"{int(level):,}: {f['seconds']:.1f} s" for level, f in sorted(entry["fill"].items(), key=lambda x: int(x[0])))
        how = {(f["mode"], f["workers"]) for f in entry["fill"].values()}
        shown = "; ".join(f"{mode}, {workers} worker(s)" for mode, workers in sorted(how))
        which = f" (run {entry['run'] + 1})" if len(runs) > 1 else ""
        out.append(f"- {name}{which}: {fills or 'none'} ({shown})")
    ends = (str(levels[-1]), str(levels[0])) if levels else ("", "")
    header = " | ".join(f"{level:,}" for level in levels) + (f" | ratio {levels[-1]:,}/{levels[0]:,}" if levels else "")
    out += ["", f"| saver | operation | {header} | ratio of the fastest calls |", "|---" * (len(levels) + 4) + "|"]
    missing: list[str] = []
    for name, entry in savers.items():
        timeout_s = runs[entry["run"]]["settings"]["timeout_s"]
        for op in OPS:
            by_level = entry["ops"][op]
            cells = [_cell(by_level.get(str(level), {}), timeout_s) for level in levels]
            found = ratio(by_level, timeout_s)
            shown_ratio = ""
            if found:
                value, bound, top, bottom = found
                shown_ratio = (
                    f"{'> ' if bound else ''}{value:,.{0 if value >= 100 else 1 if value >= 10 else 2}f}{' ✗' if value > TARGET else ''}"
                )
                shown_ratio += "" if (top, bottom) == ends else f" ({int(top):,}/{int(bottom):,})"
            fastest = ""
            if found:
                top_s, bottom_s = by_level[top].get("seconds"), by_level[bottom].get("seconds")
                if top_s and bottom_s:
                    fast = min(top_s) / min(bottom_s)
                    fastest = f"{fast:,.{0 if fast >= 100 else 1 if fast >= 10 else 2}f}{' ✗' if fast > TARGET else ''}"
            out.append(f"| {name} | {SHOWN[op]} | {' | '.join(cells)} | {shown_ratio} | {fastest} |")
            reasons: dict[str, list[str]] = {}
            for level, cell in by_level.items():
                reason = cell.get("not_run") or cell.get("unsupported")
                if reason:
                    reasons.setdefault(reason, []).append(f"{int(level):,}")
            missing += [f"- {name} {SHOWN[op]} at {', '.join(at)}: {why}" for why, at in reasons.items()]
    if missing:
        out += ["", "Not measured (n/a: the saver lacks the operation; —: not run):", "", *missing]
    notes = [f"- {name}: {note}" for name, entry in savers.items() for note in entry["notes"]]
    if notes:
        out += ["", "Notes:", "", *notes]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scale", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="levels 100,1000, 3 calls each: a smoke run under a minute")
    parser.add_argument("--levels", help="comma-separated thread counts (full: 100,10000,100000)")
    parser.add_argument("--million", action="store_true", help="allow levels above 100000 (a 10^6 fill takes hours)")
    parser.add_argument("--only", help=f"comma-separated savers (default: all of {', '.join(ALL)})")
    parser.add_argument("--fill", choices=("put", "text"), help="put (default): every checkpoint through saver.put; "
                        "text: TelarSaver stores get copies of one encoded history, their terms recorded as a migration does")  # fmt: skip
    parser.add_argument("--fill-workers", type=int, help="threads filling each saver (default: 1 in-process, 8 otherwise)")
    parser.add_argument("--reps", type=int, help="calls per operation and level (full: 5)")
    parser.add_argument("--jobs", type=int, help="savers measured at once (full: 1; quick: 3, which disturbs the times)")
    parser.add_argument("--timeout", type=float, help="seconds a call may take (full: 60)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where scale.json and scale.md go")
    parser.add_argument("--merge", action="store_true", help="keep the savers of the existing scale.json this run does not measure")
    parser.add_argument("--data-dir", help="where files and SQLite databases go (default: the system temp dir)")
    args = parser.parse_args(argv)
    settings = QUICK if args.quick else FULL
    changes = {"fill": args.fill, "fill_workers": args.fill_workers, "reps": args.reps, "timeout_s": args.timeout, "jobs": args.jobs}
    settings = dataclasses.replace(settings, **{k: v for k, v in changes.items() if v is not None})
    if args.levels:
        settings = dataclasses.replace(settings, levels=tuple(sorted(int(v) for v in args.levels.split(","))))
    if max(settings.levels) > 100_000 and not args.million:
        parser.error("levels above 100000 need --million (filling 10^6 threads takes hours)")
    names = args.only.split(",") if args.only else list(ALL)
    unknown = [n for n in names if n not in ALL]
    if unknown:
        parser.error(f"unknown savers {unknown}; choose from {', '.join(ALL)}")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so `finally` removes schemas and keys
    command = shlex.join(["python", "-m", "benchmarks.scale", *(sys.argv[1:] if argv is None else argv)])
    print(markdown(run(settings, names, args.out, args.data_dir, command, args.merge)))
    return 0


if __name__ == "__main__":
    from benchmarks import scale  # the module under its own name, so that children find what they are sent

    sys.exit(scale.main())
