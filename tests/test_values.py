"""Every value a LangGraph program holds reads back as InMemorySaver gives it (issue 14).

Real graphs run on InMemorySaver and on TelarSaver (file store), and a new TelarSaver,
in this process and in a new one, reads the thread back: user classes in fields
LangGraph derives nothing from (typed `Any` or `list`), in both strict and default
mode; `str` subclasses such as `message.text`; a failed task's error; and the config
`get_state` returns for a config that names a checkpoint.
"""

from __future__ import annotations

import asyncio
import dataclasses
import operator
import os
import subprocess
import sys
import textwrap
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, NamedTuple, TypedDict

import pydantic
import pydantic.v1
import pytest
from langchain_core.messages import AIMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph

from telar_checkpoint import TelarSaver

ROOT = Path(__file__).parent.parent


# --- the program's own classes, in fields LangGraph derives no allowlist from ---


class Plan(pydantic.BaseModel):
    goal: str
    steps: list[str] = []


class OldPlan(pydantic.v1.BaseModel):
    goal: str
    done: bool = False


@dataclasses.dataclass
class Budget:
    tokens: int
    calls: list[str] = dataclasses.field(default_factory=list)


class Mood(Enum):
    HAPPY = "happy"
    SAD = "sad"


class Point(NamedTuple):
    x: int
    y: int


class State(TypedDict, total=False):
    thing: Any
    things: list
    log: Annotated[list, operator.add]


def user_values(turn: int) -> dict[str, Any]:
    """Each class with every field given, so that its plain data is the same whoever gives it."""
    return {
        "thing": Plan(goal=f"goal {turn}", steps=["look", "act"]),
        "things": [Budget(turn, ["search"]), Mood.HAPPY, Point(turn, 2), OldPlan(goal="old", done=True)],
        "log": [Mood.SAD, Plan(goal=f"log {turn}", steps=[])],
    }


def user_class_graph(values: Any = user_values) -> StateGraph:
    def step(state: State) -> dict[str, Any]:
        return values(len(state.get("log", [])))

    builder = StateGraph(State)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_edge("step", END)
    return builder


CONFIG = {"configurable": {"thread_id": "values"}}


def run_twice(saver: Any, builder: StateGraph) -> tuple[Any, ...]:
    """Two turns, then what a program reads: outputs, state, history values."""
    graph = builder.compile(checkpointer=saver)
    first = graph.invoke({"log": []}, CONFIG)
    second = graph.invoke({"log": []}, CONFIG)
    state = graph.get_state(CONFIG)
    history = [snapshot.values for snapshot in graph.get_state_history(CONFIG)]
    return first, second, state.values, state.next, history


def read_back(saver: Any, builder: StateGraph) -> tuple[Any, ...]:
    graph = builder.compile(checkpointer=saver)
    state = graph.get_state(CONFIG)
    return state.values, state.next, [snapshot.values for snapshot in graph.get_state_history(CONFIG)]


def compare_user_classes(directory: str) -> None:
    """Run the user-class graph on both savers, then read it with a new TelarSaver;
    everything must equal InMemorySaver's. Also run in new processes, strict or not."""
    reference = run_twice(InMemorySaver(), user_class_graph())
    got = run_twice(TelarSaver(directory), user_class_graph())
    assert got[:4] == reference[:4]
    assert got[4] == reference[4][: len(got[4])]  # the same history, newest first
    assert read_back(TelarSaver(directory), user_class_graph()) == (got[2], got[3], got[4])


def test_user_classes_in_any_and_list_fields_read_back_as_in_memory_saver_gives_them(tmp_path) -> None:
    compare_user_classes(str(tmp_path))
    values = read_back(TelarSaver(tmp_path), user_class_graph())[0]
    assert type(values["thing"]) is Plan and values["things"][1] is Mood.HAPPY
    assert [type(v) for v in values["things"]] == [Budget, Mood, Point, OldPlan]


SCRIPT = textwrap.dedent(
    """
    import sys
    from tests.test_values import compare_user_classes
    compare_user_classes(sys.argv[1])
    """
)


