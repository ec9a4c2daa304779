"""A pytest plugin that runs LangGraph's own test suite with TelarSaver on the file store.

Loaded with `-p telar_lgsuite_plugin` (this folder on PYTHONPATH) from the root of a
checkout of LangGraph's `libs/langgraph`; it edits none of their files. Their
`tests/conftest.py` builds the `sync_checkpointer` and `async_checkpointer` fixtures from
a list of named variants; this plugin narrows both lists to one variant, "memory", shown
under the id `telar_file` (`memory` for the reference and audit runs), and, for TelarSaver, points
the name `_checkpointer_memory` that their fixtures call at a factory of ours: a TelarSaver
on a `FileStore` in a fresh temporary directory per test.

Environment:
- `TELAR_LGSUITE_SAVER`: `telar` (default), `memory` (their InMemorySaver, the reference),
  `telar_shadow` (TelarSaver whose dropped checkpoints are served from an InMemorySaver, to
  check that a by-design failure differs in nothing else; see telar_lgsuite_shadow.py),
  `telar_keep` (TelarSaver with `keep_finished_subgraphs=True`, which keeps a finished
  subgraph call's checkpoints while the checkpoint it ran under is kept) or
  `audit` (an InMemorySaver that notes reads of checkpoints off the live path, see
  telar_lgsuite_audit.py; `TELAR_LGSUITE_AUDIT=path` gets the notes as JSON).
- `TELAR_LGSUITE_ALL_TESTS=1`: keep the tests that use no checkpointer fixture too
  (by default they are deselected: they do not exercise a saver).
- `TELAR_LGSUITE_RESULTS=path`: write each test's outcome there as JSON
  (`{node id: "passed" | "failed" | "error" | "skipped" | "xfailed" | "xpassed"}`),
  which `compare.py` checks against `by_design.txt`.
"""

from __future__ import annotations

import inspect
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from telar_lgsuite_audit import AuditSaver, current_test, findings
from telar_lgsuite_shadow import ShadowedTelarSaver

from telar_checkpoint import FileStore, TelarSaver

_CHECKPOINTER_FIXTURES = ("sync_checkpointer", "async_checkpointer")
_THEIR_VARIANT = "memory"  # the variant of theirs whose factory we replace
_SAVER = os.environ.get("TELAR_LGSUITE_SAVER", "telar")
_VARIANT_IDS = {"telar": "telar_file", "memory": "memory", "telar_shadow": "telar_file",
                "telar_keep": "telar_file", "audit": "memory"}  # audit: an InMemorySaver, whose tests compare snapshots named [memory]
if _SAVER not in _VARIANT_IDS:
    raise pytest.UsageError(f"TELAR_LGSUITE_SAVER={_SAVER!r}: use one of {', '.join(_VARIANT_IDS)}")
_VARIANT_ID = _VARIANT_IDS[_SAVER]


@contextmanager
def _telar_file_checkpointer(saver_class: type[TelarSaver] = TelarSaver, **options: Any) -> Iterator[TelarSaver]:
    """A TelarSaver on the file store, in a temporary directory removed after the test."""
    directory = tempfile.mkdtemp(prefix="telar-lgsuite-")
    try:
        with saver_class(FileStore(directory), **options) as saver:
            yield saver
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _shadowed_checkpointer() -> AbstractContextManager[TelarSaver]:
    return _telar_file_checkpointer(ShadowedTelarSaver)


def _keeping_checkpointer() -> AbstractContextManager[TelarSaver]:
    return _telar_file_checkpointer(keep_finished_subgraphs=True)


@contextmanager
def _audit_checkpointer() -> Iterator[BaseCheckpointSaver]:
    yield AuditSaver()


_FACTORIES = {"telar": _telar_file_checkpointer, "telar_shadow": _shadowed_checkpointer,
              "telar_keep": _keeping_checkpointer, "audit": _audit_checkpointer}


def _narrow(fixturedef: pytest.FixtureDef) -> None:
    """Make one of their checkpointer fixtures yield only our chosen saver."""
    fixturedef.params = [_THEIR_VARIANT]
    fixturedef.ids = [_VARIANT_ID]
    if _SAVER in _FACTORIES:
        function = inspect.unwrap(fixturedef.func)
        if "_checkpointer_memory" not in function.__globals__:
            raise pytest.UsageError(
                f"{function.__module__}.{function.__name__} no longer calls _checkpointer_memory: "
                "update telar_lgsuite_plugin for this LangGraph version"
            )
        function.__globals__["_checkpointer_memory"] = _FACTORIES[_SAVER]


@pytest.hookimpl(tryfirst=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Narrow the checkpointer fixtures before pytest parametrizes them by their params."""
    for name in _CHECKPOINTER_FIXTURES:
        for fixturedef in metafunc._arg2fixturedefs.get(name, ()):
            if list(fixturedef.params or ()) != [_THEIR_VARIANT] or fixturedef.ids != [_VARIANT_ID]:
                _narrow(fixturedef)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep only the tests that take a checkpointer fixture, unless all tests were asked for."""
    if os.environ.get("TELAR_LGSUITE_ALL_TESTS") == "1":
        return
    kept, dropped = [], []
    for item in items:
        uses_saver = any(name in getattr(item, "fixturenames", ()) for name in _CHECKPOINTER_FIXTURES)
        (kept if uses_saver else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def pytest_report_header(config: pytest.Config) -> str:
    return f"telar_lgsuite_plugin: checkpointer fixtures yield the {_SAVER!r} saver, under the id [{_VARIANT_ID}]"


_phases: dict[str, dict[str, pytest.TestReport]] = {}


def pytest_runtest_setup(item: pytest.Item) -> None:
    if _SAVER == "audit":
        current_test[0] = item.nodeid


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _phases.setdefault(report.nodeid, {})[report.when] = report


def _outcome(phases: dict[str, pytest.TestReport]) -> str:
    """One word for a test from its setup, call and teardown reports, as pytest's summary counts it."""
    call = phases.get("call")
    if call is not None and hasattr(call, "wasxfail"):
        return "xfailed" if call.skipped else "xpassed"
    if call is not None and call.failed:
        return "failed"
    if any(report.failed for report in phases.values()):
        return "error"
    if any(report.skipped for report in phases.values()):
        return "skipped"
    return "passed"


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = os.environ.get("TELAR_LGSUITE_RESULTS")
    if path:
        outcomes = {nodeid: _outcome(phases) for nodeid, phases in _phases.items()}
        with open(path, "w", encoding="utf-8") as results:
            json.dump(outcomes, results, indent=1, sort_keys=True)
    audit_path = os.environ.get("TELAR_LGSUITE_AUDIT")
    if _SAVER == "audit" and audit_path:
        with open(audit_path, "w", encoding="utf-8") as notes:
            json.dump({nodeid: sorted(kinds) for nodeid, kinds in findings.items()}, notes, indent=1, sort_keys=True)
