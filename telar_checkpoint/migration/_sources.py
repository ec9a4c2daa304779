"""Reading LangGraph savers: `open_source(url)`, thread discovery, and one thread as records.

Values are read through the source's own `list`, so its own serializer decodes
them. `CheckpointTuple.pending_writes` carries no `idx` or `task_path`; for the
savers whose storage we know (SqliteSaver, PostgresSaver, InMemorySaver) they are
read from the writes table alongside, otherwise derived as `put_writes` numbers them.
"""

from __future__ import annotations

import contextlib
import importlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import WRITES_IDX_MAP, BaseCheckpointSaver, CheckpointTuple
from langgraph.checkpoint.memory import InMemorySaver

from telar_checkpoint._arguments import check
from telar_checkpoint._compat import writes_sort_key
from telar_checkpoint.codec import CheckpointRecord, WriteRecord
from telar_checkpoint.errors import NoStoreError, StoreError, UsageError
from telar_checkpoint.saver import TelarSaver
from telar_checkpoint.stores.foreign import (
    LANGGRAPH_POSTGRES_TABLES,
    LANGGRAPH_SQLITE_TABLES,
    not_langgraph,
    sqlite_tables,
)
from telar_checkpoint.stores.opening import open_store
from telar_checkpoint.stores.url import SCHEMES, local_path, scheme, shown

LANGGRAPH_PREFIX = "langgraph+"
# (task_id, channel, idx, task_path) of one stored write
WriteDetail = tuple[str, str, int, str]


# --- open_source ----------------------------------------------------------------


@contextlib.contextmanager
def open_source(url: str) -> Iterator[BaseCheckpointSaver]:
    """A saver to migrate from: LangGraph's SqliteSaver or PostgresSaver, or one of ours.

    ``langgraph+sqlite:///rel.db`` / ``langgraph+sqlite:////abs.db`` (an existing
    SqliteSaver file), ``langgraph+postgresql://...`` (a PostgresSaver database; add
    ``?options=-c%20search_path%3Dmyschema`` for a schema), or any store URL of ours
    (``file:///dir``, ``sqlite:///x.db``, ``postgresql://...``, ...).
    """
    check(open_source, {"url": url})
    kind = scheme(url)
    if kind in ("langgraph+sqlite",):
        with _sqlite_saver(url) as saver:
            yield saver
    elif kind in ("langgraph+postgresql", "langgraph+postgres"):
        with _postgres_saver(url) as saver:
            yield saver
    elif kind is None or kind in SCHEMES:
        store = open_store(url, create=False).store  # a source is read, never created
        try:
            yield TelarSaver(store)
        finally:
            store.close()
    else:
        raise UsageError(
            f"source URL {shown(url)!r}: unknown scheme {kind!r}; use langgraph+sqlite:///file.db "
            "(SqliteSaver), langgraph+postgresql://... (PostgresSaver) or a telar-checkpoint store URL "
            f"({', '.join(s + '://' for s in SCHEMES)})"
        )


@contextlib.contextmanager
def _sqlite_saver(url: str) -> Iterator[BaseCheckpointSaver]:
    saver_module = _import("langgraph.checkpoint.sqlite", "langgraph-checkpoint-sqlite", url)
    path = str(local_path(url))  # langgraph+sqlite:///rel.db is relative, ////abs.db absolute
    if not Path(path).is_file():
        raise NoStoreError(f"source URL {url!r}: no SqliteSaver database at {os.path.abspath(path or '.')!r}")
    tables = sqlite_tables(Path(path))  # SqliteSaver would create its tables in any database
    if not LANGGRAPH_SQLITE_TABLES <= tables:
        raise not_langgraph(f"SQLite database {path}", tables, postgres=False, our_url=f"sqlite:///{path}")
    with saver_module.SqliteSaver.from_conn_string(path) as saver:
        yield saver


@contextlib.contextmanager
def _postgres_saver(url: str) -> Iterator[BaseCheckpointSaver]:
    saver_module = _import("langgraph.checkpoint.postgres", "langgraph-checkpoint-postgres", url)
    conninfo = url[len(LANGGRAPH_PREFIX):]
    try:
        with saver_module.PostgresSaver.from_conn_string(conninfo) as saver:
            with saver._cursor() as cur:  # the tables are LangGraph's to create (setup), not ours
                cur.execute(
                    "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
                )
                tables = {str(_column(row, "table_name", 0)) for row in cur.fetchall()}
            if not LANGGRAPH_POSTGRES_TABLES <= tables:
                where = f"PostgreSQL database {shown(conninfo)}"
                raise not_langgraph(where, tables, postgres=True, our_url=shown(conninfo))
            yield saver
    except psycopg_errors() as exc:
        raise StoreError(f"source URL {shown(url)!r}: {exc}".rstrip()) from exc


def psycopg_errors() -> tuple[type[BaseException], ...]:
    """psycopg's base error, to name a failure of a PostgresSaver source as ours."""
    import psycopg

    return (psycopg.Error,)


