"""Run a program of tests/programs.py on a checkpointer and record, as plain JSON data, everything a
user sees: stream chunks, `get_state` (with and without subgraphs), subgraph and thread histories.
Records of two savers are compared after `normalize_ids`; `first_difference` says where they part.

Also the entry point of the new process that continues the programs' threads on a shared store:
``python -c "from tests.records import main; main()" DESCRIPTION.json OUT.json PROGRAM...``.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import re
import sys
import traceback
from collections.abc import Callable
from typing import Any

import pydantic
import pydantic.v1
from langgraph.types import PregelTask, StateSnapshot

from tests.programs import PROGRAMS, Program, Step

STREAM_MODES = ["values", "updates"]

# Ids that legitimately differ between two runs: checkpoint, task and message ids (uuids, also
# inside namespaces such as "writer:<uuid>") and interrupt ids (32 hex digits).
_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|\b[0-9a-f]{32}\b")
_SNAPSHOT_TIMES = {"created_at"}  # the time a checkpoint was made, not part of the comparison


def thread_config(thread: str) -> dict:
    """A thread's config as apps pass it: with a key of their own, which LangGraph copies into metadata."""
    return {"configurable": {"thread_id": thread, "user_id": "user-1"}}


# --- Plain data: every value with its exact class named ---


def _class_name(value: Any) -> str:
    return f"{type(value).__module__}.{type(value).__qualname__}"


def plain(value: Any) -> Any:
    """`value` as JSON data that names each class, so that equal data means equal values of equal types.

    Tuples become lists: LangGraph's savers give a tuple back as a list, TelarSaver keeps it a tuple
    (a documented difference); NamedTuples keep their class.
    """
    if value is None or type(value) in (bool, int, float, str):
        return value
    if isinstance(value, (str, int, float)) and not isinstance(value, (bool, enum.Enum)):
        return {"$class": _class_name(value), "value": _builtin(value)}
    if isinstance(value, dict):
        if type(value) is dict and all(type(key) is str for key in value):
            return {key: plain(item) for key, item in value.items()}
        return {"$class": _class_name(value), "pairs": [[plain(k), plain(v)] for k, v in value.items()]}
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        fields = {name: plain(getattr(value, name)) for name in value._fields}
        if isinstance(value, StateSnapshot):
            fields = {name: item for name, item in fields.items() if name not in _SNAPSHOT_TIMES}
        if isinstance(value, PregelTask):
            fields["result"] = _message_ids_masked(fields["result"])
        return {"$class": _class_name(value), "fields": fields}
    if isinstance(value, (list, tuple)):
        items = [plain(item) for item in value]
        return items if type(value) in (list, tuple) else {"$class": _class_name(value), "items": items}
    if isinstance(value, (set, frozenset)):
        return {"$class": _class_name(value), "items": sorted((plain(item) for item in value), key=repr)}
    if isinstance(value, enum.Enum):
        return {"$class": _class_name(value), "value": plain(value.value)}
    if isinstance(value, pydantic.BaseModel):
        fields = {name: plain(getattr(value, name)) for name in type(value).model_fields}
        return {"$class": _class_name(value), "fields": {**fields, **plain(value.model_extra or {})}}
    if isinstance(value, pydantic.v1.BaseModel):
        fields = {name: plain(getattr(value, name)) for name in value.__fields__}
        return {"$class": _class_name(value), "fields": fields}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {field.name: plain(getattr(value, field.name)) for field in dataclasses.fields(value)}
        return {"$class": _class_name(value), "fields": fields}
    if isinstance(value, BaseException):
        return {"$class": _class_name(value), "args": plain(value.args)}
    if isinstance(value, bytes):
        return {"$class": "bytes", "hex": value.hex()}
    return {"$class": _class_name(value), "repr": repr(value)}


