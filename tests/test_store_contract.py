"""The store contract (`telar_checkpoint.testing.StoreTests`) on each of our store kinds.

Each class builds its store with `tests.stores.make_store` (a space of its own, cleaned up
after); the shared ones reopen it with `describe`/`reopen`. Store-specific tests are in
tests/test_stores.py.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import pytest

from telar_checkpoint.stores import Store
from telar_checkpoint.testing import StoreTests
from tests.stores import describe, make_store, reopen


class OurStore(StoreTests):
    kind = "memory"

    @pytest.fixture
    def store(self, request: pytest.FixtureRequest, tmp_path: Path) -> Store:
        return make_store(self.kind, tmp_path, request)

    def opener(self, store: Store) -> Callable[[], Store]:
        return functools.partial(reopen, describe(store))


class TestMemoryStore(OurStore):
    kind = "memory"


class TestFileStore(OurStore):
    kind = "file"
    shared = True


class TestSQLiteStore(OurStore):
    kind = "sqlite"
    shared = True
    forked_child_writes = False  # its copy of SQLite holds the parent's lock for ever


class TestPostgresStore(OurStore):
    kind = "postgres"
    shared = True


class TestRedisStore(OurStore):
    kind = "redis"
    shared = True


class TestRedisClusterStore(OurStore):
    kind = "redis-cluster"
    shared = True
