"""Crash harness: writer processes killed with SIGKILL at random moments, and what must survive.

A *zygote* (``python -m tests.crash_harness``, started with `sys.executable`)
imports everything once, then forks one *writer* per command it reads on
stdin, so a kill costs a fork, not an interpreter start. A writer opens the
store that `tests.stores.describe` described and writes one thread, either
by running a real graph (`graph` mode) or with raw ``put``/``put_writes``
calls carrying values of random size, some of megabytes, of mixed ASCII and
multi-byte text (`raw` mode) or of ASCII only (`raw-ascii`); or it sweeps the
store's expired threads (`sweep` mode, tests/test_crash_sweep.py). After
each call returns it prints one JSON event to stdout (a single ``os.write``
shorter than ``PIPE_BUF``, so events never tear). The test (`CrashRun`) kills
the writer with SIGKILL after a random number of events and a random delay,
then checks the thread: every acknowledged checkpoint and write is there and
decodes, a torn tail is at most the last line, and the next writer resumes
from the last checkpoint stored.
"""

from __future__ import annotations

import json
import operator
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
BIG = 1_000_000  # characters of value from which a put is announced as "big" (a chance of a torn write)
STEPS_PER_INVOKE = 5  # the counter graph ends every 5 steps; the next invoke starts a new run


# --- the writer side (runs in a forked child of the zygote) ---------------------------------


def _emit(**event: Any) -> None:
    data = orjson.dumps(event) + b"\n"
    assert len(data) < 4096, "an event must fit in one atomic pipe write"
    os.write(1, data)


def counter_graph() -> Any:
    """A graph that counts in a loop; its state always satisfies total == count * (count + 1) / 2."""
    from langgraph.graph import END, START, StateGraph
    from typing_extensions import TypedDict

    class Counter(TypedDict):
        count: int
        total: int
        marks: Annotated[list[str], operator.add]

    def step(state: Counter) -> dict[str, Any]:
        count = state.get("count", 0) + 1
        return {"count": count, "total": state.get("total", 0) + count, "marks": []}

    builder = StateGraph(Counter)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_conditional_edges("step", lambda s: END if s["count"] % STEPS_PER_INVOKE == 0 else "step")
    return builder


