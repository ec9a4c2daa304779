"""`setup()` and `asetup()` (issue 51): what a user of LangGraph's PostgresSaver, AsyncPostgresSaver or
SqliteSaver calls first. On each store kind they make now what the first write would make, twice
as well as once, and a graph then runs on the saver; a server that cannot be reached fails them."""

from __future__ import annotations

import asyncio
import operator
from pathlib import Path
from typing import Annotated, TypedDict

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph

from telar_checkpoint import TelarSaver
from telar_checkpoint.errors import SaverClosedError, StoreError
from telar_checkpoint.stores import FileStore, Store
from telar_checkpoint.stores.file_index import INDEX_DIR, INDEX_FILE
from telar_checkpoint.stores.foreign import sqlite_tables
from telar_checkpoint.stores.sqlite import SQLiteStore
from tests.stores import postgres_admin, redis_admin, redis_cluster_admin

SQL_TABLES = {"telar_meta", "telar_threads", "telar_chunks", "telar_terms", "telar_expiry", "telar_leases"}
SQLITE_TABLES = {"telar_meta", "telar_chunks", "telar_terms", "telar_expiry", "telar_leases"}
CONFIG: RunnableConfig = {"configurable": {"thread_id": "chat"}}


class Said(TypedDict):
    said: Annotated[list[str], operator.add]


def _graph() -> StateGraph:
    def answer(state: Said) -> dict[str, list[str]]:
        return {"said": [f"heard {len(state['said'])}"]}

    builder = StateGraph(Said)
    builder.add_node("answer", answer)
    builder.add_edge(START, "answer")
    builder.add_edge("answer", END)
    return builder


def _tables(path: Path) -> set[str]:
    return sqlite_tables(path) if path.exists() else set()


def _made(store: Store) -> bool | None:
    """Whether what `setup` makes of `store` is there, looked at outside the store: the tables,
    the file store's index database, the Redis schema key (None: the memory store makes nothing)."""
    if isinstance(store, FileStore):
        return SQLITE_TABLES <= _tables(store.directory / INDEX_DIR / INDEX_FILE)
    if isinstance(store, SQLiteStore):
        return SQLITE_TABLES <= _tables(store.path)
    if store.kind == "postgres":
        rows = postgres_admin(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
            (store.schema,),  # type: ignore[attr-defined]
        )
        return SQL_TABLES <= {row[0] for row in rows}
    if store.kind in ("redis", "redis-cluster"):
        admin = redis_cluster_admin() if store.kind == "redis-cluster" else redis_admin()
        try:
            return bool(admin.exists(f"{store.prefix}schema"))  # type: ignore[attr-defined]
        finally:
            admin.close()
    return None


def test_setup_makes_the_store_before_any_write_then_a_graph_runs(store: Store) -> None:
    saver = TelarSaver(store)
    nothing = None if store.kind == "memory" else False
    assert _made(store) is nothing, "the store was set up before setup()"
    saver.setup()
    saver.setup()
    assert _made(store) is (None if store.kind == "memory" else True)
    assert list(store.keys()) == [], "setup writes no thread"
    graph = _graph().compile(checkpointer=saver)
    assert graph.invoke({"said": ["hi"]}, CONFIG) == {"said": ["hi", "heard 1"]}
    assert graph.invoke({"said": ["again"]}, CONFIG) == {"said": ["hi", "heard 1", "again", "heard 3"]}
    saver.setup()
    assert graph.get_state(CONFIG).values == {"said": ["hi", "heard 1", "again", "heard 3"]}, "setup keeps what is stored"


async def test_asetup_makes_the_store_before_any_write_then_a_graph_runs(astore: Store) -> None:
    saver = TelarSaver(astore)
    nothing = None if astore.kind == "memory" else False
    assert await asyncio.to_thread(_made, astore) is nothing, "the store was set up before asetup()"
    await saver.asetup()
    await saver.asetup()
    assert await asyncio.to_thread(_made, astore) is (None if astore.kind == "memory" else True)
    assert await astore.akeys() == [], "asetup writes no thread"
    graph = _graph().compile(checkpointer=saver)
    assert await graph.ainvoke({"said": ["hi"]}, CONFIG) == {"said": ["hi", "heard 1"]}
    await saver.asetup()
    assert (await graph.aget_state(CONFIG)).values == {"said": ["hi", "heard 1"]}, "asetup keeps what is stored"


@pytest.mark.parametrize(
    "url, server",
    [
        ("postgresql://postgres@127.0.0.1:1/test?connect_timeout=2", "PostgreSQL server at 127.0.0.1:1"),
        ("redis://127.0.0.1:1/0", "Redis server at 127.0.0.1:1"),
    ],
    ids=["postgres", "redis"],
)
def test_setup_on_a_server_that_does_not_answer_fails_at_once_naming_it(url: str, server: str) -> None:
    saver = TelarSaver(url)  # connects to nothing yet
    try:
        with pytest.raises(StoreError, match=server):
            saver.setup()
        with pytest.raises(StoreError, match=server):
            asyncio.run(saver.asetup())
    finally:
        saver.store.close()


def test_a_closed_saver_refuses_setup_and_creates_nothing(tmp_path: Path) -> None:
    path = tmp_path / "checkpoints.db"
    with TelarSaver(f"sqlite:///{path}") as saver:
        pass
    with pytest.raises(SaverClosedError, match="this TelarSaver was closed"):
        saver.setup()
    with pytest.raises(SaverClosedError, match="this TelarSaver was closed"):
        asyncio.run(saver.asetup())
    assert not path.exists()