@pytest.mark.parametrize("strict", ["false", "true"], ids=["default", "strict"])
def test_user_classes_read_back_in_a_new_process(tmp_path, strict) -> None:
    """A new process that imports the program: by default the classes load (as InMemorySaver
    loads them); with LANGGRAPH_STRICT_MSGPACK=true they load as the same plain data
    InMemorySaver gives, never as an error."""
    env = {**os.environ, "LANGGRAPH_STRICT_MSGPACK": strict}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # the same thread, read once more by a third process (this one) with the classes imported
    assert read_back(TelarSaver(tmp_path), user_class_graph())[0]["things"][2] == Point(2, 2)


def local_classes() -> tuple[type, type]:
    class LocalPlan(pydantic.BaseModel):
        goal: str

    @dataclasses.dataclass
    class LocalBudget:
        tokens: int

    return LocalPlan, LocalBudget


def test_classes_defined_inside_a_function_read_back_as_plain_data(tmp_path) -> None:
    """Such a class cannot be found by its name: InMemorySaver gives its plain data, and so do we."""
    LocalPlan, LocalBudget = local_classes()

    def values(turn: int) -> dict[str, Any]:
        return {"thing": LocalPlan(goal=f"g{turn}"), "things": [LocalBudget(turn)], "log": [turn]}

    reference = run_twice(InMemorySaver(), user_class_graph(values))
    got = run_twice(TelarSaver(tmp_path), user_class_graph(values))
    assert got[2] == reference[2] == {"thing": {"goal": "g1"}, "things": [{"tokens": 1}], "log": [0, 1]}
    assert read_back(TelarSaver(tmp_path), user_class_graph(values))[0] == reference[2]


# --- str (and int, float, list, dict) subclasses: stored as the base type ---


class Answer(TypedDict, total=False):
    question: str
    answer: Any
    extras: list


def test_a_node_returning_message_text_stores_it_as_str(tmp_path) -> None:
    reply = AIMessage("It is sunny.")
    assert type(reply.text) is not str and isinstance(reply.text, str)  # langchain-core 1.x: TextAccessor

    class Count(int): ...

    class Items(list): ...

    class Fields(dict): ...

    def answer(state: Answer) -> dict[str, Any]:
        return {"answer": reply.text, "extras": [Count(3), Items([reply.text]), Fields(a=reply.text)]}

    builder = StateGraph(Answer)
    builder.add_node("answer", answer)
    builder.add_edge(START, "answer")
    results = []
    for saver in (InMemorySaver(), TelarSaver(tmp_path)):
        graph = builder.compile(checkpointer=saver)
        output = graph.invoke({"question": "weather?"}, CONFIG)
        results.append((output, graph.get_state(CONFIG).values))
    assert results[1] == results[0]
    values = read_back(TelarSaver(tmp_path), builder)[0]
    assert values == results[0][1]
    assert type(values["answer"]) is str and [type(v) for v in values["extras"]] == [int, list, dict]
    assert type(values["extras"][1][0]) is str and type(values["extras"][2]["a"]) is str


def test_a_float_subclass_is_stored_as_float(tmp_path) -> None:
    """LangGraph's serializer refuses a float subclass at write; we store its float value."""

    class Score(float): ...

    builder = StateGraph(Answer)
    builder.add_node("answer", lambda state: {"answer": Score(0.5)})
    builder.add_edge(START, "answer")
    builder.compile(checkpointer=TelarSaver(tmp_path)).invoke({"question": "score?"}, CONFIG)
    stored = read_back(TelarSaver(tmp_path), builder)[0]["answer"]
    assert stored == 0.5 and type(stored) is float


# --- a failed task: its error reads back as the text LangGraph's savers give ---


class Counter(TypedDict):
    count: int


def failing_graph(failures: list[str]) -> StateGraph:
    def work(state: Counter) -> dict[str, int]:
        if failures:
            raise ValueError(failures.pop())
        return {"count": state["count"] + 1}

    builder = StateGraph(Counter)
    builder.add_node("work", work)
    builder.add_edge(START, "work")
    builder.add_edge("work", END)
    return builder


