"""tests/ui_threads.py: each thread made for the viewer's tests has the shape it claims, read back
from a file store by a saver opened afresh (so from disk, not from the writer's caches)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.types import StateSnapshot

from telar_checkpoint import TelarSaver
from tests.graphs import fan_out, multi_step, nested_subgraphs
from tests.ui_threads import (
    HOSTILE_ID,
    HOSTILE_METADATA,
    HOSTILE_NODE,
    IMG,
    QUESTION,
    SCRIPT,
    THREAD_IDS,
    big_checkpoints,
    chat_agent,
    config_of,
    deep_dict,
    hostile_graph,
    make_big_thread,
    make_ui_threads,
    put_chain,
    store_puts,
)


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """The threads, made once for the module; each test reads them with a saver of its own."""
    directory = tmp_path_factory.mktemp("ui-threads")
    writer = TelarSaver(str(directory))
    try:
        ids = make_ui_threads(writer)
    finally:
        writer.store.close()
    return directory, ids


@pytest.fixture
def saver(made: tuple[Path, dict[str, str]]) -> Iterator[TelarSaver]:
    reader = TelarSaver(str(made[0]))
    yield reader
    reader.store.close()


def namespaces(saver: TelarSaver, thread_id: str) -> Counter[str]:
    return Counter(t.config["configurable"]["checkpoint_ns"] for t in saver.list(config_of(thread_id)))


def test_make_ui_threads_names_every_thread_it_stored(made: tuple[Path, dict[str, str]], saver: TelarSaver) -> None:
    assert made[1] == THREAD_IDS
    stored = {t.config["configurable"]["thread_id"] for t in saver.list(None)}
    assert stored == set(THREAD_IDS.values())


def test_chat_has_two_turns_of_tool_calls_and_is_paused_at_the_question(saver: TelarSaver) -> None:
    config = config_of(THREAD_IDS["chat"])
    state = chat_agent(saver).get_state(config)
    messages = state.values["messages"]
    kinds = [type(m) for m in messages]
    assert kinds == [HumanMessage, AIMessage, ToolMessage, AIMessage, HumanMessage, AIMessage]
    calls = [m.tool_calls for m in messages if isinstance(m, AIMessage)]
    assert [[(c["name"], c["args"]) for c in cs] for cs in calls] == [
        [("get_weather", {"city": "Paris"})],
        [],
        [("send_report", {"to": "bob@example.com"})],
    ]
    tool_result = messages[2]
    assert tool_result.tool_call_id == calls[0][0]["id"] and "sunny in Paris" in tool_result.content
    assert messages[3].content == f"Done: {tool_result.content}"
    # paused in the tools node, at the question the send_report tool asked
    assert state.next == ("tools",)
    assert [i.value for i in state.interrupts] == [QUESTION]
    assert [(t.name, [i.value for i in t.interrupts]) for t in state.tasks] == [("tools", [QUESTION])]
    stored = saver.get_tuple(config)
    assert stored is not None
    assert [(channel, [i.value for i in value]) for _, channel, value in stored.pending_writes or [] if channel == "__interrupt__"] == [
        ("__interrupt__", [QUESTION])
    ]
    assert namespaces(saver, THREAD_IDS["chat"]).keys() == {""}


def test_subgraph_is_paused_two_subgraphs_down_under_the_roots_latest_step(saver: TelarSaver) -> None:
    config = config_of(THREAD_IDS["subgraph"])
    state = nested_subgraphs(2).compile(checkpointer=saver).get_state(config, subgraphs=True)
    assert state.next == ("child",)
    middle = state.tasks[0].state
    assert isinstance(middle, StateSnapshot) and middle.next == ("inner",)
    inner = middle.tasks[0].state
    assert isinstance(inner, StateSnapshot) and inner.next == ("inner_ask",)
    assert [i.value for i in inner.tasks[0].interrupts] == [{"question": "approve the report?"}]
    assert [i.value for i in state.interrupts] == [{"question": "approve the report?"}]
    # stored: the root, the middle call and the inner call, each call nested under the root's head
    counts = namespaces(saver, THREAD_IDS["subgraph"])
    child = next(ns for ns in counts if ns.startswith("child:") and "|" not in ns)
    grandchild = next(ns for ns in counts if ns.startswith(f"{child}|inner:"))
    assert set(counts) == {"", child, grandchild} and all(counts.values())
    root = saver.get_tuple(config)
    assert root is not None
    root_id = root.config["configurable"]["checkpoint_id"]
    for ns in (child, grandchild):
        for t in saver.list(config_of(THREAD_IDS["subgraph"], checkpoint_ns=ns)):
            assert t.metadata["parents"][""] == root_id
    child_head = saver.get_tuple(config_of(THREAD_IDS["subgraph"], checkpoint_ns=child))
    assert child_head is not None
    grandchild_head = saver.get_tuple(config_of(THREAD_IDS["subgraph"], checkpoint_ns=grandchild))
    assert grandchild_head is not None and grandchild_head.metadata["parents"] == {
        "": root_id,
        child: child_head.config["configurable"]["checkpoint_id"],
    }


def test_fanout_keeps_the_failed_tasks_error_beside_the_others_results(saver: TelarSaver) -> None:
    config = config_of(THREAD_IDS["fanout"])
    stored = saver.get_tuple(config)
    assert stored is not None
    writes = [(channel, value) for _, channel, value in stored.pending_writes or []]
    errors = [value for channel, value in writes if channel == "__error__"]
    assert [str(e) for e in errors] == ["RuntimeError('task 3 fails')"]  # LangGraph writes the error as its repr
    assert sorted(value for channel, value in writes if channel == "results") == [[10], [20], [40]]
    state = fan_out({}, []).compile(checkpointer=saver).get_state(config)
    assert state.next == ("work",)
    assert len(state.tasks) == 4 and {t.name for t in state.tasks} == {"work"}
    failed = [t for t in state.tasks if t.error is not None]
    assert len(failed) == 1 and "task 3 fails" in repr(failed[0].error)


def test_forked_holds_two_forks_of_one_checkpoint(saver: TelarSaver) -> None:
    config = config_of(THREAD_IDS["forked"])
    listed = list(saver.list(config))
    by_id = {t.config["configurable"]["checkpoint_id"]: t for t in listed}
    children = Counter(t.parent_config["configurable"]["checkpoint_id"] for t in listed if t.parent_config)
    shared = [parent for parent, n in children.items() if n > 1]
    assert len(shared) == 1 and children[shared[0]] == 2
    fork_point = by_id[shared[0]]
    assert fork_point.checkpoint["channel_values"]["log"] == ["a"]
    forks = [t for t in listed if t.parent_config and t.parent_config["configurable"]["checkpoint_id"] == shared[0]]
    assert [t.metadata["source"] for t in forks] == ["update", "update"]
    assert sorted(t.checkpoint["channel_values"]["log"] for t in forks) == [["a", "edited"], ["a", "edited again"]]
    # the first fork was run on to the end; the head is the second, about to run b
    graph = multi_step().compile(checkpointer=saver)
    assert [s.values["log"] for s in graph.get_state_history(config) if not s.next] == [["a", "edited", "b", "c"]]
    head = graph.get_state(config)
    assert head.values["log"] == ["a", "edited again"] and head.next == ("b",)


def depth_of(value: Any) -> int:
    return 1 + max(map(depth_of, value.values())) if isinstance(value, dict) and value else 0


def test_hostile_thread_keeps_its_markup_and_its_huge_and_deep_values(made: tuple[Path, dict[str, str]], saver: TelarSaver) -> None:
    assert THREAD_IDS["hostile"] == HOSTILE_ID and SCRIPT in HOSTILE_ID and IMG in HOSTILE_ID
    config = config_of(HOSTILE_ID)
    stored = saver.get_tuple(config)
    assert stored is not None and stored.config["configurable"]["thread_id"] == HOSTILE_ID
    metadata: dict[str, Any] = dict(stored.metadata)
    assert all(metadata[k] == v for k, v in HOSTILE_METADATA.items())
    state = hostile_graph().compile(checkpointer=saver).get_state(config)
    assert [(type(m), m.content) for m in state.values["messages"]] == [(HumanMessage, SCRIPT), (AIMessage, IMG)]
    huge = state.values["huge"]
    assert len(huge) == 1_000_000 and huge.startswith(SCRIPT) and set(huge) == set(SCRIPT)
    assert state.values["deep"] == deep_dict() and depth_of(state.values["deep"]) == 101  # 100 levels, then the markup
    ran = [s for s in hostile_graph().compile(checkpointer=saver).get_state_history(config) if s.next]
    assert [s.next for s in ran] == [(HOSTILE_NODE,), ("__start__",)]
    text = saver.store.read(HOSTILE_ID)
    assert text is not None and len(text) > 1_000_000
    assert '"<b>k</b>":"<img src=x onerror=alert(1)>"' in text  # raw markup in the stored JSON
    files = [p.name for p in made[0].iterdir() if p.suffix == ".jsonl"]
    assert "%3Cscript%3E" in "".join(files)  # the id's file name is percent-encoded


def test_store_puts_stores_the_very_history_the_puts_would(tmp_path: Path) -> None:
    saver = TelarSaver(str(tmp_path))
    puts = big_checkpoints(50)
    put_chain(saver, "direct", puts)
    store_puts(saver, "staged", puts)
    direct = saver.store.read("direct")
    assert direct is not None and direct.count("\n") == 50
    assert saver.store.read("staged") == direct
    with pytest.raises(ValueError, match="already stored"):
        store_puts(saver, "staged", puts)


def test_big_thread_has_every_checkpoint_parent_chained(tmp_path: Path) -> None:
    started = time.perf_counter()
    make_big_thread(TelarSaver(str(tmp_path)), "big")
    took = time.perf_counter() - started
    saver = TelarSaver(str(tmp_path))
    listed = list(saver.list(config_of("big")))
    assert len(listed) == 10_000
    assert [t.metadata["step"] for t in listed] == list(range(9_998, -2, -1))
    ids = [t.config["configurable"]["checkpoint_id"] for t in listed]
    assert [t.parent_config and t.parent_config["configurable"]["checkpoint_id"] for t in listed[:-1]] == ids[1:]
    assert listed[-1].parent_config is None
    head = saver.get_tuple(config_of("big"))
    assert head is not None and head.checkpoint["channel_values"] == {"count": 9_999}
    print(f"make_big_thread(10_000): {took:.2f} s")


def test_big_thread_refuses_a_saver_that_would_trim_it(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="max_history"):
        make_big_thread(TelarSaver(str(tmp_path), max_history=100), "big", checkpoints=101)
    assert TelarSaver(str(tmp_path)).get_tuple(config_of("big")) is None
