"""LangGraph's own conformance suite, run against TelarSaver on every store."""

from __future__ import annotations

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.report import ProgressCallbacks

from telar_checkpoint import MemoryStore, TelarSaver
from telar_checkpoint.stores import FileStore


async def test_conformance_full(tmp_path) -> None:
    counter = iter(range(1000))

    @checkpointer_test(name="TelarSaver[file]")
    async def factory():
        yield TelarSaver(FileStore(tmp_path / f"s{next(counter)}"))

    report = await validate(factory, progress=ProgressCallbacks.verbose())
    report.print_report()
    failures = {cap: r.failures for cap, r in report.results.items() if not r.passed}
    assert not failures, failures
    assert report.conformance_level() == "FULL"
