"""What tests/test_load_stress.py runs and checks: many conversations of a small agent at once on one
store, what the saver acknowledged to LangGraph, and whether a new saver finds all of it.

The graph is a real LangGraph graph (a helper module, importable from a new process): a question
about the weather makes the agent call a tool (`ToolNode`), one that asks for approval stops at an
`interrupt()` that the next step answers with ``Command(resume=...)``. Every node is async and
yields to the event loop, so the conversations of one process interleave.

`Acks` wraps the saver LangGraph uses (``graph.checkpointer``, the clone compile may make with
`with_allowlist`) and notes each checkpoint `aput` returned and each task's writes `aput_writes`
stored without an error. `check` then reads them back through a new saver: each must be found,
unless the rules of a history (telar_checkpoint/rules.py, `put_line`) replaced it; see `superseded`.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode
from langgraph.types import Command, interrupt
from typing_extensions import TypedDict

from telar_checkpoint import TelarSaver
from telar_checkpoint.errors import CheckpointDroppedError
from telar_checkpoint.history import History
from telar_checkpoint.stores import Store
from telar_checkpoint.verify import verify_store

MOVES_ON = ("loop", "input")  # the sources whose put may replace a branch (rules.py, `put_line`)

# --- the graph --------------------------------------------------------------------------


class Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


@tool
async def weather(city: str) -> str:
    """The weather in a city."""
    await asyncio.sleep(0)
    return f"sunny in {city}, 24 degrees"


async def agent(state: Chat) -> dict[str, Any]:
    await asyncio.sleep(0)
    messages = state["messages"]
    last = messages[-1]
    if isinstance(last, ToolMessage):
        return {"messages": [AIMessage(f"answer: {last.content}")]}
    text = str(last.content)
    if "weather" in text:
        call = {"name": "weather", "args": {"city": text.split()[-1]}, "id": f"call-{len(messages)}"}
        return {"messages": [AIMessage("", tool_calls=[call])]}
    return {"messages": [AIMessage(f"echo: {text}")]}


def after_agent(state: Chat) -> str:
    last = state["messages"][-1]
    if isinstance(last, AIMessage) and last.tool_calls:
        return "tools"
    question = next(m for m in reversed(state["messages"]) if isinstance(m, HumanMessage))
    return "approve" if "approve" in str(question.content) else END


async def approve(state: Chat) -> dict[str, Any]:
    await asyncio.sleep(0)
    verdict = interrupt({"question": "send this answer?", "draft": state["messages"][-1].content})
    return {"messages": [AIMessage(f"sent ({verdict})")]}


def build() -> StateGraph:
    builder = StateGraph(Chat)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([weather]))
    builder.add_node("approve", approve)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", after_agent, ["tools", "approve", END])
    builder.add_edge("tools", "agent")
    builder.add_edge("approve", END)
    return builder


def question(conversation: int, turn: int) -> str:
    """Turn `turn`'s question in `conversation`: a tool call every other turn, an approval every third."""
    tool_call = (conversation + turn) % 2 == 0
    approval = (conversation + turn) % 3 == 0
    return f"c{conversation} t{turn}" + (" approve" if approval else "") + (" weather in Paris" if tool_call else " hello")


def messages_of(text: str) -> int:
    """The messages a turn asking `text` adds: the question, the tool call and its result, the answer, the approval."""
    return 2 + 2 * ("weather" in text) + ("approve" in text)


def durability(conversation: int) -> str:
    return ("async", "sync", "exit")[conversation % 3]


# --- what the saver acknowledged -------------------------------------------------------


@dataclass
class Ack:
    """A checkpoint `aput` returned: where, its parent and source, and when the call began and ended
    (`time.monotonic`, one clock for the processes of this machine)."""

    thread: str
    ns: str
    id: str
    parent: str | None
    source: str | None
    step: int | None
    began: float
    ended: float


@dataclass
class WriteAck:
    """A task's writes `aput_writes` stored: where, which channels, and when the call began and ended."""

    thread: str
    ns: str
    checkpoint: str
    task: str
    channels: tuple[str, ...]
    began: float
    ended: float


