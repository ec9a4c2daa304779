"""Real LangGraph graphs on TelarSaver give what InMemorySaver gives, sync and async, on every store."""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from telar_checkpoint import CheckpointDroppedError, TelarSaver
from tests.graphs import (
    fan_out,
    multi_step,
    nested_subgraphs,
    path_to_head,
    resume,
    skip_async_interrupt_before_python_311,
    summary,
    with_interrupt,
)


@pytest.fixture
def savers(store) -> tuple[InMemorySaver, TelarSaver]:
    return InMemorySaver(), TelarSaver(store)


def config(thread: str = "t1") -> dict:
    return {"configurable": {"thread_id": thread}}


async def both(savers, build, scenario) -> tuple[Any, Any]:
    """Run `scenario(graph)` with each saver; returns (reference result, telar result)."""
    out = []
    for saver in savers:
        graph = build().compile(checkpointer=saver)
        out.append(await scenario(graph))
    return out[0], out[1]


async def test_multi_step_invoked_twice(savers, api) -> None:
    async def scenario(graph):
        first = await api.invoke(graph, {"log": ["x"], "count": 0}, config())
        second = await api.invoke(graph, {"log": ["y"]}, config())
        history = [summary(s) for s in await api.history(graph, config())]
        return first, second, summary(await api.state(graph, config())), history

    ref, got = await both(savers, multi_step, scenario)
    assert got == ref
    assert got[1]["log"] == ["x", "a", "b", "c", "y", "a", "b", "c"] and len(got[3]) == 10


async def test_interrupt_and_resume(savers, api) -> None:
    skip_async_interrupt_before_python_311(api.mode)
    async def scenario(graph):
        paused = await api.invoke(graph, {"request": "deploy", "log": []}, config())
        at_pause = summary(await api.state(graph, config()))
        done = await api.invoke(graph, resume("yes"), config())
        return paused, at_pause, done, [summary(s) for s in await api.history(graph, config())]

    ref, got = await both(savers, with_interrupt, scenario)
    assert got == ref
    assert got[1][1] == ("ask",) and got[1][2][0][1] == ({"question": "approve deploy?"},)
    assert got[2]["log"][-1] == "finished: yes"


@pytest.mark.parametrize("depth", [1, 2])
async def test_interrupt_inside_subgraph(savers, api, depth) -> None:
    skip_async_interrupt_before_python_311(api.mode)
    async def scenario(graph):
        paused = await api.invoke(graph, {"request": "r", "log": []}, config())
        nested = summary(await api.state(graph, config(), subgraphs=True))
        done = await api.invoke(graph, resume("ok"), config())
        return paused, nested, done, summary(await api.state(graph, config(), subgraphs=True))

    ref, got = await both(savers, lambda: nested_subgraphs(depth), scenario)
    assert got == ref
    task_state = got[1][2][0][2]
    assert task_state is not None, "get_state(subgraphs=True) shows the subgraph's paused state"
    assert got[2]["log"][-1] == "parent end"


async def test_send_fan_out_reruns_only_the_failed_task(savers, api) -> None:
    results = []
    for saver in savers:
        marker, calls = {"fail": True}, []
        graph = fan_out(marker, calls).compile(checkpointer=saver)
        with pytest.raises(RuntimeError, match="task 3 fails"):
            await api.invoke(graph, {"items": [1, 2, 3, 4], "results": []}, config())
        first_calls = list(calls)
        marker["fail"] = False
        done = await api.invoke(graph, None, config())
        results.append((sorted(first_calls), calls[len(first_calls):], sorted(done["results"])))
    assert results[1] == results[0]
    assert results[1][1] == [3], "only the failed task re-runs on resume"
    assert results[1][2] == [10, 20, 30, 40]


