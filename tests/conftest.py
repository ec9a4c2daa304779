"""Shared fixtures, by section."""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from telar_checkpoint.stores import Store
from tests import servers

# The browser tests' fixtures, defined here once: a session fixture imported into two test modules
# would be two fixtures, and two Playwright instances in one process (tests/browser.py).
from tests.browser import browser, page  # noqa: F401
from tests.graphs import Api
from tests.stores import SHARED_KINDS, STORE_KINDS, make_store


def pytest_configure(config: pytest.Config) -> None:
    """The test servers' plugin: each test declares those it uses, skips without them, and fails
    if it reaches another; the run starts its own Redis Cluster (tests/servers.py)."""
    config.pluginmanager.register(servers, "telar-test-servers")

# --- Hypothesis: CI replays the same examples every run (a red CI must be reproducible);
# explore new ones locally, or with TELAR_FUZZ_EXAMPLES for a longer run. ---

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI") == "true":
    settings.load_profile("ci")


# --- Parallel runs (pytest-xdist: `-n auto --dist worksteal` in pyproject.toml) ---
# Each test works in a space of its own (a uuid-named schema, key prefix or tmp_path; a server it
# starts takes a free port), so tests can run in any worker, and beside other test runs on the same
# servers. The few that need one fixed resource take turns: a test that uses a fixture named here
# holds that resource's lock, across the workers and the runs of this machine, from before the
# fixture is set up to after it is torn down. (Not xdist_group: pytest 9.2 drops it silently,
# pytest-xdist#1386.)
SHARED_RESOURCE_FIXTURES = {
    # tests/test_foreign_data.py: Redis database 9, which it checks empty, fills and flushes.
    "langgraph_redis": "redis-database-9",
}
LOCKS = Path(tempfile.gettempdir()) / "telar-checkpoint-test-locks"


@pytest.fixture(autouse=True)
def _shared_resource(request: pytest.FixtureRequest) -> Iterator[None]:
    """Autouse, so set up before (and torn down after) the fixtures the test names."""
    names = sorted({SHARED_RESOURCE_FIXTURES[f] for f in request.fixturenames if f in SHARED_RESOURCE_FIXTURES})
    with contextlib.ExitStack() as held:
        for name in names:  # in one order, so two tests never wait on each other
            LOCKS.mkdir(exist_ok=True)
            lock = held.enter_context(open(LOCKS / f"{name}.lock", "a"))
            fcntl.flock(lock, fcntl.LOCK_EX)  # let go when the file is closed
        yield


# --- Stores: every kind, each test in a space of its own (see tests/stores.py) ---


@pytest.fixture(params=STORE_KINDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    """A fresh store of each kind; the test id names the kind."""
    return make_store(request.param, tmp_path, request)


@pytest.fixture(params=SHARED_KINDS)
def shared_store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    """A fresh store of each kind that other processes can open too (see `tests.stores.reopen`)."""
    return make_store(request.param, tmp_path, request)


@pytest.fixture(params=STORE_KINDS)
async def astore(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """`store` for async tests: closed in the test's own event loop (async pools live there)."""
    store = make_store(request.param, tmp_path, request)
    yield store
    await store.aclose()


# --- Graph APIs: each scenario runs once through the sync and once through the async API ---


@pytest.fixture(params=["sync", "async"])
def api(request: pytest.FixtureRequest) -> Api:
    return Api(request.param)