def _message_ids_masked(value: Any) -> Any:
    """A task's result (its stored writes) with message ids masked. LangGraph hands a task's writes to
    the saver from a background thread while `add_messages` gives the same message objects ids in
    place, so whether a stored write has that id depends on timing, even on InMemorySaver."""
    if isinstance(value, list):
        return [_message_ids_masked(item) for item in value]
    if isinstance(value, dict):
        masked = {key: _message_ids_masked(item) for key, item in value.items()}
        if str(value.get("$class", "")).endswith("Message") and "id" in masked.get("fields", {}):
            masked["fields"] = {**masked["fields"], "id": "<set in place by add_messages>"}
        return masked
    return value


def _builtin(value: Any) -> Any:
    """A `str`, `int` or `float` subclass's value as the built-in type."""
    for kind in (str, float, int):
        if isinstance(value, kind):
            return kind(value)
    raise TypeError(value)


def normalize_ids(record: Any) -> Any:
    """`record` with each id replaced by ``<id N>``, N counting distinct ids in order of appearance,
    so two runs compare equal when their ids refer to the same things. Dict items are numbered in
    the order of their keys with ids masked, so a saver's key order does not change the numbering."""
    numbers: dict[str, str] = {}

    def number(match: re.Match) -> str:
        return numbers.setdefault(match.group(), f"<id {len(numbers)}>")

    def walk(value: Any) -> Any:
        if isinstance(value, str):
            return _ID.sub(number, value)
        if isinstance(value, list):
            return [walk(item) for item in value]
        if isinstance(value, dict):
            in_key_order = sorted(value.items(), key=lambda item: _ID.sub("#", item[0]))
            walked = {key: (walk(key), walk(item)) for key, item in in_key_order}
            return dict(walked[key] for key in value)  # numbered in key order, kept in the saver's order
        return value

    return walk(record)


def first_difference(got: Any, ref: Any, where: str = "") -> str | None:
    """Where `got` first differs from `ref` (the reference), as a readable line, or None if equal."""
    if type(got) is not type(ref):
        return f"at {where or 'top'}: got {_short(got)}, InMemorySaver gave {_short(ref)}"
    if isinstance(ref, dict):
        for key in [*ref, *(key for key in got if key not in ref)]:
            if key not in got or key not in ref:
                got_item, ref_item = got.get(key, "<missing>"), ref.get(key, "<missing>")
                return f"at {where}.{key}: got {_short(got_item)}, InMemorySaver gave {_short(ref_item)}"
            if (found := first_difference(got[key], ref[key], f"{where}.{key}")) is not None:
                return found
        return None
    if isinstance(ref, list):
        for index, (got_item, ref_item) in enumerate(zip(got, ref)):
            if (found := first_difference(got_item, ref_item, f"{where}[{index}]")) is not None:
                return found
        if len(got) != len(ref):
            extra = got[len(ref) :] or ref[len(got) :]
            return f"at {where}: got {len(got)} items, InMemorySaver gave {len(ref)}: {_short(extra)} differ"
        return None
    if got == ref:
        return None
    found = f"at {where or 'top'}: got {_short(got)}, InMemorySaver gave {_short(ref)}"
    if "<id " in str(ref):
        found += " (ids are numbered in order of appearance: the ids that differ may come later)"
    return found


def _short(value: Any) -> str:
    text = json.dumps(value, default=repr)
    return text if len(text) < 400 else text[:400] + "..."


# --- Running a program ---


class Calls:
    """The graph calls a user makes, sync or async, so each is written once."""

    def __init__(self, mode: str) -> None:
        self.mode = mode

    async def state(self, graph: Any, config: dict, subgraphs: bool = False) -> StateSnapshot:
        if self.mode == "sync":
            return graph.get_state(config, subgraphs=subgraphs)
        return await graph.aget_state(config, subgraphs=subgraphs)

    async def history(self, graph: Any, config: dict) -> list[StateSnapshot]:
        if self.mode == "sync":
            return list(graph.get_state_history(config))
        return [snapshot async for snapshot in graph.aget_state_history(config)]


