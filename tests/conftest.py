"""Shared fixtures, by section."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from telar_checkpoint.stores import Store
from tests.stores import STORE_KINDS, make_store

# --- Stores: every kind, each test in a space of its own (see tests/stores.py) ---


@pytest.fixture(params=STORE_KINDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    """A fresh store of each kind; the test id names the kind."""
    return make_store(request.param, tmp_path, request)


@pytest.fixture(params=STORE_KINDS)
async def astore(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    """`store` for async tests: closed in the test's own event loop (async pools live there)."""
    store = make_store(request.param, tmp_path, request)
    yield store
    await store.aclose()
