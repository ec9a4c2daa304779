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

from telar_checkpoint import TelarSaver
from telar_checkpoint.stores import Store
from tests.programs import PROGRAMS, react_agent, question
from tests.records import (
    first_difference,
    normalize_ids,
    plain,
    record_run,
    resumed_part,
    thread_config,
)
from tests.stores import SHARED_KINDS, describe, make_store, unavailable

ROOT = Path(__file__).parent.parent
NEEDS_LANGCHAIN = {"langchain_agent"}  # programs built with the `langchain` package (in the test extra)
NEW_PROCESS_TIMEOUT = 120  # seconds for the new process to continue every program's thread

_references: dict[tuple[str, str, bool], dict] = {}


def require_packages(name: str) -> None:
    if name in NEEDS_LANGCHAIN and importlib.util.find_spec("langchain") is None:
        unavailable("the langchain package is not installed (pip install telar-checkpoint[test])")


@pytest.fixture(params=[False, True], ids=["default", "strict"])
def strict_msgpack(request, monkeypatch) -> bool:
    """LangGraph's default serialisation, or LANGGRAPH_STRICT_MSGPACK=true as read at import time: the
    graph then passes its schema's classes to `with_allowlist`, and InMemorySaver gives the data of
    other classes instead of reviving them."""
    from langgraph._internal import _serde
    from langgraph.checkpoint.serde import _msgpack

    monkeypatch.setattr(_serde, "STRICT_MSGPACK_ENABLED", request.param)
    monkeypatch.setattr(_msgpack, "STRICT_MSGPACK_ENABLED", request.param)
    return request.param


async def reference(name: str, mode: str, strict: bool) -> dict:
    """The program's record on InMemorySaver (raw; computed once per program, mode and strictness)."""
    key = (name, mode, strict)
    if key not in _references:
        saver = InMemorySaver()
        _references[key] = await record_run(PROGRAMS[name], lambda: saver, name, mode)
    return _references[key]


def assert_same(got: dict, ref: dict) -> None:
    got, ref = normalize_ids(got), normalize_ids(ref)
    difference = first_difference(got, ref)
    assert difference is None, difference


# --- In this process, on every store ---


@pytest.mark.parametrize("name", list(PROGRAMS))
async def test_program_matches_in_memory_saver(store: Store, name: str, strict_msgpack: bool) -> None:
    require_packages(name)
    ref = await reference(name, "sync", strict_msgpack)
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
    (folder / "store.json").write_text(json.dumps(describe(store)), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-c", "from tests.records import main; main()", str(folder / "store.json"), str(folder / "out.json"), *continuing],
        cwd=ROOT, capture_output=True, text=True, timeout=NEW_PROCESS_TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    results.update(json.loads((folder / "out.json").read_text(encoding="utf-8")))
    return results


@pytest.mark.parametrize("name", list(PROGRAMS))
async def test_program_continued_in_a_new_process(continued_elsewhere: dict[str, Any], name: str) -> None:
    require_packages(name)
    got = continued_elsewhere[name]
    if "error" in got:
        pytest.fail(got["error"], pytrace=False)
    ref = resumed_part(await reference(name, "sync", False), PROGRAMS[name])
    assert_same(got, ref)
