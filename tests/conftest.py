"""Shared fixtures, by section."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import settings

from telar_checkpoint.stores import Store
from tests.graphs import Api
from tests.stores import SHARED_KINDS, STORE_KINDS, make_store

# --- Hypothesis: CI replays the same examples every run (a red CI must be reproducible);
# explore new ones locally, or with TELAR_FUZZ_EXAMPLES for a longer run. ---

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI") == "true":
    settings.load_profile("ci")


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
