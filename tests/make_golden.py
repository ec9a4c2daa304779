"""Writes tests/golden/*.jsonl from real graph runs. Run only when the format gains a version:
golden files pin the format, so an existing file is never regenerated."""

from __future__ import annotations

import sys
from pathlib import Path

from telar_checkpoint import MemoryStore, TelarSaver
from telar_checkpoint.history import History
from tests.graphs import multi_step, nested_subgraphs, with_interrupt


def _twice() -> object:
    """A graph whose log list grows over two runs: its lines hold "appended"."""
    return multi_step()

GOLDEN = Path(__file__).parent / "golden"


def main() -> None:
    graphs = (("v1.jsonl", with_interrupt), ("v2.jsonl", lambda: nested_subgraphs(1)), ("v1-appended.jsonl", _twice))
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


if __name__ == "__main__":
    main()