async def run_step(graph: Any, step: Step, context: dict, config: dict, calls: Calls, durability: str) -> dict:
    """One call on the thread, and what the thread looks like after it."""
    value = step.make_input(context)
    chunks: list = []
    raised = None
    options = {"stream_mode": STREAM_MODES, "subgraphs": True, "durability": durability}
    try:
        if calls.mode == "sync":
            for chunk in graph.stream(value, config, **options):
                chunks.append(plain(chunk))
        else:
            async for chunk in graph.astream(value, config, **options):
                chunks.append(plain(chunk))
    except (step.raises,) if step.raises else () as error:
        raised = plain(error)
    nested = await calls.state(graph, config, subgraphs=True)
    subgraph_states = [task.state for task in nested.tasks if isinstance(task.state, StateSnapshot)]
    subgraph_histories = [plain(await calls.history(graph, state.config)) for state in subgraph_states]
    return {
        "chunks": _updates_in_a_fixed_order(chunks),
        "raised": raised,
        "state": plain(await calls.state(graph, config)),
        "state_with_subgraphs": plain(nested),
        "subgraph_histories": subgraph_histories,
    }


def _updates_in_a_fixed_order(chunks: list) -> list:
    """Tasks of one step run in parallel and their "updates" chunks come in the order they finish:
    sort each run of consecutive "updates" chunks (ids masked), keep everything else in place."""
    ordered: list = []
    run: list = []
    for chunk in [*chunks, None]:
        if chunk is not None and chunk[1] == "updates":
            run.append(chunk)
            continue
        ordered.extend(sorted(run, key=lambda c: _ID.sub("#", json.dumps(c, sort_keys=True))))
        run = []
        if chunk is not None:
            ordered.append(chunk)
    return ordered


async def final_reads(graph: Any, config: dict, calls: Calls) -> dict:
    """What the thread holds at the end, read by a saver that took no part in the run."""
    return {
        "state": plain(await calls.state(graph, config)),
        "state_with_subgraphs": plain(await calls.state(graph, config, subgraphs=True)),
        "history": plain(await calls.history(graph, config)),
    }


async def record_run(
    program: Program, new_saver: Callable[[], Any], thread: str, mode: str, start: int = 0, stop: int | None = None
) -> dict:
    """Run `program.steps[start:stop]` on `thread`, a new saver (and a new build of the program) taking
    over at `program.resume_at`, and read the result with one more new saver; raw, ids not normalised."""
    calls = Calls(mode)
    config = thread_config(thread)
    context: dict = {}
    graph = program.build(new_saver(), context)
    steps = []
    for index in range(start, len(program.steps) if stop is None else stop):
        if index == program.resume_at and index != start:
            context = {}
            graph = program.build(new_saver(), context)
        steps.append(await run_step(graph, program.steps[index], context, config, calls, program.durability))
    return {"steps": steps, "final": await final_reads(program.build(new_saver(), {}), config, calls)}


def resumed_part(record: dict, program: Program) -> dict:
    """The part of a whole run's record that a new process taking over at `resume_at` gives."""
    return {"steps": record["steps"][program.resume_at :], "final": record["final"]}


# --- The new process ---


def main() -> None:
    """Continue each named program's thread (named after it) on the store described in argv[1], from
    its `resume_at` step; write {program: record or {"error": traceback}} as JSON to argv[2]."""
    import asyncio

    from telar_checkpoint import TelarSaver
    from tests.stores import reopen

    description_path, out_path, *names = sys.argv[1:]
    with open(description_path, encoding="utf-8") as file:
        kind, options = json.load(file)
    store = reopen((kind, options))
    results: dict[str, Any] = {}
    try:
        for name in names:
            program = PROGRAMS[name]
            try:
                run = record_run(program, lambda: TelarSaver(store), name, "sync", start=program.resume_at)
                record = asyncio.run(run)
                results[name] = normalize_ids(record)
            except Exception:
                results[name] = {"error": traceback.format_exc()}
    finally:
        store.close()
    with open(out_path, "w", encoding="utf-8") as file:
        json.dump(results, file)