@dataclass
class Acks:
    """What one saver acknowledged: checkpoints and writes."""

    puts: list[Ack] = field(default_factory=list)
    writes: list[WriteAck] = field(default_factory=list)

    def wrap(self, saver: Any) -> None:
        """Note what `saver.aput` and `saver.aput_writes` return without an error (instance attributes,
        which LangGraph's loop looks up on the saver it was given)."""
        put, put_writes = saver.aput, saver.aput_writes

        async def aput(config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
            began = time.monotonic()
            saved = await put(config, checkpoint, metadata, new_versions)
            c = saved["configurable"]
            parent = config["configurable"].get("checkpoint_id")
            self.puts.append(Ack(c["thread_id"], c.get("checkpoint_ns", ""), c["checkpoint_id"], parent,
                                 metadata.get("source"), metadata.get("step"), began, time.monotonic()))
            return saved

        async def aput_writes(config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
            began = time.monotonic()
            await put_writes(config, writes, task_id, task_path)
            c = config["configurable"]
            self.writes.append(WriteAck(c["thread_id"], c.get("checkpoint_ns", ""), c["checkpoint_id"], task_id,
                                        tuple(ch for ch, _ in writes), began, time.monotonic()))

        saver.aput, saver.aput_writes = aput, aput_writes

    def extend(self, other: Acks) -> None:
        self.puts.extend(other.puts)
        self.writes.extend(other.writes)


def compiled(saver: TelarSaver, acks: Acks) -> Any:
    graph = build().compile(checkpointer=saver)
    acks.wrap(graph.checkpointer)
    return graph


def message_summary(messages: Iterable[Any]) -> list[tuple[str, str, tuple[Any, ...]]]:
    """Messages as type, content and tool calls: what must match between savers (ids are random)."""
    return [(m.type, str(m.content), tuple((c["name"], json.dumps(c["args"]), c["id"]) for c in getattr(m, "tool_calls", ()) or ()))
            for m in messages]


def state_summary(snapshot: Any) -> tuple[Any, ...]:
    """A state as the run saw it, exactly (message ids included), in plain values another process can send."""
    messages = [(m.type, m.id, str(m.content)) for m in snapshot.values.get("messages", [])]
    interrupts = tuple(repr(i.value) for t in snapshot.tasks for i in t.interrupts)
    return (snapshot.config["configurable"]["checkpoint_id"], messages, snapshot.next, interrupts)


# --- running conversations -------------------------------------------------------------


@dataclass
class Outcome:
    """What one process's conversations gave: the acknowledgements, each thread's last state as the
    run saw it (`state_summary`), the messages its turns imply, and the invokes."""

    acks: Acks = field(default_factory=Acks)
    final: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    expected_messages: dict[str, int] = field(default_factory=dict)
    invokes: int = 0


async def converse(graph: Any, thread: str, conversation: int, turns: int, outcome: Outcome) -> None:
    """`turns` questions on `thread`, each interrupt answered with a resume; the last state the run sees."""
    config = {"configurable": {"thread_id": thread}}
    expected = 0
    for turn in range(turns):
        text = question(conversation, turn)
        expected += messages_of(text)
        await graph.ainvoke({"messages": [HumanMessage(text)]}, config, durability=durability(conversation))
        outcome.invokes += 1
        state = await graph.aget_state(config)
        if state.next:
            await graph.ainvoke(Command(resume=f"yes {turn}"), config, durability=durability(conversation))
            outcome.invokes += 1
    outcome.final[thread] = state_summary(await graph.aget_state(config))
    outcome.expected_messages[thread] = expected


async def run_conversations(saver: TelarSaver, label: str, conversations: int, turns: int) -> Outcome:
    """`conversations` conversations of `turns` turns at once on `saver`, threads "<label>-<n>"."""
    outcome = Outcome()
    graph = compiled(saver, outcome.acks)
    await asyncio.gather(*(converse(graph, f"{label}-{n}", n, turns, outcome) for n in range(conversations)))
    return outcome


def serve(description: tuple[str, dict[str, Any]], label: str, conversations: int, turns: int) -> Outcome:
    """One server process: its own saver on the shared store, `conversations` at once (`run_conversations`)."""
    from tests.stores import reopen

    async def main() -> Outcome:
        store = reopen(description)
        try:
            return await run_conversations(TelarSaver(store), label, conversations, turns)
        finally:
            await store.aclose()

    return asyncio.run(main())


# --- what a new saver finds ------------------------------------------------------------


@dataclass
class Found:
    """The figures of a check, and what went wrong (empty: nothing lost)."""

    checkpoints: int = 0
    writes: int = 0
    checkpoints_found: int = 0
    writes_found: int = 0
    superseded: int = 0
    writes_superseded: int = 0
    writes_dropped_as_residue: int = 0  # of the writes lost, those `dropped_as_crash_residue` explains
    problems: list[str] = field(default_factory=list)

    def figures(self) -> dict[str, int]:
        return {"checkpoints_acknowledged": self.checkpoints, "checkpoints_found": self.checkpoints_found,
                "checkpoints_superseded": self.superseded,
                "checkpoints_lost": self.checkpoints - self.checkpoints_found - self.superseded,
                "writes_acknowledged": self.writes, "writes_found": self.writes_found, "writes_superseded": self.writes_superseded,
                "writes_lost": self.writes - self.writes_found - self.writes_superseded,
                "writes_dropped_as_crash_residue": self.writes_dropped_as_residue, "problems": len(self.problems)}


def dropped_as_crash_residue(w: WriteAck, puts: dict[tuple[str, str, str], Ack], every: Sequence[Ack]) -> bool:
    """Whether `w` may be lost to a known bug of `History.crash_residue` (tests/test_load_stress.py,
    `test_writes_that_come_before_their_put_survive_a_rewrite`, xfail): the writes may have been
    stored before their checkpoint (their call began before its put returned: LangGraph's async
    durability), and meanwhile another run's put on the thread stored a newer checkpoint, which a
    rewrite took for the latest, so the writes looked like a crash's residue and were dropped; the
    checkpoint came after, without them. Only runs writing the same thread at once
    (`replicas_racing`) meet this; such losses are counted apart in the figures (and still fail)."""
    mine = puts.get((w.thread, w.ns, w.checkpoint))
    if mine is None or w.began > mine.ended:
        return False
    return any(p.thread == w.thread and p.ns == w.ns and p.id > w.checkpoint and p.began < mine.ended and p.ended > w.began
               for p in every)


def superseded(ack: Ack, puts: Sequence[Ack], history: History) -> bool:
    """Whether the rules of a history may have replaced `ack` (docs/FORMAT.md, "Replacement";
    rules.py, `put_line` and `_replace_for`): the stored thread records it as replaced, and an
    acknowledged put C of its namespace that moves a run on (source loop or input, with a parent),
    whose put had not returned when `ack`'s began (the store may have taken C after it), and on
    whose path `ack` is not, allows it: `ack` branches off C's path (its parent links reach a
    checkpoint on it), or a checkpoint P on C's path has a parent that is gone (recorded as
    dropped), so the stored path stops at P, and `ack` is at P's step or later."""
    if history.dropped_reason(ack.ns, ack.id) != "replaced":
        return False
    step = {p.id: p.step if p.step is not None else -1 for p in puts if p.thread == ack.thread and p.ns == ack.ns}
    parent_of = {p.id: p.parent for p in puts if p.thread == ack.thread and p.ns == ack.ns}

    def chain(cid: str | None) -> list[str]:
        ids: list[str] = []
        while cid is not None and cid not in ids:
            ids.append(cid)
            cid = parent_of.get(cid)
        return ids

    ancestors = set(chain(ack.id)[1:])
    for c in puts:
        if c.thread != ack.thread or c.ns != ack.ns or c.source not in MOVES_ON or c.parent is None or c.ended < ack.began:
            continue
        path = chain(c.id)
        if ack.id in path:
            continue
        if ancestors & set(path):
            return True
        cut = [step[p] for p in path if parent_of.get(p) is not None and history.dropped_reason(ack.ns, parent_of[p]) is not None]
        if cut and ack.step is not None and ack.step >= min(cut):
            return True
    return False


async def check(store: Store, outcome: Outcome, *, exact_states: bool = True, racing: bool = False) -> Found:
    """Read `outcome` back through a new saver on `store`: every acknowledged checkpoint (unless
    `superseded`) and write, each thread's last state as its run saw it (with `exact_states`) and
    the messages its turns imply, and `verify_store` finding nothing. `racing`: runs wrote the same
    threads at once: the writes lost that match the known bug of `dropped_as_crash_residue` are counted too."""
    saver = TelarSaver(store)
    found = Found(checkpoints=len(outcome.acks.puts), writes=len(outcome.acks.writes))
    histories: dict[str, History] = {}

    def history(thread: str) -> History:
        if thread not in histories:
            histories[thread] = History.parse(thread, store.read(thread))
        return histories[thread]

    async def stored_tuple(thread: str, ns: str, cid: str) -> Any:
        """The checkpoint `get_tuple` finds for its config, or None (absent, or replaced: it raises)."""
        try:
            return await saver.aget_tuple({"configurable": {"thread_id": thread, "checkpoint_ns": ns, "checkpoint_id": cid}})
        except CheckpointDroppedError:
            return None

    gone: set[tuple[str, str, str]] = set()
    for ack in outcome.acks.puts:
        stored = await stored_tuple(ack.thread, ack.ns, ack.id)
        if stored is not None and stored.config["configurable"]["checkpoint_id"] == ack.id:
            found.checkpoints_found += 1
        elif superseded(ack, outcome.acks.puts, history(ack.thread)):
            found.superseded += 1
            gone.add((ack.thread, ack.ns, ack.id))
        else:
            reason = history(ack.thread).dropped_reason(ack.ns, ack.id)
            found.problems.append(f"checkpoint {ack.id} of thread {ack.thread!r} (source {ack.source}, step {ack.step}, parent "
                                  f"{ack.parent}) was acknowledged but is {'recorded as ' + reason if reason else 'not found'}")
    puts = {(a.thread, a.ns, a.id): a for a in outcome.acks.puts}
    for w in outcome.acks.writes:
        if (w.thread, w.ns, w.checkpoint) in gone:
            found.writes_superseded += 1  # their checkpoint was replaced, by the rules: its writes go with it
            continue
        stored = await stored_tuple(w.thread, w.ns, w.checkpoint)
        have = {(t, ch) for t, ch, _ in (stored.pending_writes or [])} if stored is not None else set()
        missing = [ch for ch in w.channels if (w.task, ch) not in have]
        if stored is not None and not missing:
            found.writes_found += 1
        else:
            if racing and stored is not None and dropped_as_crash_residue(w, puts, outcome.acks.puts):
                found.writes_dropped_as_residue += 1
            found.problems.append(f"writes {missing or w.channels} of task {w.task} on checkpoint {w.checkpoint} of thread {w.thread!r} "
                                  f"were acknowledged but are not stored{'' if stored is not None else ' (nor is their checkpoint)'}")
    graph = build().compile(checkpointer=saver)
    for thread, seen in outcome.final.items():
        state = await graph.aget_state({"configurable": {"thread_id": thread}})
        if exact_states and state_summary(state) != seen:
            found.problems.append(f"thread {thread!r}: the state read back {state_summary(state)} is not the run's last {seen}")
        count = len(state.values.get("messages", []))
        if thread in outcome.expected_messages and count != outcome.expected_messages[thread]:
            found.problems.append(f"thread {thread!r}: {count} messages, its turns make {outcome.expected_messages[thread]}")
    report = verify_store(store)
    found.problems += [f"verify: thread {t!r}: {p}" for t, problems in report.threads.items() for p in problems]
    return found


def log_figures(test: str, **figures: Any) -> None:
    """One JSON line of a run's figures in the file `TELAR_RELIABILITY_LOG` names (when set), as
    tests/crash_harness.py does; printed too (``-s -n 0`` shows it)."""
    line = json.dumps({"test": test, **figures})
    print(f"\n{line}")
    path = os.environ.get("TELAR_RELIABILITY_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")


# --- two replicas serving the same threads --------------------------------------------


def run_summary(values: Any) -> list[tuple[str, str | None, str]]:
    """A run's own output (what `ainvoke` returned): its messages with their ids."""
    return [(m.type, m.id, str(m.content)) for m in values.get("messages", [])]


async def _step(graph: Any, thread: str, kind: str, payload: str, mode: str) -> tuple[Any, ...]:
    config = {"configurable": {"thread_id": thread}}
    given = {"messages": [HumanMessage(payload)]} if kind == "ask" else Command(resume=payload)
    output = await graph.ainvoke(given, config, durability=mode)
    state = await graph.aget_state(config)
    return (run_summary(output), bool(state.next), state_summary(state))


def replica(description: tuple[str, dict[str, Any]], inbox: Any, outbox: Any, barrier: Any) -> None:
    """A server replica: its own saver on the shared store, running the steps it is sent.

    ``("steps", [(thread, kind, payload, durability), ...])`` runs them at once and answers with
    each thread's `_step` result; ``("race", steps)`` does the same once the other replica is ready
    too (`barrier`), so that both write the same threads at the same moment; ``("latest", threads)``
    answers with the id of each thread's latest checkpoint as this saver sees it; ``("stop",)`` answers
    with the `Acks`. An error is answered with its traceback."""
    import traceback

    from tests.stores import reopen

    async def main() -> None:
        store = reopen(description)
        acks = Acks()
        graph = compiled(TelarSaver(store), acks)
        try:
            while True:
                command = await asyncio.to_thread(inbox.get)
                if command[0] == "stop":
                    outbox.put(("acks", acks))
                    return
                try:
                    if command[0] == "latest":  # the latest checkpoint of each thread, as this replica's saver sees it
                        tuples = [await graph.checkpointer.aget_tuple({"configurable": {"thread_id": t}}) for t in command[1]]
                        outbox.put(("done", {t: c and c.config["configurable"]["checkpoint_id"] for t, c in zip(command[1], tuples)}))
                        continue
                    if command[0] == "race":
                        await asyncio.to_thread(barrier.wait, 30)
                    results = await asyncio.gather(*(_step(graph, *step) for step in command[1]))
                    outbox.put(("done", {step[0]: result for step, result in zip(command[1], results)}))
                except Exception:
                    outbox.put(("error", traceback.format_exc()))
        finally:
            await store.aclose()

    asyncio.run(main())


class Replicas:
    """Two `replica` processes, A (0) and B (1), on the store `description` describes."""

    def __init__(self, context: Any, description: tuple[str, dict[str, Any]]) -> None:
        self.barrier = context.Barrier(2)
        self.queues = [(context.Queue(), context.Queue()) for _ in range(2)]
        self.processes = [context.Process(target=replica, args=(description, inbox, outbox, self.barrier), daemon=True)
                          for inbox, outbox in self.queues]
        for process in self.processes:
            process.start()

    def _answer(self, which: int) -> Any:
        import queue

        deadline = time.monotonic() + 120
        while True:
            try:
                kind, value = self.queues[which][1].get(timeout=1)
                break
            except queue.Empty:
                if not self.processes[which].is_alive() or time.monotonic() > deadline:
                    raise AssertionError(f"replica {'AB'[which]} gave no answer (exit code {self.processes[which].exitcode})") from None
        if kind == "error":
            raise AssertionError(f"replica {'AB'[which]} failed:\n{value}")
        return value

    def run(self, steps: Sequence[Sequence[tuple[str, str, str, str]]], command: str = "steps") -> list[dict[str, Any]]:
        """`steps[0]` in A and `steps[1]` in B, at once; each replica's results."""
        for which, mine in enumerate(steps):
            self.queues[which][0].put((command, list(mine)))
        return [self._answer(which) for which in range(2)]

    def latest(self, threads: Sequence[str]) -> list[dict[str, str | None]]:
        """The latest checkpoint id of each thread, as A and as B see it."""
        for inbox, _ in self.queues:
            inbox.put(("latest", list(threads)))
        return [self._answer(which) for which in range(2)]

    def stop(self) -> Acks:
        acks = Acks()
        for inbox, _ in self.queues:
            inbox.put(("stop",))
        for which in range(2):
            acks.extend(self._answer(which))
        for process in self.processes:
            process.join(30)
        return acks

    def kill(self) -> None:
        for process in self.processes:
            if process.is_alive():
                process.kill()
