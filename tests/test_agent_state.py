"""Graph state as readable, exact JSON: an agent with messages, tool calls, a pydantic model and a
dataclass pauses, resumes in a new process, and ends in the state InMemorySaver gives."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import orjson
import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.types import Command

from telar_checkpoint import TelarSaver
from tests.agent_graph import Budget, Plan, build, question
from tests.graphs import normalize

ROOT = Path(__file__).parent.parent
CONFIG = {"configurable": {"thread_id": "agent"}}
SCRIPT = textwrap.dedent(
    """
    import sys
    from langgraph.types import Command
    from telar_checkpoint import TelarSaver
    from tests.agent_graph import Budget, Plan, build, question
    graph = build().compile(checkpointer=TelarSaver(sys.argv[1]))
    config = {"configurable": {"thread_id": "agent"}}
    graph.invoke(question("weather in Paris?") if sys.argv[2] == "start" else Command(resume="yes"), config)
    """
)


def run(directory: Path, step: str) -> None:
    # Strict mode: LangGraph derives the classes of the state schema and passes them to
    # `TelarSaver.with_allowlist`, so Plan and Budget load without being named by hand.
    env = {**os.environ, "LANGGRAPH_STRICT_MSGPACK": "true"}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(directory), step], cwd=ROOT, capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr


@pytest.fixture(autouse=True)
def strict_allowlist(monkeypatch) -> None:
    """In this process too, LangGraph passes the state schema's classes through with_allowlist."""
    from langgraph._internal import _serde

    monkeypatch.setattr(_serde, "STRICT_MSGPACK_ENABLED", True)


def reference_state() -> tuple:
    graph = build().compile(checkpointer=InMemorySaver())
    graph.invoke(question("weather in Paris?"), CONFIG)
    paused = graph.get_state(CONFIG)
    graph.invoke(Command(resume="yes"), CONFIG)
    return paused, graph.get_state(CONFIG)


def test_agent_pauses_and_resumes_in_a_new_process_with_the_reference_state(tmp_path) -> None:
    run(tmp_path, "start")
    graph = build().compile(checkpointer=TelarSaver(tmp_path))
    paused = graph.get_state(CONFIG)
    run(tmp_path, "resume")
    final = graph.get_state(CONFIG)
    ref_paused, ref_final = reference_state()
    for got, ref in ((paused, ref_paused), (final, ref_final)):
        assert got.next == ref.next
        assert normalize(got.values) == normalize(ref.values)
    values = final.values
    assert type(values["plan"]).__name__ == "Plan" and values["plan"].confidence == 0.8
    assert type(values["budget"]).__name__ == "Budget" and values["budget"].calls == ["agent", "approved:yes"]
    ai = values["messages"][1]
    assert ai.tool_calls[0]["args"]["city"] == "Paris" and ai.usage_metadata["total_tokens"] == 19
    assert values["messages"][-1].content == "It is sunny in Paris (approved:yes)."


def test_without_an_allowlist_the_state_classes_load_as_in_memory_saver_loads_them(tmp_path, monkeypatch) -> None:
    """Not strict (LangGraph's default): LangGraph passes no allowlist, and the state classes,
    whose module the program has imported, load anyway, with a warning, as InMemorySaver loads
    them; strict and without an allowlist, they load as plain data, never as an error."""
    from langgraph._internal import _serde

    from telar_checkpoint import JsonSerializer

    run(tmp_path, "start")
    monkeypatch.setattr(_serde, "STRICT_MSGPACK_ENABLED", False)
    graph = build().compile(checkpointer=TelarSaver(tmp_path, serde=JsonSerializer(strict=False)))
    values = graph.get_state(CONFIG).values
    assert type(values["plan"]) is Plan and type(values["budget"]) is Budget
    strict = TelarSaver(tmp_path, serde=JsonSerializer(strict=True))
    plain = build().compile(checkpointer=strict).get_state(CONFIG).values
    assert plain["plan"] == values["plan"].model_dump(exclude_unset=True) and type(plain["plan"]) is dict


def test_a_stored_line_is_readable_json_with_message_text_visible(tmp_path) -> None:
    run(tmp_path, "start")
    text = (tmp_path / "agent.jsonl").read_text(encoding="utf-8")
    assert "The weather in Paris is sunny, 24 degrees" in text
    lines = [orjson.loads(line) for line in text.splitlines()]
    contents = [
        item["$model"]["fields"].get("content")
        for line in lines
        if line["kind"] == "checkpoint"
        for items in [*line["values"].values(), *line.get("appended", {}).values()]
        if isinstance(items, list)
        for item in items
        if isinstance(item, dict) and "$model" in item
    ]
    assert "weather in Paris?" in contents and "The weather in Paris is sunny, 24 degrees" in contents
    plan = next(line["values"]["plan"] for line in lines if line["kind"] == "checkpoint" and "plan" in line["values"])
    assert plan["$model"]["fields"]["goal"] == "weather in Paris?"


@pytest.mark.parametrize(
    "serde",
    [JsonPlusSerializer(), EncryptedSerializer.from_pycryptodome_aes(key=b"0123456789abcdef")],
    ids=["jsonplus", "encrypted"],
)
def test_other_serializers_work_through_tagged_base64(store, serde) -> None:
    graph = build().compile(checkpointer=TelarSaver(store, serde=serde))
    graph.invoke(question("weather in Paris?"), CONFIG)
    graph.invoke(Command(resume="yes"), CONFIG)
    stored = store.read("agent")
    assert '"$serde"' in stored
    assert "sunny" not in stored if isinstance(serde, EncryptedSerializer) else True
    _, ref_final = reference_state()
    assert normalize(graph.get_state(CONFIG).values) == normalize(ref_final.values)
