"""State-schema migrations (telar_checkpoint.schema): threads of graph version 1, upgraded on read
and offline, run on graph version 2 as threads started there do; failures leave threads as stored."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from langgraph.graph import START, StateGraph
from langgraph.types import Command, interrupt

from telar_checkpoint import TelarSaver
from telar_checkpoint.errors import CorruptLineError, UnknownFormatError
from telar_checkpoint.history import History
from telar_checkpoint.schema import (
    Schema,
    SchemaRefusedError,
    SchemaStepError,
    SchemaVersionError,
    map_channel,
    rename_class,
    rename_node,
    transform,
    upgrade_text,
)
from telar_checkpoint.schema_upgrade import upgrade
from telar_checkpoint.stores import FileStore, MemoryStore, Store
from tests.schema_graphs import SCHEMA, graph_v1, graph_v2

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(params=["memory", "file"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    return MemoryStore() if request.param == "memory" else FileStore(str(tmp_path / "threads"))


def _config(thread_id: str) -> Any:
    return {"configurable": {"thread_id": thread_id}}


def _paused_v1(store: Store, thread_id: str = "t") -> None:
    """A thread of graph version 1, paused in the interrupt of node `ask`."""
    result = graph_v1(TelarSaver(store)).invoke({"request": " hi "}, _config(thread_id))
    assert "__interrupt__" in result


def _reference() -> dict[str, Any]:
    """The final state of a thread started on graph version 2."""
    graph = graph_v2(TelarSaver(MemoryStore(), schema=SCHEMA))
    graph.invoke({"request": " hi "}, _config("ref"))
    return graph.invoke(Command(resume="yes"), _config("ref"))


def test_upgraded_on_read_resumes_on_v2(store: Store) -> None:
    _paused_v1(store)
    before = store.read("t")
    graph = graph_v2(TelarSaver(store, schema=SCHEMA))
    state = graph.get_state(_config("t"))
    assert store.read("t") == before  # a read never writes
    assert state.next == ("ask_user",)
    assert state.values == {"request": " hi ", "memo": "hi", "log": ["prepared  hi "]}
    # Time travel sees the new schema too: every kept checkpoint was upgraded.
    assert all("notes" not in s.values and "scratch" not in s.values for s in graph.get_state_history(_config("t")))
    final = graph.invoke(Command(resume="yes"), _config("t"))
    assert final == _reference()
    assert History.parse("t", store.read("t")).schema_version == 2  # the write stored it upgraded


def test_upgraded_offline_resumes_on_v2(store: Store) -> None:
    _paused_v1(store)
    _paused_v1(store, "u")
    report = upgrade(store, SCHEMA)
    assert report.upgraded == {"t": 1, "u": 1} and report.failures == 0
    upgraded = store.read("t")
    assert '"notes"' not in upgraded and "branch:to:ask\"" not in upgraded
    again = upgrade(store, SCHEMA)  # resumable: a second run changes nothing
    assert again.upgraded == {} and sorted(again.current) == ["t", "u"] and store.read("t") == upgraded
    graph = graph_v2(TelarSaver(store, schema=SCHEMA))
    assert graph.invoke(Command(resume="yes"), _config("t")) == _reference()


def test_dry_run_writes_nothing(store: Store) -> None:
    _paused_v1(store)
    before = store.read("t")
    report = upgrade(store, SCHEMA, dry_run=True)
    assert report.upgraded == {"t": 1} and store.read("t") == before


def test_resume_by_interrupt_id(store: Store) -> None:
    """The interrupt's id is the one LangGraph derives for the renamed node's task."""
    _paused_v1(store)
    graph = graph_v2(TelarSaver(store, schema=SCHEMA))
    (pending,) = graph.get_state(_config("t")).interrupts
    final = graph.invoke(Command(resume={pending.id: "yes"}), _config("t"))
    assert final == _reference()


def test_without_rename_node_the_run_is_lost(store: Store) -> None:
    """The control: the node rename is what keeps the paused run resumable."""
    _paused_v1(store)
    steps = [s for s in SCHEMA.steps[2] if "rename_node" not in repr(s)]
    schema = Schema(version=2, steps={2: steps})
    graph = graph_v2(TelarSaver(store, schema=schema))
    assert graph.get_state(_config("t")).next != ("ask_user",)


def test_new_thread_is_stamped(store: Store) -> None:
    """A thread started by a saver with a schema is stored at its version: never upgraded again."""
    graph = graph_v2(TelarSaver(store, schema=SCHEMA))
    graph.invoke({"request": "  x  "}, _config("n"))
    assert History.parse("n", store.read("n")).schema_version == 2
    report = upgrade(store, SCHEMA)
    assert report.current == ["n"]


_CHILD = """
import json, sys
sys.path.insert(0, {root!r})
from langgraph.types import Command
from telar_checkpoint import TelarSaver
from telar_checkpoint.stores import FileStore
from tests.schema_graphs import SCHEMA, graph_v2
graph = graph_v2(TelarSaver(FileStore({path!r}), schema=SCHEMA))
print(json.dumps(graph.invoke(Command(resume="yes"), {{"configurable": {{"thread_id": "t"}}}})))
"""


@pytest.mark.parametrize("offline", [True, False], ids=["offline", "on-read"])
def test_resumes_in_a_new_process(tmp_path: Path, offline: bool) -> None:
    path = str(tmp_path / "threads")
    _paused_v1(FileStore(path))
    if offline:
        assert upgrade(FileStore(path), SCHEMA).upgraded == {"t": 1}
    child = subprocess.run(
        [sys.executable, "-c", _CHILD.format(root=str(ROOT), path=path)], capture_output=True, text=True, timeout=120
    )
    assert child.returncode == 0, child.stderr
    assert json.loads(child.stdout) == _reference()
    assert History.parse("t", FileStore(path).read("t")).schema_version == 2


def _boom(memo: str) -> str:
    raise ValueError("no memo today")


def test_failing_step_leaves_thread_byte_identical(store: Store) -> None:
    _paused_v1(store)
    _paused_v1(store, "u")
    before = {t: store.read(t) for t in ("t", "u")}
    schema = Schema(version=2, steps={2: [*SCHEMA.steps[2][:1], map_channel("memo", _boom)]})
    report = upgrade(store, schema)
    assert report.failures == 2 and report.upgraded == {}
    error = report.failed["t"]
    assert isinstance(error, SchemaStepError)
    text = str(error)
    assert "'t'" in text and "map_channel('memo', '_boom')" in text and "ValueError" in text and "no memo today" in text
    assert error.checkpoint_id and error.checkpoint_id in before["t"]
    assert {t: store.read(t) for t in ("t", "u")} == before
    with pytest.raises(SchemaStepError, match="no memo today"):  # on read too, and nothing written
        graph_v2(TelarSaver(store, schema=schema)).get_state(_config("t"))
    assert store.read("t") == before["t"]


def test_failing_thread_does_not_stop_the_others(store: Store) -> None:
    _paused_v1(store, "a")
    graph_v2(TelarSaver(store, schema=Schema(version=3))).invoke({"request": "x"}, _config("b"))  # at version 3
    _paused_v1(store, "c")
    report = upgrade(store, SCHEMA)
    assert sorted(report.upgraded) == ["a", "c"] and report.failures == 1
    assert isinstance(report.failed["b"], SchemaVersionError)


def test_newer_thread_is_refused(store: Store) -> None:
    _paused_v1(store)
    upgrade(store, SCHEMA)
    stored = store.read("t")
    old = TelarSaver(store, schema=Schema(version=1))
    with pytest.raises(SchemaVersionError, match=r"thread 't'.*version 2, newer than this schema's version 1"):
        old.get_tuple(_config("t"))
    with pytest.raises(SchemaVersionError, match="thread 't'"):
        graph_v1(old).invoke(Command(resume="yes"), _config("t"))
    assert store.read("t") == stored  # never downgraded


def test_rename_refused_when_paused_inside_a_subgraph(store: Store) -> None:
    def inner(state: dict[str, Any]) -> dict[str, Any]:
        return {"answer": interrupt("inside")}

    sub = StateGraph(dict).add_node("inner", inner).add_edge(START, "inner").compile()

    class State(dict):  # noqa: D101
        pass

    from typing import TypedDict

    class S(TypedDict, total=False):
        answer: str

    builder = StateGraph(S)
    builder.add_node("ask", sub)
    builder.add_edge(START, "ask")
    graph = builder.compile(checkpointer=TelarSaver(store))
    graph.invoke({"answer": ""}, _config("s"))
    before = store.read("s")
    report = upgrade(store, Schema(version=2, steps={2: [rename_node("ask", "ask_user")]}))
    error = report.failed["s"]
    assert isinstance(error, SchemaRefusedError)
    assert "thread 's'" in str(error) and "'ask'" in str(error) and "subgraph" in str(error)
    assert store.read("s") == before


def test_transform_and_rename_class(store: Store) -> None:
    _paused_v1(store)

    def shout(state: dict[str, Any]) -> dict[str, Any]:
        return {**state, "notes": state["notes"].upper()} if "notes" in state else state

    text = store.read("t")
    saver = TelarSaver(store)
    schema = Schema(version=2, steps={2: [transform(shout), rename_class("Interrupt", "myapp.models:Ask")]})
    new = upgrade_text("t", text, schema, saver.codec.values)
    assert new is not None
    latest = History.parse("t", new).latest("")
    assert latest is not None and latest.value("notes") == "   HI   "
    assert '"class":"myapp.models:Ask"' in new and '"class":"Interrupt"' not in new


def test_schema_field_in_the_format() -> None:
    line = '{"format":1,"kind":"dropped","floor":null,"replaced":[],"schema":3}\n'
    history = History.parse("x", line)
    assert history.schema_version == 3
    assert History.parse("x", "").dropped == {} and History.parse("x", "").schema_version == 1
    assert history.clone().render() == line  # kept through a copy and a rewrite
    with pytest.raises(CorruptLineError, match="schema"):
        History.parse("x", line.replace("3}", '"3"}'))
    with pytest.raises(UnknownFormatError, match="'schemas'"):
        History.parse("x", line.replace('"schema"', '"schemas"'))


def test_appended_lists_stay_appended(store: Store) -> None:
    """A mapped list channel is stored as what each step added, as a put stores it."""
    _paused_v1(store)
    saver = TelarSaver(store)
    schema = Schema(version=2, steps={2: [map_channel("log", lambda log: [item.upper() for item in log])]})
    new = upgrade_text("t", store.read("t"), schema, saver.codec.values)
    assert new is not None and '"PREPARED  HI "' in new
    graph = graph_v1(TelarSaver(store, schema=schema))
    graph.invoke(Command(resume="yes"), _config("t"))
    final = graph.get_state(_config("t")).values
    assert final["log"] == ["PREPARED  HI ", "answer yes", "done hi"]
    assert '"appended"' in store.read("t")


async def test_async_upgrade_on_read_and_write(store: Store) -> None:
    _paused_v1(store)
    graph = graph_v2(TelarSaver(store, schema=SCHEMA))
    state = await graph.aget_state(_config("t"))
    assert state.next == ("ask_user",)
    assert await graph.ainvoke(Command(resume="yes"), _config("t")) == _reference()
    assert History.parse("t", store.read("t")).schema_version == 2


def test_the_whole_feature_imports_from_one_module() -> None:
    """`Schema`, its steps and the offline tool, from `telar_checkpoint.schema` (the tool lives in
    `schema_upgrade`, the core in `state_schema`: the same objects)."""
    from telar_checkpoint import schema_upgrade, state_schema
    from telar_checkpoint.schema import Schema, aupgrade, rename_channel, status, upgrade

    assert (upgrade, aupgrade, status) == (schema_upgrade.upgrade, schema_upgrade.aupgrade, schema_upgrade.status)
    assert (Schema, rename_channel) == (state_schema.Schema, state_schema.rename_channel)
