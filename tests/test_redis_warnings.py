"""A RedisStore made from a URL warns of nothing in a user's program: its asyncio clients get the
asyncio Retry (redis-py>=8 warns when an asyncio client is given the sync one). A `retry` of the
caller's still goes to the clients as given."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff

from telar_checkpoint.stores import Store
from tests.stores import make_store

KINDS = ["redis", "redis-cluster"]


@pytest.mark.parametrize("kind", KINDS)
async def test_async_reads_and_writes_warn_of_nothing(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    store = make_store(kind, tmp_path, request)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        await store.awrite("thread", "one\n")
        assert await store.aread("thread") == "one\n"
        await store.aclose()
    assert [f"{w.category.__name__}: {w.message}" for w in caught] == []


@pytest.mark.parametrize("kind", KINDS)
async def test_a_retry_of_the_callers_reaches_the_async_client(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    store: Store = make_store(kind, tmp_path, request)
    retry = AsyncRetry(NoBackoff(), 3)
    store = type(store)(store.url, prefix=store.prefix, connect_timeout=2, retry=retry)  # type: ignore[attr-defined,call-arg]
    request.addfinalizer(store.close)
    await store.awrite("thread", "one\n")
    client = store._own._async.current().client  # type: ignore[attr-defined]
    given = client.retry if kind == "redis-cluster" else client.get_retry()
    assert given.get_retries() == 3
    await store.aclose()
