"""Writes tests/golden/*.jsonl from real graph runs. Run only when the format gains a version:
golden files pin the format, so an existing file is never regenerated."""

from __future__ import annotations

import operator
import sys
from pathlib import Path
from typing import Annotated, TypedDict

import orjson
from langgraph.graph import START, StateGraph
from langgraph.types import interrupt

from telar_checkpoint import CheckpointCodec, MemoryStore, TelarSaver
from telar_checkpoint.history import History
from tests.graphs import multi_step, nested_subgraphs, resume, with_interrupt


def _twice() -> object:
    """A graph whose log list grows over two runs: its lines hold "appended"."""
    return multi_step()


class Profiled(TypedDict):
    profile: dict
    log: Annotated[list[str], operator.add]


def _profiled(*, persistent: bool) -> StateGraph:
    """A parent graph whose subgraph asks (interrupt): its log grows ("appended") and its profile, a
    dict set once, is stored by reference ("$same"), in the root namespace and in the subgraph's.
    `persistent`: the subgraph is compiled with `checkpointer=True`, so its lines stay between runs."""

    def ask(s: Profiled) -> dict:
        return {"log": [f"answered {interrupt('approve?')}"]}

    inner = StateGraph(Profiled)
    inner.add_node("inner_start", lambda s: {"log": ["inner start"]})
    inner.add_node("inner_ask", ask)
    inner.add_edge(START, "inner_start")
    inner.add_edge("inner_start", "inner_ask")
    parent = StateGraph(Profiled)
    parent.add_node("start", lambda s: {"log": ["parent start"]})
    parent.add_node("child", inner.compile(checkpointer=True) if persistent else inner.compile())
    parent.add_node("end", lambda s: {"log": ["parent end"]})
    parent.add_edge(START, "start")
    parent.add_edge("start", "child")
    parent.add_edge("child", "end")
    return parent


def _write_runs(path: Path, *, persistent: bool, pause_last: bool) -> None:
    """Three runs of `_profiled`, each answered but the last when `pause_last`, then the first
    deleted (delete_for_runs): checkpoint lines with "appended" and "$same", and dropped lines
    with "deleted" (in the persistent subgraph's namespace too, when `persistent`)."""
    store = MemoryStore()
    saver = TelarSaver(store)
    graph = _profiled(persistent=persistent).compile(checkpointer=saver)

    def config(run: str) -> dict:
        return {"configurable": {"thread_id": "g"}, "metadata": {"run_id": run}}

    graph.invoke({"profile": {"name": "golden", "tags": ["a", "b"]}, "log": []}, config("run-1"))
    graph.invoke(resume("yes"), config("run-1"))
    graph.invoke({"log": ["again"]}, config("run-2"))
    graph.invoke(resume("later"), config("run-2"))
    graph.invoke({"log": ["third"]}, config("run-3"))
    if not pause_last:
        graph.invoke(resume("last"), config("run-3"))
    saver.delete_for_runs(["run-1"])
    path.write_text(History.parse("g", store.read("g")).render(), encoding="utf-8")


GOLDEN = Path(__file__).parent / "golden"


def read_records(text: str) -> dict:
    """What a golden file reads as, in plain JSON: its records (values encoded by the default
    JsonSerializer) and each namespace's dropped ids. `<name>.records.json` pins it."""
    codec = CheckpointCodec()
    records = [
        codec.values.encode(
            {
                "ns": r.checkpoint_ns,
                "parent": r.parent_id,
                "metadata": r.metadata,
                "checkpoint": r.checkpoint,
                "writes": [[w.task_id, w.task_path, w.idx, w.channel, w.value] for w in r.writes],
            }
        )
        for r in codec.decode_history("g", text)
    ]
    dropped = {
        ns: {"floor": d.floor, "replaced": d.replaced, "deleted": d.deleted}
        for ns, d in sorted(History.parse("g", text).dropped.items())
    }
    return {"records": records, "dropped": dropped}


def write_records(path: Path) -> None:
    """`<name>.records.json` for golden file `path`: written once, from the reader of its time."""
    pinned = path.with_name(path.name.removesuffix(".jsonl") + ".records.json")
    if not pinned.exists():
        pinned.write_bytes(orjson.dumps(read_records(path.read_text(encoding="utf-8")), option=orjson.OPT_INDENT_2) + b"\n")
        print(f"wrote {pinned}")


def main() -> None:
    graphs = (
        ("v1-interrupt.jsonl", with_interrupt), ("v2-nested.jsonl", lambda: nested_subgraphs(1)),
        ("v1-appended.jsonl", _twice),
    )
    for name, build in graphs:
        path = GOLDEN / name
        if path.exists():
            print(f"{path} exists; golden files are never regenerated", file=sys.stderr)
            continue
        store = MemoryStore()
        graph = build().compile(checkpointer=TelarSaver(store))
        graph.invoke({"request": "golden", "log": []}, {"configurable": {"thread_id": "g"}})
        if build is _twice:
            graph.invoke({"request": "again", "log": ["more"]}, {"configurable": {"thread_id": "g"}})
        path.write_text(History.parse("g", store.read("g")).render(), encoding="utf-8")
        print(f"wrote {path}")
    # v1: every run answered, so no subgraph line is kept; v2: a persistent subgraph, the last run
    # paused inside it. (v3.jsonl holds what development builds wrote, once, as version 3.)
    for name, persistent, pause_last in (("v1.jsonl", False, False), ("v2.jsonl", True, True)):
        path = GOLDEN / name
        if path.exists():
            print(f"{path} exists; golden files are never regenerated", file=sys.stderr)
        else:
            _write_runs(path, persistent=persistent, pause_last=pause_last)
            print(f"wrote {path}")
    for path in sorted(GOLDEN.glob("*.jsonl")):
        write_records(path)


if __name__ == "__main__":
    main()