@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
async def test_durability_modes(savers, api, durability) -> None:
    skip_async_interrupt_before_python_311(api.mode)
    async def scenario(graph):
        paused = await api.invoke(graph, {"request": "d", "log": []}, config(), durability=durability)
        done = await api.invoke(graph, resume("fine"), config(), durability=durability)
        return paused, done, [summary(s) for s in await api.history(graph, config())]

    ref, got = await both(savers, with_interrupt, scenario)
    assert got == ref


async def test_time_travel_replaces_the_abandoned_branch(savers, api) -> None:
    """Replaying from an old checkpoint matches InMemorySaver, except that the branch it
    abandoned is dropped from the history once the replay moves on (documented in docs/USAGE.md)."""

    async def scenario(graph):
        await api.invoke(graph, {"log": [], "count": 0}, config())
        history = await api.history(graph, config())
        old = next(s for s in history if s.metadata["step"] == 1)
        abandoned = [s.config for s in history if s.metadata["step"] > 1]
        replayed = await api.invoke(graph, None, old.config)
        return replayed, summary(await api.state(graph, config())), await api.history(graph, config()), abandoned

    (ref_out, ref_state, ref_hist, _), (out, state, hist, abandoned) = await both(savers, multi_step, scenario)
    assert (out, state) == (ref_out, ref_state)
    # InMemorySaver keeps both branches; ours keeps the path that led to the current state.
    ref_path = path_to_head(ref_hist)
    assert [summary(s) for s in hist] == [summary(s) for s in ref_path]
    assert len(ref_hist) == len(hist) + len(abandoned)
    graph = multi_step().compile(checkpointer=savers[1])
    with pytest.raises(CheckpointDroppedError, match="was replaced"):
        await api.state(graph, abandoned[0])


async def test_update_state_on_an_old_checkpoint(savers, api) -> None:
    async def scenario(graph):
        await api.invoke(graph, {"log": [], "count": 0}, config())
        old = next(s for s in await api.history(graph, config()) if s.metadata["step"] == 1)
        forked = await api.update(graph, old.config, {"log": ["edited"]})
        # A fork alone drops nothing: both branches are still there until the run moves on.
        before_moving_on = len(await api.history(graph, config()))
        done = await api.invoke(graph, None, forked)
        return done, summary(await api.state(graph, config())), await api.history(graph, config()), before_moving_on

    (ref_done, ref_state, ref_hist, ref_before), (done, state, hist, before) = await both(savers, multi_step, scenario)
    assert (done, state, before) == (ref_done, ref_state, ref_before)
    assert done["log"] == ["a", "edited", "b", "c"]
    assert [summary(s) for s in hist] == [summary(s) for s in path_to_head(ref_hist)]


class Boom(Exception):
    """A user's own exception class, on no allowlist."""


async def test_a_failure_that_cancels_its_siblings_resumes(savers, api) -> None:
    """LangGraph stores the failed task's exception (and CancelledError for siblings it
    cancelled); exceptions of unknown classes must not stop the resume."""
    from langgraph.graph import END, START, StateGraph

    from tests.graphs import FanOut

    def build(marker: dict) -> StateGraph:
        def plan(s):
            from langgraph.types import Send

            return [Send("work", {"items": [i], "results": []}) for i in s["items"]]

        async def work(s):
            import asyncio

            item = s["items"][0]
            if item == 3 and marker["fail"]:
                raise Boom("task 3")
            await asyncio.sleep(0.05)
            return {"results": [item]}

        builder = StateGraph(FanOut)
        builder.add_node("work", work)
        builder.add_conditional_edges(START, plan, ["work"])
        builder.add_edge("work", END)
        return builder

    results = []
    for saver in savers:
        marker = {"fail": True}
        graph = build(marker).compile(checkpointer=saver)
        with pytest.raises(Boom):
            await graph.ainvoke({"items": [1, 2, 3, 4], "results": []}, config())
        marker["fail"] = False
        done = await graph.ainvoke(None, config())
        results.append(sorted(done["results"]))
    assert results[1] == results[0] == [1, 2, 3, 4]
