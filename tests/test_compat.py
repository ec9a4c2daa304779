"""Real programs, written only with public LangGraph and langchain APIs, behave on TelarSaver exactly as
on InMemorySaver: the same stream chunks, `get_state` (tasks, errors, interrupts, metadata, subgraph
states), subgraph histories and `get_state_history`, on every store, sync and async, with LangGraph's
default and strict serialisation; and a new process that opens the same store continues each thread
as InMemorySaver does. Only ids and times that differ from run to run are normalised (tests/records.py).

The programs are in tests/programs.py: `create_react_agent` and `langchain.agents.create_agent` with a
scripted tool-calling model, a tool that asks a human (`interrupt`), the Functional API with pydantic
values and an interrupt in a task, user pydantic (v1 and v2), dataclass, Enum, NamedTuple and local
classes in fields typed `Any`, a node storing `message.text`, a node that fails once (retried by
invoking again, or by a RetryPolicy), a node that edits an earlier list item in place, a `Send`
map-reduce and a subgraph that asks a human.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from telar_checkpoint import TelarSaver
from telar_checkpoint.stores import Store
from tests.programs import PROGRAMS, question, react_agent
from tests.records import (
    first_difference,
    normalize_ids,
    plain,
    record_run,
    resumed_part,
    thread_config,
)
from tests.stores import SHARED_KINDS, describe, make_store, unavailable

# The programs compared include `create_react_agent`'s, deprecated for `langchain.agents.create_agent`,
# which users still call.
pytestmark = pytest.mark.filterwarnings("ignore:create_react_agent has been moved:DeprecationWarning")

ROOT = Path(__file__).parent.parent
NEEDS_LANGCHAIN = {"langchain_agent"}  # programs built with the `langchain` package (in the test extra)
NEW_PROCESS_TIMEOUT = 120  # seconds for the new process to continue every program's thread

_references: dict[tuple[str, str, bool], dict] = {}


def require_packages(name: str) -> None:
    if name in NEEDS_LANGCHAIN and importlib.util.find_spec("langchain") is None:
        unavailable("the langchain package is not installed (pip install telar-checkpoint[test])")


@pytest.fixture
def strict_msgpack(monkeypatch) -> None:
    """As LANGGRAPH_STRICT_MSGPACK=true (read by LangGraph at import): the graph passes its schema's
    classes to `with_allowlist`, and InMemorySaver gives the data of other classes, not the objects."""
    from langgraph._internal import _serde
    from langgraph.checkpoint.serde import _msgpack

    monkeypatch.setattr(_serde, "STRICT_MSGPACK_ENABLED", True)
    monkeypatch.setattr(_msgpack, "STRICT_MSGPACK_ENABLED", True)


async def reference(name: str, mode: str, strict: bool) -> dict:
    """The program's record on InMemorySaver (raw; computed once per program, mode and strictness)."""
    key = (name, mode, strict)
    if key not in _references:
        # A serializer made now, as LANGGRAPH_STRICT_MSGPACK is read when one is made: the default
        # one of InMemorySaver was made at import.
        saver = InMemorySaver(serde=JsonPlusSerializer())
        _references[key] = await record_run(PROGRAMS[name], lambda: saver, name, mode)
    return _references[key]


def assert_same(got: dict, ref: dict) -> None:
    got, ref = normalize_ids(got), normalize_ids(ref)
    difference = first_difference(got, ref)
    assert difference is None, difference


def values(record: dict, step: int | None = None) -> Any:
    """The thread's values after `step`, or at the end (read by a new saver), in a record."""
    state = record["final"]["state"] if step is None else record["steps"][step]["state"]
    return state["fields"]["values"]


def contents(messages: list[dict]) -> list[Any]:
    return [message["fields"]["content"] for message in messages]


def interrupt_values(record: dict, step: int) -> list[Any]:
    return [item["fields"]["value"] for item in record["steps"][step]["state"]["fields"]["interrupts"]]


def class_of(value: dict) -> str:
    return value["$class"].rsplit(".", 1)[-1]


# What each program is for, checked on its InMemorySaver run: the comparisons below then hold
# TelarSaver to it too, and these keep a broken program from passing by agreeing with itself.
def _react_agent(record: dict) -> None:
    assert contents(values(record)["messages"])[-1] == "Done: It is sunny in Rome, 24 degrees."


def _interrupt_in_tool(record: dict) -> None:
    assert interrupt_values(record, 0) == [{"action": "send_email", "to": "bob"}]
    assert values(record, 0)["messages"][-1]["fields"]["tool_calls"][0]["name"] == "send_email"
    assert contents(values(record)["messages"])[-1] == "Done: Email to alice: rejected."


def _langchain_agent(record: dict) -> None:
    assert record["steps"][1]["state"]["fields"]["next"] == ["HumanInTheLoopMiddleware.after_model"]
    assert contents(values(record)["messages"])[-1] == "Done: Letter sent to carol."


def _functional_api(record: dict) -> None:
    question, = interrupt_values(record, 0)
    assert class_of(question["quote"]) == "Quote" and question["quote"]["fields"]["price"] == 5.0
    receipt = values(record)
    assert class_of(receipt) == "Receipt" and receipt["fields"]["approved_by"] == "bob"
    assert receipt["fields"]["orders_so_far"] == 2, "the second order read the first from `previous`"


def _user_values(record: dict) -> None:
    final = values(record)
    kinds = {key: class_of(final[key]) for key in ("plan", "legacy", "budget", "priority", "point")}
    assert list(kinds.values()) == ["Plan", "LegacyPlan", "Budget", "Priority", "Point"]
    assert final["priority"]["value"] == "high" and final["local"] == {"text": "note 2"}  # a local class: its data