def test_a_failed_tasks_error_reads_back_as_its_repr_text_and_the_thread_resumes(tmp_path) -> None:
    results = []
    for saver in (InMemorySaver(), TelarSaver(tmp_path)):
        failures = ["boom"]
        graph = failing_graph(failures).compile(checkpointer=saver)
        with pytest.raises(ValueError, match="boom"):
            graph.invoke({"count": 0}, CONFIG)
        task = graph.get_state(CONFIG).tasks[0]
        pending = [value for _, channel, value in saver.get_tuple(CONFIG).pending_writes if channel == "__error__"]
        results.append((task.name, task.error, pending, "boom" in task.error))
        results.append(graph.invoke(None, CONFIG))  # the retry runs the task again, and it succeeds
    assert results[2:] == results[:2]
    assert results[0] == ("work", "ValueError('boom')", ["ValueError('boom')"], True)
    assert results[1] == {"count": 1}


def test_a_new_saver_reads_a_failed_tasks_error_as_text_and_resumes(tmp_path) -> None:
    failures = ["boom"]
    with pytest.raises(ValueError):
        failing_graph(failures).compile(checkpointer=TelarSaver(tmp_path)).invoke({"count": 0}, CONFIG)
    graph = failing_graph(failures).compile(checkpointer=TelarSaver(tmp_path))
    assert graph.get_state(CONFIG).tasks[0].error == "ValueError('boom')"
    assert graph.invoke(None, CONFIG) == {"count": 1}


# --- get_state with a checkpoint id: the caller's config comes back, as the official savers give it ---


def test_get_state_with_a_checkpoint_id_echoes_the_callers_config(tmp_path) -> None:
    results = []
    for saver in (InMemorySaver(), TelarSaver(tmp_path)):
        graph = failing_graph([]).compile(checkpointer=saver)
        graph.invoke({"count": 0}, CONFIG)
        oldest = list(graph.get_state_history(CONFIG))[-1].config["configurable"]["checkpoint_id"]
        named = {
            "configurable": {"thread_id": "values", "checkpoint_id": oldest, "user_id": "u1", "model": "m"},
            "tags": ["replay"],
            "metadata": {"why": "audit"},
        }
        state = graph.get_state(named)
        async_state = asyncio.run(graph.aget_state(named))
        fetched = saver.get_tuple(named)
        latest = saver.get_tuple(CONFIG).config
        assert state.config == async_state.config == fetched.config == named
        results.append((fetched.config is named, sorted(latest["configurable"])))
    assert results[1] == results[0] == (True, ["checkpoint_id", "checkpoint_ns", "thread_id"])


def functional_program(checkpointer: Any) -> Any:
    from langgraph.func import entrypoint, task

    @task
    def plan_for(goal: str) -> Plan:
        return Plan(goal=goal, steps=["look"])

    @entrypoint(checkpointer=checkpointer)
    def program(goal: str, *, previous: Any = None) -> entrypoint.final[Plan, dict]:
        plan = plan_for(goal).result()
        return entrypoint.final(value=plan, save={"plans": [*(previous or {}).get("plans", []), plan], "mood": Mood.HAPPY})

    return program


def test_functional_api_state_of_user_classes_reads_back_as_in_memory_saver_gives_it(tmp_path) -> None:
    """An @entrypoint's saved state and its tasks' results are classes LangGraph derives
    no allowlist from; a new saver reads them, and the next run gets them as `previous`."""
    results = []
    for saver, reopened in ((ref := InMemorySaver(), lambda: ref), (TelarSaver(tmp_path), lambda: TelarSaver(tmp_path))):
        program = functional_program(saver)
        outputs = [program.invoke(goal, CONFIG) for goal in ("first", "second")]
        program = functional_program(reopened())
        state = program.get_state(CONFIG).values
        outputs.append(program.invoke("third", CONFIG))
        saved = program.checkpointer.get_tuple(CONFIG).checkpoint["channel_values"]["__previous__"]
        results.append((outputs, state, saved))
    assert results[1] == results[0]
    assert results[0][1] == Plan(goal="second", steps=["look"]) and type(results[1][1]) is Plan
    saved = results[1][2]
    assert [plan.goal for plan in saved["plans"]] == ["first", "second", "third"] and saved["mood"] is Mood.HAPPY
