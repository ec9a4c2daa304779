"""LangGraph's own conformance suite, run against TelarSaver on every store."""

from __future__ import annotations

from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.report import ProgressCallbacks

from telar_checkpoint import TelarSaver


async def test_conformance_full(store, request) -> None:
    @checkpointer_test(name=f"TelarSaver[{request.node.callspec.id}]")
    async def factory():
        yield TelarSaver(store)

    report = await validate(factory, progress=ProgressCallbacks.verbose())
    report.print_report()
    failures = {cap: r.failures for cap, r in report.results.items() if not r.passed}
    assert not failures, failures
    assert report.conformance_level() == "FULL"
    assert sum(1 for r in report.results.values() if r.passed) == 8
