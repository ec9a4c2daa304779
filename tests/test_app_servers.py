"""Several processes as several app servers on one store (issue 20): each runs a real agent
graph, with an interrupt, on threads of its own and on threads it shares with the others (one
run of a shared thread at a time, as a server's run queue does), each run with its run id.
Nothing is lost or forked, and every run is found by its id from any process."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Any

from langgraph.types import Command

from telar_checkpoint import TelarSaver
from tests import agent_graph
from tests.stores import describe, processes, reopen

PROCESSES, TURNS, SHARED = 4, 4, 2


def serve(description: tuple[str, dict[str, Any]], server: int, locks: str) -> list[str]:
    """Run TURNS turns (a question, then the approval) on this server's own thread and on each
    shared thread; the run ids it used."""
    store = reopen(description)
    graph = agent_graph.build().compile(checkpointer=TelarSaver(store))
    runs = []
    for turn in range(TURNS):
        for thread in [f"own-{server}"] + [f"shared-{k}" for k in range(SHARED)]:
            run = f"run-{server}-{turn}-{thread}"
            with open(os.path.join(locks, thread), "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)  # one run of a thread at a time, across servers
                config: Any = {"configurable": {"thread_id": thread, "run_id": run}}
                graph.invoke(agent_graph.question(f"{server}/{turn}"), config)
                graph.invoke(Command(resume=f"yes-{server}"), config)
            runs.append(run)
    store.close()
    return runs


def test_app_servers_lose_nothing_fork_nothing_and_find_every_run(shared_store: Any, tmp_path: Path) -> None:
    locks = tmp_path / "locks"
    locks.mkdir()
    with processes().Pool(PROCESSES) as pool:
        runs = pool.starmap(serve, [(describe(shared_store), server, str(locks)) for server in range(PROCESSES)])
    saver = TelarSaver(shared_store)
    graph = agent_graph.build().compile(checkpointer=saver)
    turns = {f"own-{s}": TURNS for s in range(PROCESSES)} | {f"shared-{k}": TURNS * PROCESSES for k in range(SHARED)}
    for thread, count in turns.items():
        config: Any = {"configurable": {"thread_id": thread}}
        state = graph.get_state(config)
        assert len(state.values["messages"]) == 4 * count, thread  # question, tool call, tool, answer
        assert not state.next
        chain = list(saver.list(config))
        for newer, older in zip(chain, chain[1:]):  # one path: each checkpoint's parent is the one before
            assert newer.parent_config["configurable"]["checkpoint_id"] == older.config["configurable"]["checkpoint_id"]
    for run in (r for server_runs in runs for r in server_runs):
        found = {t.config["configurable"]["thread_id"] for t in saver.list(None, filter={"run_id": run})}
        assert found == {run.rsplit("-", 2)[-2] + "-" + run.rsplit("-", 1)[-1]}, run
    saver.delete_for_runs([runs[0][0]])
    assert list(saver.list(None, filter={"run_id": runs[0][0]})) == []