def _acking_saver(store: Any) -> Any:
    from telar_checkpoint import TelarSaver

    class AckingSaver(TelarSaver):
        """Prints each checkpoint and write it was asked to store, once the call has returned."""

        def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
            result = super().put(config, checkpoint, metadata, new_versions)
            conf = config["configurable"]
            _emit(
                e="put", thread=conf["thread_id"], ns=conf.get("checkpoint_ns", ""), id=checkpoint["id"],
                parent=conf.get("checkpoint_id"),
            )  # fmt: skip
            return result

        def put_writes(self, config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
            super().put_writes(config, writes, task_id, task_path)
            conf = config["configurable"]
            _emit(
                e="writes", thread=conf["thread_id"], ns=conf.get("checkpoint_ns", ""), id=conf["checkpoint_id"],
                task=task_id, n=len(writes),
            )  # fmt: skip

    return AckingSaver(store)


def blob(n: int, size: int, ascii_only: bool = False) -> str:
    """The value a raw writer stores at step `n`: `size` characters, mixed ASCII and multi-byte."""
    unit = f"[{n}:abc]" if ascii_only else f"[{n}:é中🧵]"
    return (unit * (size // len(unit) + 1))[:size]


def _graph_writer(saver: Any, thread: str, rng: random.Random) -> None:
    graph = counter_graph().compile(checkpointer=saver)
    config = {"configurable": {"thread_id": thread}}
    state = graph.get_state(config)
    latest = state.config["configurable"].get("checkpoint_id") if state.config else None
    _emit(e="resume", thread=thread, id=latest, count=state.values.get("count", 0), next=list(state.next))
    if state.next:  # killed mid-run: continue from the last checkpoint
        graph.invoke(None, config)
    while True:
        graph.invoke({"marks": []}, config)


def _raw_writer(saver: Any, thread: str, rng: random.Random, ascii_only: bool = False) -> None:
    from langgraph.checkpoint.base import empty_checkpoint

    config: dict[str, Any] = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    latest = saver.get_tuple(config)
    n = latest.checkpoint["channel_values"]["n"] + 1 if latest else 0
    parent = latest.config["configurable"]["checkpoint_id"] if latest else None
    _emit(e="resume", thread=thread, id=parent, count=n, next=[])
    while True:
        size = rng.choice([10, 100, 3_000, 50_000]) if rng.random() < 0.85 else rng.randint(BIG, 2 * BIG)
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"n": n, "size": size, "blob": blob(n, size, ascii_only)}
        checkpoint["channel_versions"] = {"n": n + 1, "size": n + 1, "blob": n + 1}
        if size >= BIG:
            _emit(e="big", size=size)
        put_config = {"configurable": {**config["configurable"], "checkpoint_id": parent}}
        saver.put(put_config, checkpoint, {"source": "loop", "step": n, "parents": {}}, {})
        _emit(e="put", thread=thread, ns="", id=checkpoint["id"], parent=parent)
        write_config = {"configurable": {**config["configurable"], "checkpoint_id": checkpoint["id"]}}
        task = f"task-{n}"
        saver.put_writes(write_config, [("n", n), ("note", blob(n, rng.choice([5, 500, 20_000]), ascii_only))], task)
        _emit(e="writes", thread=thread, ns="", id=checkpoint["id"], task=task, n=2)
        parent, n = checkpoint["id"], n + 1


def _sweeper(store: Any, command: dict[str, Any]) -> None:
    """`sweep` mode (tests/test_crash_sweep.py): one sweep of the store under `command["ttl"]`, its
    clock standing still at `command["now"]`, printing each thread it rewrote once the rewrite
    returned, then "swept"; then it waits to be killed (so every life ends in a kill)."""
    from telar_checkpoint import TelarSaver

    class AckingSweeper(TelarSaver):
        def rewrite(self, thread_id: str, change: Any, *, text: str | None = None) -> str | None:
            new = super().rewrite(thread_id, change, text=text)
            _emit(e="rewritten", thread=thread_id)
            return new

    now = float(command["now"])
    saver = AckingSweeper(store, ttl=command["ttl"], clock=lambda: now)
    _emit(e="sweeping")
    report = saver.sweep()
    failed = [f"{thread}: {error}"[:300] for thread, error in report.failed[:3]]
    _emit(e="swept", deleted=len(report.deleted), trimmed=len(report.trimmed), skipped=report.skipped, failed=failed)
    while True:
        time.sleep(60)


def _write(command: dict[str, Any]) -> None:
    from tests.stores import reopen

    store = reopen((command["store"][0], command["store"][1]))
    if command["mode"] == "sweep":
        _sweeper(store, command)
        return
    saver = _acking_saver(store)
    rng = random.Random(command["seed"])
    if command["mode"] == "graph":
        _graph_writer(saver, command["thread"], rng)
    else:
        _raw_writer(saver, command["thread"], rng, ascii_only=command["mode"] == "raw-ascii")


def serve() -> None:
    """The zygote: one command per stdin line, one forked writer per command, its exit reported."""
    import langgraph.graph  # noqa: F401  (imported once, shared by every fork)

    import telar_checkpoint  # noqa: F401
    import tests.stores  # noqa: F401
    from telar_checkpoint.stores import sqlite  # noqa: F401

    for module in ("telar_checkpoint.stores.postgres", "telar_checkpoint.stores.redis"):
        try:
            __import__(module)
        except ImportError:
            pass
    _emit(e="zygote")
    for raw in sys.stdin:
        command = json.loads(raw)
        pid = os.fork()
        if pid == 0:
            try:
                _emit(e="start", pid=os.getpid())
                _write(command)
                os._exit(0)
            except BaseException:
                text = traceback.format_exc()[-3000:]
                _emit(e="error", text=text)
                os._exit(1)
        _, status = os.waitpid(pid, 0)
        _emit(e="exit", pid=pid, signal=os.WTERMSIG(status) if os.WIFSIGNALED(status) else None)


# --- the test side ------------------------------------------------------------------------------


class Zygote:
    """The zygote process, and reading its events."""

    def __init__(self) -> None:
        self.stderr = tempfile.TemporaryFile()
        env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.crash_harness"], cwd=ROOT, env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr,
        )  # fmt: skip
        assert self.next_event()["e"] == "zygote"

    def next_event(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            self.stderr.seek(0)
            raise AssertionError(f"the crash zygote died: {self.stderr.read().decode(errors='replace')[-3000:]}")
        event: dict[str, Any] = orjson.loads(line)
        if event["e"] == "error":
            raise AssertionError(f"a writer failed:\n{event['text']}")
        return event

    def spawn(self, command: dict[str, Any]) -> int:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(command).encode() + b"\n")
        self.process.stdin.flush()
        event = self.next_event()
        assert event["e"] == "start", event
        return int(event["pid"])

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:  # else an unclosed-file ResourceWarning
            self.process.stdout.close()
        self.stderr.close()


@dataclass
class CrashReport:
    """What a run of kills did and what it checked."""

    kills: int = 0
    torn_tails: int = 0  # kills that left an unterminated last line (detected and dropped)
    checkpoints: int = 0  # acknowledged checkpoints, every one read back intact
    writes: int = 0  # acknowledged put_writes calls, every one read back (but crash residue, below)
    residue_dropped: int = 0  # acknowledged writes of a checkpoint never stored and since superseded, dropped by a rewrite
    resumes: int = 0  # writers that resumed from the last stored checkpoint
    threads: list[str] = field(default_factory=list)


@dataclass
class _Thread:
    acked: dict[str, str | None] = field(default_factory=dict)  # checkpoint id -> parent id
    writes: set[tuple[str, str]] = field(default_factory=set)  # (checkpoint id, task id)
    torn: str | None = None  # the torn tail the thread's last kill left, if any
    residue: set[tuple[str, str]] = field(default_factory=set)  # acknowledged writes found dropped as crash residue


class CrashRun:
    """Kills writers of one store `kills` times, checking the store after each kill."""

    def __init__(self, description: tuple[str, dict[str, Any]], mode: str, *, seed: int, lives_per_thread: int = 10):
        self.description = description
        self.mode = mode
        self.rng = random.Random(seed)
        self.lives_per_thread = lives_per_thread
        self.threads: dict[str, _Thread] = {}
        self.report = CrashReport()

    def run(self, kills: int, zygote: Zygote | None = None) -> CrashReport:
        """Kill `kills` writers, one after the other (forked by `zygote`, or by a zygote of its own)."""
        from tests.stores import reopen

        self.store = reopen(self.description)
        kind, options = self.description
        self.tag = f"telar-crash-{os.getpid()}-{self.rng.randrange(1 << 30)}"
        if kind == "postgres":  # name the writers' sessions, to wait for the server to end them
            self.description = (kind, {**options, "application_name": self.tag})
        elif kind == "redis":
            self.description = (kind, {**options, "client_name": self.tag})
        own = zygote is None
        zygote = zygote or Zygote()
        try:
            for life in range(kills):
                thread = f"{self.mode}-{life // self.lives_per_thread}"
                self._life(zygote, thread, life)
            for thread in self.threads:  # finally, every thread is still whole
                self.check(thread, after_kill=False)  # a torn tail only as its last kill left it
        finally:
            if own:
                zygote.close()
            self.store.close()
        self.report.threads = list(self.threads)
        return self.report

    def _life(self, zygote: Zygote, thread: str, life: int) -> None:
        state = self.threads.setdefault(thread, _Thread())
        latest = self.latest(thread)  # no writer runs now: what the next one must resume from
        pid = zygote.spawn({"store": self.description, "mode": self.mode, "thread": thread, "seed": life})
        wanted = self.rng.choice([0, 0, 1, 2, 3, 5, 8, 13])  # events to wait for before the kill
        resumed = self.next_event(zygote)
        assert resumed["e"] == "resume", resumed
        assert resumed["id"] == latest, f"{thread}: the writer resumed from {resumed['id']}, not from {latest}"
        self.report.resumes += latest is not None
        seen = 0
        while seen < wanted:
            event = self.next_event(zygote)
            self.record(state, event)
            seen += 1
            if event["e"] == "big" and self.rng.random() < 0.5:
                break  # kill while a big value is being written: the best chance of a torn line
        time.sleep(self.rng.choice([0, 0, 0.0005, 0.002, 0.01, 0.03]))
        os.kill(pid, signal.SIGKILL)
        while (event := self.next_event(zygote))["e"] != "exit":
            self.record(state, event)  # acknowledged before the kill landed
        assert event["signal"] == signal.SIGKILL, f"writer {pid} ended on its own: {event}"
        self.report.kills += 1
        self.settle()
        self.check(thread, after_kill=True)

    def settle(self, timeout: float = 30.0) -> None:
        """Wait until a server has ended the killed writer's sessions.

        A command the writer sent before it died (a COMMIT, a compare-and-set) still completes
        on the server; until its session is gone, the next writer might not see its result.
        """
        kind = self.description[0]
        if kind not in ("postgres", "redis"):
            return
        from tests.stores import postgres_admin, redis_admin

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if kind == "postgres":
                alive = postgres_admin("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (self.tag,))
                if alive[0][0] == 0:
                    return
            else:
                client = redis_admin()
                try:
                    if not any(c.get("name") == self.tag for c in client.client_list()):
                        return
                finally:
                    client.close()
            time.sleep(0.01)
        raise AssertionError(f"the {kind} server kept the killed writer's sessions for {timeout} s")

    def next_event(self, zygote: Zygote) -> dict[str, Any]:
        return zygote.next_event()

    def record(self, state: _Thread, event: dict[str, Any]) -> None:
        if event["e"] == "put":
            state.acked[event["id"]] = event["parent"]
            self.report.checkpoints += 1
        elif event["e"] == "writes":
            state.writes.add((event["id"], event["task"]))
            self.report.writes += 1

    def latest(self, thread: str) -> str | None:
        """The id of the thread's last root checkpoint in the store."""
        from telar_checkpoint.history import History

        entry = History.parse(thread, self.store.read(thread)).latest("")
        return entry.line.id if entry else None

    def check(self, thread: str, *, after_kill: bool) -> None:
        """Every acknowledged checkpoint and write is stored and decodes (a write of a checkpoint that
        was never stored and is older than the latest may be gone: a crash's residue, see below); a
        torn tail is only the last line; every line is format version 1 or 2."""
        from telar_checkpoint.codec import CheckpointCodec
        from telar_checkpoint.history import History

        state = self.threads[thread]
        text = self.store.read(thread)
        if text is None:
            assert not state.acked, f"{thread}: {len(state.acked)} acknowledged checkpoints, no history"
            return
        history = History.parse(thread, text)  # raises on any damaged complete line
        assert history.development_lines == 0, f"{thread}: a line of a format version that is not 1 or 2"
        if after_kill:
            state.torn = history.torn
            if history.torn is not None:
                assert text.endswith(history.torn) and "\n" not in history.torn
                self.report.torn_tails += 1
        else:  # no writer ran on this thread since its last kill: the same tail, or none
            assert history.torn == state.torn, f"{thread}: torn tail {history.torn!r}, its last kill left {state.torn!r}"
        codec = CheckpointCodec()
        records = {r.id: r for r in codec.decode_history(thread, text)}
        for cid, parent in state.acked.items():
            assert cid in records, f"{thread}: acknowledged checkpoint {cid} lost"
            assert records[cid].parent_id == parent
        head = history.latest("")
        for cid, task in state.writes:
            # Writes may be stored before their checkpoint (LangGraph's async durability); they are kept
            # apart ("orphans") until it comes, so they are found either way.
            held = [w.task_id for w in records[cid].writes] if cid in records else []
            held += [task_id for task_id, _ in history.orphans.get(("", cid), {})]
            if task in held:
                continue
            # Unless the checkpoint never came: the writer was killed between LangGraph's put_writes and
            # its put, and the next one moved on from the parent, so a newer checkpoint is stored. Those
            # writes are a crash's residue, which no read can reach, and the next rewrite (after a torn
            # tail, say) drops them by design (`History.crash_residue`): they may be missing, nothing else.
            residue = cid not in records and head is not None and cid < head.line.id
            assert residue, f"{thread}: writes of {task} on {cid} lost"
            if (cid, task) not in state.residue:
                state.residue.add((cid, task))
                self.report.residue_dropped += 1
        for record in records.values():
            values = record.checkpoint["channel_values"]
            if self.mode.startswith("raw"):
                expected = blob(values["n"], values["size"], self.mode == "raw-ascii")
                assert values["blob"] == expected, f"{thread}: {record.id} altered"
            elif "count" in values:
                assert values["total"] == values["count"] * (values["count"] + 1) // 2, (thread, values)
        # The parent chain of the latest checkpoint reaches the first: nothing in between was lost.
        latest = history.latest("")
        if latest is not None:
            chain, cid = 0, latest.line.id
            while cid is not None:
                chain += 1
                cid = records[cid].parent_id
            assert chain == len(history.in_ns("")), f"{thread}: the chain of checkpoints is broken"


if __name__ == "__main__":
    serve()


def log_figures(test: str, seed: int, **figures: Any) -> None:
    """One JSON line of a kill run's figures in the file `TELAR_RELIABILITY_LOG` names (when set;
    RELIABILITY.md's tables are made from them)."""
    path = os.environ.get("TELAR_RELIABILITY_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"test": test, **figures, "seed": seed}) + "\n")


def zygote_fixture() -> Any:
    """A module-scoped fixture of one `Zygote` that forks every process of a test module (an
    interpreter start is ~1 s); assign it to a name in the module: ``zygote = zygote_fixture()``."""
    import pytest

    @pytest.fixture(scope="module")
    def zygote() -> Any:
        process = Zygote()
        yield process
        process.close()

    return zygote