def _import(module: str, package: str, url: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise UsageError(f"source URL {shown(url)!r} needs the {package} package; pip install {package}") from exc


# --- discovery --------------------------------------------------------------------


def _kind(source: BaseCheckpointSaver) -> str:
    """"telar", "memory", "sqlite", "postgres" or "other": which storage we know how to read directly."""
    if isinstance(source, TelarSaver):
        return "telar"
    if isinstance(source, InMemorySaver):
        return "memory"
    module = type(source).__module__
    if module.startswith("langgraph.checkpoint.sqlite") and hasattr(source, "cursor"):
        return "sqlite"
    if module.startswith("langgraph.checkpoint.postgres") and hasattr(source, "_cursor"):
        return "postgres"
    return "other"


def describe(source: BaseCheckpointSaver) -> str:
    """A short name for reports: the class, and the store kind of one of ours."""
    if isinstance(source, TelarSaver):
        return f"TelarSaver ({source.store.kind} store)"
    return type(source).__name__


def discover_threads(source: BaseCheckpointSaver) -> list[str]:
    """Every thread id the source holds, sorted. Falls back to `source.list(None)`."""
    kind = _kind(source)
    if kind == "telar":
        return source.store.thread_keys()  # type: ignore[attr-defined]
    if kind == "memory":
        return sorted(str(t) for t, spaces in source.storage.items() if any(spaces.values()))  # type: ignore[attr-defined]
    if kind in ("sqlite", "postgres"):
        with _cursor(source, kind) as cur:
            cur.execute("SELECT DISTINCT thread_id FROM checkpoints")
            return sorted(str(_column(row, "thread_id", 0)) for row in cur.fetchall())
    return sorted({str(t.config["configurable"]["thread_id"]) for t in source.list(None)})


def _cursor(source: Any, kind: str) -> Any:
    return source.cursor(transaction=False) if kind == "sqlite" else source._cursor()


def _column(row: Any, name: str, index: int) -> Any:
    return row[name] if isinstance(row, dict) else row[index]


# --- one thread as records ----------------------------------------------------------


def read_records(source: BaseCheckpointSaver, thread_id: str) -> list[CheckpointRecord]:
    """Every checkpoint of `thread_id`, every namespace, oldest first, pending writes included."""
    tuples = list(source.list({"configurable": {"thread_id": thread_id}}))
    details = _write_details(source, thread_id)
    records = [_record(t, details.get(_key(t))) for t in tuples]
    records.sort(key=lambda r: (r.id, r.checkpoint_ns))
    return records


def _key(t: CheckpointTuple) -> tuple[str, str]:
    configurable = t.config["configurable"]
    return configurable.get("checkpoint_ns") or "", configurable["checkpoint_id"]


def _record(t: CheckpointTuple, details: list[WriteDetail] | None) -> CheckpointRecord:
    ns, _ = _key(t)
    parent = (t.parent_config or {}).get("configurable", {}).get("checkpoint_id")
    writes = list(t.pending_writes or [])
    if details is None or [(d[0], d[1]) for d in details] != [(w[0], w[1]) for w in writes]:
        details = _derived_details(writes)
    records = [
        WriteRecord(task_id, channel, value, task_path=path, idx=idx)
        for (task_id, channel, value), (_, _, idx, path) in zip(writes, details)
    ]
    return CheckpointRecord(t.checkpoint, dict(t.metadata or {}), ns, parent, records)  # type: ignore[arg-type]


def _derived_details(writes: list[tuple[str, str, Any]]) -> list[WriteDetail]:
    """idx as `put_writes` assigns it (special channels fixed, others counted per task), no task_path."""
    counters: dict[str, int] = {}
    details = []
    for task_id, channel, _ in writes:
        if channel in WRITES_IDX_MAP:
            idx = WRITES_IDX_MAP[channel]
        else:
            idx = counters.get(task_id, 0)
            counters[task_id] = idx + 1
        details.append((task_id, channel, idx, ""))
    return details


def _write_details(source: BaseCheckpointSaver, thread_id: str) -> dict[tuple[str, str], list[WriteDetail]]:
    """Per (ns, checkpoint id): the stored writes' details in `writes_sort_key` order, as the saver lists them."""
    kind = _kind(source)
    rows: list[tuple[str, str, str, str, int, str]] = []  # (ns, cid, task_id, channel, idx, task_path)
    if kind == "memory":
        for (tid, ns, cid), stored in source.writes.items():  # type: ignore[attr-defined]
            if str(tid) == thread_id:
                rows.extend((ns, cid, task_id, w[1], idx, w[3]) for (task_id, idx), w in stored.items())
    elif kind in ("sqlite", "postgres"):
        table = "writes" if kind == "sqlite" else "checkpoint_writes"
        mark = "?" if kind == "sqlite" else "%s"
        try:
            rows = _query_writes(source, kind, table, "task_path", mark, thread_id)
        except Exception:  # a table written before task_path existed
            rows = _query_writes(source, kind, table, "''", mark, thread_id)
    else:
        return {}
    details: dict[tuple[str, str], list[WriteDetail]] = {}
    for ns, cid, task_id, channel, idx, path in sorted(rows, key=lambda r: writes_sort_key(r[5], r[2], r[4])):
        details.setdefault((ns or "", cid), []).append((task_id, channel, int(idx), path or ""))
    return details


def _query_writes(source: Any, kind: str, table: str, path: str, mark: str, thread_id: str) -> list[Any]:
    names = ("checkpoint_ns", "checkpoint_id", "task_id", "channel", "idx", "task_path")
    with _cursor(source, kind) as cur:
        cur.execute(
            f"SELECT checkpoint_ns, checkpoint_id, task_id, channel, idx, {path} AS task_path "
            f"FROM {table} WHERE thread_id = {mark}",
            (thread_id,),
        )
        return [tuple(_column(row, n, i) for i, n in enumerate(names)) for row in cur.fetchall()]