def _message_text(record: dict) -> None:
    assert values(record)["answer"] == "You said: how are you?"  # a plain str once stored


def _fails_once(record: dict) -> None:
    first = record["steps"][0]
    assert first["raised"] == {"$class": "builtins.ValueError", "args": ["boom on report"]}
    assert [task["fields"]["error"] for task in first["state"]["fields"]["tasks"]] == ["ValueError('boom on report')"]
    assert values(record)["log"] == ["prepared", "worked on report", "prepared", "worked on second report"]


def _retry_policy(record: dict) -> None:
    assert values(record)["log"] == ["worked on a", "worked on b"]


def _edit_in_place(record: dict) -> None:
    assert values(record)["log"] == [{"text": "edited at 2"}, {"text": "entry 1"}, {"text": "entry 2"}]


def _map_reduce(record: dict) -> None:
    assert values(record)["report"] == "a b: 2, c d e: 3, f: 1, g h i j: 4"


def _subgraph_interrupt(record: dict) -> None:
    paused = record["steps"][0]
    task, = paused["state_with_subgraphs"]["fields"]["tasks"]
    assert task["fields"]["state"]["fields"]["next"] == ["review"] and len(paused["subgraph_histories"]) == 1
    assert values(record)["log"][-1] == "published about dogs (no)"


PURPOSES = {
    "react_agent": _react_agent,
    "react_agent_interrupt_in_tool": _interrupt_in_tool,
    "langchain_agent": _langchain_agent,
    "functional_api": _functional_api,
    "user_values": _user_values,
    "message_text": _message_text,
    "fails_once": _fails_once,
    "retry_policy": _retry_policy,
    "edit_in_place": _edit_in_place,
    "map_reduce": _map_reduce,
    "subgraph_interrupt": _subgraph_interrupt,
}


@pytest.mark.parametrize("name", list(PROGRAMS))
async def test_the_reference_run_does_what_the_program_is_for(name: str) -> None:
    require_packages(name)
    PURPOSES[name](normalize_ids(await reference(name, "sync", False)))


# --- In this process, on every store ---


@pytest.mark.parametrize("name", list(PROGRAMS))
async def test_program_matches_in_memory_saver(store: Store, name: str) -> None:
    require_packages(name)
    ref = await reference(name, "sync", False)
    assert_same(await record_run(PROGRAMS[name], lambda: TelarSaver(store), name, "sync"), ref)


@pytest.mark.parametrize("name", list(PROGRAMS))
async def test_program_matches_in_memory_saver_with_strict_msgpack(
    tmp_path: Path, request: pytest.FixtureRequest, name: str, strict_msgpack: None
) -> None:
    """Strictness is the serialiser's business, whatever the store: the file store alone runs it."""
    require_packages(name)
    store = make_store("file", tmp_path, request)
    ref = await reference(name, "sync", True)
    assert_same(await record_run(PROGRAMS[name], lambda: TelarSaver(store), name, "sync"), ref)


@pytest.mark.parametrize("name", list(PROGRAMS))
async def test_program_matches_in_memory_saver_async(astore: Store, name: str) -> None:
    require_packages(name)
    ref = await reference(name, "async", False)
    assert_same(await record_run(PROGRAMS[name], lambda: TelarSaver(astore), name, "async"), ref)


def test_get_state_at_a_checkpoint_echoes_the_callers_config(store: Store) -> None:
    """`get_state` (and the history) at a given checkpoint give back the caller's whole config, as
    LangGraph's savers do: its own `configurable` keys and the keys beside `configurable`."""
    seen = []
    for saver in (InMemorySaver(), TelarSaver(store)):
        graph = react_agent(saver, {})
        graph.invoke(question("what is the weather in Paris?").make_input({}), thread_config("echo"))
        older = list(graph.get_state_history(thread_config("echo")))[2].config
        asked = {"configurable": {**older["configurable"], "user_id": "user-1", "model": "small"}, "tags": ["review"]}
        seen.append(plain({"state": graph.get_state(asked), "history": list(graph.get_state_history(asked))}))
    assert_same(seen[1], seen[0])


# --- A new process continues each thread from the same store ---


@pytest.fixture(scope="module", params=SHARED_KINDS)
def continued_elsewhere(request, tmp_path_factory) -> dict[str, Any]:
    """Per shared store kind: each program runs its first steps here, then ONE new process opens the
    same store and runs the rest of every program (see `tests.records.main`); its records, by program
    (or the error that stopped a program here, or there)."""
    store = make_store(request.param, tmp_path_factory.mktemp(request.param), request)
    results: dict[str, Any] = {}
    for name, program in PROGRAMS.items():
        try:
            asyncio.run(record_run(program, lambda: TelarSaver(store), name, "sync", stop=program.resume_at))
        except Exception as error:
            results[name] = {"error": f"in the first process: {error!r}"}
    continuing = [name for name in PROGRAMS if name not in results]
    folder = tmp_path_factory.mktemp("continued")
    description, out = folder / "store.json", folder / "out.json"
    description.write_text(json.dumps(describe(store)), encoding="utf-8")
    command = [sys.executable, "-c", "from tests.records import main; main()", str(description), str(out), *continuing]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=NEW_PROCESS_TIMEOUT)
    assert done.returncode == 0, done.stderr
    results.update(json.loads(out.read_text(encoding="utf-8")))
    return results


@pytest.mark.parametrize("name", list(PROGRAMS))
async def test_program_continued_in_a_new_process(continued_elsewhere: dict[str, Any], name: str) -> None:
    require_packages(name)
    got = continued_elsewhere[name]
    if "error" in got:
        pytest.fail(got["error"], pytrace=False)
    ref = resumed_part(await reference(name, "sync", False), PROGRAMS[name])
    assert_same(got, ref)
