"""Nothing lost under a server's load (issue 41): many conversations at once, in one process and in
several, and two replicas serving the same threads, on Postgres, Redis and the file store.

A small agent (tests/load_harness.py: a tool call through `ToolNode`, an `interrupt()` now and then
answered by ``Command(resume=...)``) runs conversations at once on real servers. Every checkpoint
and write the saver acknowledged to LangGraph (`load_harness.Acks`) is then read back through a new
saver: each must be found, unless the rules of a history replaced it (`load_harness.superseded`);
each thread's state must be the last one its run saw, with the messages its turns make; and
`verify_store`, the check `telar-checkpoint verify` makes, must find nothing.

- one saver, many conversations in one event loop;
- several processes, each with its own saver, on one Postgres schema, Redis prefix or directory;
- two replicas serving each thread in turn (step k in A when k is even, in B when odd; a resume in
  the other replica than the one that paused): the thread's history is one chain, step for step
  the history of the same conversation run on InMemorySaver in one process;
- two replicas racing on the same threads (a barrier, then both write): nothing acknowledged is
  lost, what the rules keep is a sound history whose head is one racer's outcome, and each replica
  takes the checkpoint a new saver takes for the latest. (These races found two bugs, each pinned
  by a test at the end.)

The default run is a small slice of each. The ``stress`` variants run only when
`TELAR_LOAD_STRESS_CONVERSATIONS` (conversations in one process; the processes share as many) or
`TELAR_STRESS_RUNS` is set, e.g. ``TELAR_LOAD_STRESS_CONVERSATIONS=256 pytest -m stress -s -n 0
tests/test_load_stress.py``; `TELAR_LOAD_STRESS_TURNS` sets the turns (default 4). Each test
prints its figures and appends them to the file `TELAR_RELIABILITY_LOG` names.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from telar_checkpoint import TelarSaver
from telar_checkpoint.verify import verify_store
from tests.graphs import ahistory_summary, async_interrupts
from tests.load_harness import (
    Outcome,
    Replicas,
    build,
    check,
    durability,
    log_figures,
    message_summary,
    question,
    run_conversations,
    serve,
)
from tests.stores import describe, make_store, processes, reopen

KINDS = ["file", "postgres", "redis"]
PROCESSES = 4
STRESS_SET = "TELAR_LOAD_STRESS_CONVERSATIONS" in os.environ or "TELAR_STRESS_RUNS" in os.environ
STRESS_CONVERSATIONS = int(os.environ.get("TELAR_LOAD_STRESS_CONVERSATIONS", "256"))
STRESS_TURNS = int(os.environ.get("TELAR_LOAD_STRESS_TURNS", "4"))



def stress(test: Any) -> Any:
    """A long variant: the ``stress`` marker, run only when its size is set, with time for it."""
    test = pytest.mark.timeout(max(600, STRESS_CONVERSATIONS * STRESS_TURNS))(test)
    why = "a long run: set TELAR_LOAD_STRESS_CONVERSATIONS (e.g. 256) or TELAR_STRESS_RUNS"
    test = pytest.mark.skipif(not STRESS_SET, reason=why)(test)
    return pytest.mark.stress(test)


def _assert_nothing_lost(test: str, kind: str, outcome: Outcome, found: Any, began: float, **more: Any) -> None:
    figures = {"store": kind, **more, "invokes": outcome.invokes, **found.figures(), "seconds": round(time.perf_counter() - began, 1)}
    log_figures(test, **figures)
    assert not found.problems, f"{len(found.problems)} problems ({figures}); first: " + "\n".join(found.problems[:5])


# --- 1. many conversations at once on one saver -------------------------------------------


async def one_saver(kind: str, tmp_path: Path, request: pytest.FixtureRequest, conversations: int, turns: int) -> None:
    store = make_store(kind, tmp_path, request)
    began = time.perf_counter()
    try:
        outcome = await run_conversations(TelarSaver(store), "one", conversations, turns)
    finally:
        await store.aclose()
    fresh = reopen(describe(store))
    try:
        found = await check(fresh, outcome)
    finally:
        await fresh.aclose()
    _assert_nothing_lost("load one saver", kind, outcome, found, began, conversations=conversations, turns=turns, processes=1)


@pytest.mark.parametrize("kind", KINDS)
@async_interrupts
async def test_conversations_at_once_on_one_saver_lose_nothing(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    await one_saver(kind, tmp_path, request, conversations=64, turns=3)


@pytest.mark.parametrize("kind", KINDS)
@stress
@async_interrupts
async def test_stress_conversations_at_once_on_one_saver(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    await one_saver(kind, tmp_path, request, conversations=STRESS_CONVERSATIONS, turns=STRESS_TURNS)


# --- 2. several processes, each with its own saver, on one store ---------------------------


async def several_processes(kind: str, tmp_path: Path, request: pytest.FixtureRequest, conversations: int, turns: int) -> None:
    store = make_store(kind, tmp_path, request)
    description = describe(store)
    began = time.perf_counter()
    with processes().Pool(PROCESSES) as pool:
        outcomes = pool.starmap(serve, [(description, f"p{p}", conversations, turns) for p in range(PROCESSES)])
    outcome = Outcome()
    for part in outcomes:
        outcome.acks.extend(part.acks)
        outcome.final.update(part.final)
        outcome.expected_messages.update(part.expected_messages)
        outcome.invokes += part.invokes
    try:
        found = await check(store, outcome)
    finally:
        await store.aclose()
    _assert_nothing_lost("load processes", kind, outcome, found, began, conversations=PROCESSES * conversations, turns=turns,
                         processes=PROCESSES)


@pytest.mark.parametrize("kind", KINDS)
@async_interrupts
async def test_processes_on_one_store_lose_nothing(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    await several_processes(kind, tmp_path, request, conversations=16, turns=3)


@pytest.mark.parametrize("kind", KINDS)
@stress
@async_interrupts
async def test_stress_processes_on_one_store(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    await several_processes(kind, tmp_path, request, conversations=max(1, STRESS_CONVERSATIONS // PROCESSES), turns=STRESS_TURNS)


# --- 3. two replicas serving the same threads -----------------------------------------------


def one_chain(tuples: list[Any]) -> list[str]:
    """What keeps a thread's history (`list`, newest first) from being one chain: a checkpoint
    whose parent is not the one listed after it, or an oldest one with a parent."""
    problems = []
    for newer, older in zip(tuples, tuples[1:]):
        parent = (newer.parent_config or {}).get("configurable", {}).get("checkpoint_id")
        if parent != older.config["configurable"]["checkpoint_id"]:
            problems.append(f"checkpoint {newer.config['configurable']['checkpoint_id']}'s parent is {parent}, "
                            f"not {older.config['configurable']['checkpoint_id']}, listed before it: the history forked")
    if tuples and tuples[-1].parent_config is not None:
        problems.append(f"the oldest checkpoint {tuples[-1].config['configurable']['checkpoint_id']} has a parent")
    return problems


async def replicas_in_turn(kind: str, tmp_path: Path, request: pytest.FixtureRequest, threads: int, steps: int) -> None:
    """Step k of thread t runs in replica (k + t) % 2, so both are busy at once; a question that
    pauses is resumed in the next step, in the other replica."""
    store = make_store(kind, tmp_path, request)
    began = time.perf_counter()
    replicas = Replicas(processes(), describe(store))
    plans: dict[str, list[tuple[str, str]]] = {f"turns-{t}": [] for t in range(threads)}
    paused = dict.fromkeys(plans, False)
    turn = dict.fromkeys(plans, 0)
    invokes = 0
    try:
        for k in range(steps):
            work: list[list[tuple[str, str, str, str]]] = [[], []]
            for t, thread in enumerate(plans):
                step = ("resume", f"yes {k}") if paused[thread] else ("ask", question(t, turn[thread]))
                turn[thread] += step[0] == "ask"
                plans[thread].append(step)
                work[(k + t) % 2].append((thread, *step, durability(t)))
            for results in replicas.run(work):
                for thread, (_, now_paused, _) in results.items():
                    paused[thread] = now_paused
                    invokes += 1
        acks = replicas.stop()
    finally:
        replicas.kill()
    assert sum(1 for plan in plans.values() for kind_, _ in plan if kind_ == "resume") > 0, "no step resumed an interrupt"

    saver = TelarSaver(store)
    graph = build().compile(checkpointer=saver)
    problems: list[str] = []
    for t, (thread, plan) in enumerate(plans.items()):
        config: Any = {"configurable": {"thread_id": thread}}
        reference = build().compile(checkpointer=InMemorySaver())
        for kind_, payload in plan:
            given = {"messages": [HumanMessage(payload)]} if kind_ == "ask" else Command(resume=payload)
            await reference.ainvoke(given, config, durability=durability(t))
        problems += [f"thread {thread!r}: {p}" for p in one_chain([c async for c in saver.alist(config)])]
        ours, theirs = await graph.aget_state(config), await reference.aget_state(config)
        if message_summary(ours.values["messages"]) != message_summary(theirs.values["messages"]):
            problems.append(f"thread {thread!r}: messages {message_summary(ours.values['messages'])} "
                            f"!= InMemorySaver's {message_summary(theirs.values['messages'])}")
        if await ahistory_summary(graph, config) != await ahistory_summary(reference, config):
            problems.append(f"thread {thread!r}: its history is not InMemorySaver's for the same steps")
    outcome = Outcome(acks=acks, invokes=invokes)
    found = await check(store, outcome)
    found.problems = problems + found.problems
    await store.aclose()
    _assert_nothing_lost("load replicas in turn", kind, outcome, found, began, threads=threads, steps=steps, processes=2)


@pytest.mark.parametrize("kind", KINDS)
@async_interrupts
async def test_replicas_serving_a_thread_in_turn_keep_one_history(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    await replicas_in_turn(kind, tmp_path, request, threads=4, steps=8)


@pytest.mark.parametrize("kind", KINDS)
@stress
@async_interrupts
async def test_stress_replicas_serving_a_thread_in_turn(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    await replicas_in_turn(kind, tmp_path, request, threads=max(2, STRESS_CONVERSATIONS // 16), steps=6 * STRESS_TURNS)


async def replicas_racing(kind: str, tmp_path: Path, request: pytest.FixtureRequest, threads: int, rounds: int) -> None:
    """Each round, both replicas ask a question on every race thread at the same moment."""
    store = make_store(kind, tmp_path, request)
    began = time.perf_counter()
    replicas = Replicas(processes(), describe(store))
    names = [f"race-{t}" for t in range(threads)]
    last: list[dict[str, Any]] = []
    try:
        for r in range(rounds):
            work = [[(thread, "ask", f"{'AB'[w]} r{r} {'weather in Oslo' if (r + w) % 2 else 'hello'}", ("sync", "async")[(r + w + t) % 2])
                     for t, thread in enumerate(names)] for w in range(2)]
            last = replicas.run(work, command="race")
        seen = replicas.latest(names)
        acks = replicas.stop()
    finally:
        replicas.kill()
    outcome = Outcome(acks=acks, invokes=2 * threads * rounds)
    found = await check(store, outcome, exact_states=False, racing=True)
    saver = TelarSaver(store)
    for thread in names:
        head = await saver.aget_tuple({"configurable": {"thread_id": thread}})
        stored = [(m.type, m.id, str(m.content)) for m in head.checkpoint["channel_values"]["messages"]] if head else None
        outcomes = [result[thread][0] for result in last]
        if stored not in outcomes:
            found.problems.append(f"thread {thread!r}: its head holds {stored}, neither racer's outcome {outcomes}")
        for which, latest in enumerate(seen):  # the saver that served the races sees the latest a new saver sees
            if head is not None and latest[thread] != head.config["configurable"]["checkpoint_id"]:
                found.problems.append(f"thread {thread!r}: replica {'AB'[which]} takes {latest[thread]} for its latest checkpoint, "
                                      f"a new saver {head.config['configurable']['checkpoint_id']}")
    await store.aclose()
    _assert_nothing_lost("load replicas racing", kind, outcome, found, began, threads=threads, rounds=rounds, processes=2)


@pytest.mark.parametrize("kind", KINDS)
@async_interrupts
async def test_replicas_racing_on_a_thread_lose_nothing(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    await replicas_racing(kind, tmp_path, request, threads=4, rounds=4)


@pytest.mark.parametrize("kind", KINDS)
@stress
@async_interrupts
async def test_stress_replicas_racing_on_a_thread(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    await replicas_racing(kind, tmp_path, request, threads=max(2, STRESS_CONVERSATIONS // 16), rounds=5 * STRESS_TURNS)


# --- the checks can fail -------------------------------------------------------------------


@async_interrupts
async def test_the_check_finds_a_lost_checkpoint_a_lost_write_and_a_fork(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """A line taken out of a thread's stored text is reported as lost, and a fork breaks the chain."""
    store = make_store("file", tmp_path, request)
    outcome = await run_conversations(TelarSaver(store), "lose", 2, 2)
    thread = "lose-0"
    lines = store.read(thread).splitlines(keepends=True)
    head = max(i for i, line in enumerate(lines) if '"kind":"checkpoint"' in line)  # nothing builds on it
    writes = min(i for i, line in enumerate(lines) if '"kind":"writes"' in line)
    store.write(thread, "".join(line for i, line in enumerate(lines) if i not in (head, writes)))
    found = await check(store, outcome)
    head_id = json.loads(lines[head])["id"]
    assert any(p.startswith(f"checkpoint {head_id}") and "acknowledged but is not found" in p for p in found.problems), found.problems
    assert any(p.startswith("writes") and "acknowledged but are not stored" in p for p in found.problems), found.problems
    assert any("is not the run's last" in p for p in found.problems), found.problems

    saver = TelarSaver(store)
    graph = build().compile(checkpointer=saver)
    config: Any = {"configurable": {"thread_id": "lose-1"}}
    history = [c async for c in saver.alist(config)]
    assert one_chain(history) == []
    await graph.aupdate_state(history[2].config, {"messages": [("human", "a fork")]})
    assert one_chain([c async for c in saver.alist(config)]), "a fork went unseen"
    assert not verify_store(store).errors


# --- two bugs the race found (fixed: History.is_residue, History.drop) ---


@pytest.mark.parametrize("kind", KINDS)
def test_writes_that_come_before_their_put_survive_a_rewrite(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """Two runs on one thread, as `replicas_racing` makes them (seen there on Postgres): run A's
    writes for its checkpoint x reach the store before x's put (LangGraph's async durability);
    run B stores y and then z, newer than x, from the same parent, so z replaces y and the thread
    is rewritten; then x's put arrives. x is stored, and must hold the writes acknowledged for it."""
    store = make_store(kind, tmp_path, request)
    saver = TelarSaver(store)
    c0, x, y, z = (empty_checkpoint() for _ in range(4))  # ids in the order made: c0 < x < y < z

    def config(checkpoint: Any = None) -> Any:
        return {"configurable": {"thread_id": "t", "checkpoint_ns": "", **({"checkpoint_id": checkpoint["id"]} if checkpoint else {})}}

    saver.put(config(), c0, {"source": "input", "step": -1, "parents": {}}, {})
    saver.put_writes(config(x), [("messages", "A's step")], "task-a")  # acknowledged, before x's put
    saver.put(config(c0), y, {"source": "input", "step": 0, "parents": {}}, {})  # run B
    saver.put(config(c0), z, {"source": "input", "step": 0, "parents": {}}, {})  # B again: replaces y, a rewrite
    saver.put(config(c0), x, {"source": "loop", "step": 0, "parents": {}}, {})  # x's put arrives
    with TelarSaver(reopen(describe(store))) as other:  # a store object of its own, closed after
        stored = other.get_tuple(config(x))
    assert stored is not None and stored.config["configurable"]["checkpoint_id"] == x["id"]
    assert [(t, ch, v) for t, ch, v in stored.pending_writes] == [("task-a", "messages", "A's step")]


@pytest.mark.parametrize("kind", KINDS)
def test_a_saver_that_read_a_replacement_names_the_latest_checkpoint(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """Two savers on one thread, as two racing replicas (seen in `replicas_racing`): A's put of a1
    moves on from a0 when b0 is the latest, so the rules look for a branch to replace (none goes,
    but the history's latest id is forgotten); then B's b1, made before a1, arrives. Every saver
    must name a1 (the newest id, as a new saver and InMemorySaver do) the latest; A names b1."""
    store = make_store(kind, tmp_path, request)
    a_saver, b_saver = TelarSaver(store), TelarSaver(reopen(describe(store)))
    request.addfinalizer(b_saver.store.close)
    a0, b0, b1, a1 = (empty_checkpoint() for _ in range(4))  # ids in the order made: a0 < b0 < b1 < a1
    names = {c["id"]: name for c, name in ((a0, "a0"), (b0, "b0"), (b1, "b1"), (a1, "a1"))}

    def config(parent: Any = None) -> Any:
        return {"configurable": {"thread_id": "t", "checkpoint_ns": "", **({"checkpoint_id": parent["id"]} if parent else {})}}

    a_saver.put(config(), a0, {"source": "input", "step": -1, "parents": {}}, {})
    b_saver.put(config(), b0, {"source": "input", "step": -1, "parents": {}}, {})
    a_saver.put(config(a0), a1, {"source": "loop", "step": 0, "parents": {}}, {})
    b_saver.put(config(b0), b1, {"source": "loop", "step": 0, "parents": {}}, {})
    fresh = TelarSaver(reopen(describe(store)))
    request.addfinalizer(fresh.store.close)
    latest = {label: names[saver.get_tuple(config()).config["configurable"]["checkpoint_id"]]
              for label, saver in (("A", a_saver), ("B", b_saver), ("new", fresh))}
    assert latest == {"A": "a1", "B": "a1", "new": "a1"}
