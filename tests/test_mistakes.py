"""The natural mistakes (a LangGraph database given as ours and the reverse, a plain path that is a file,
an empty database, a thread that is not there, a bad output path, an unreachable server): each gets one
line naming what is there and the likely fix, a documented exit code, and changes nothing.
Each case runs through the library and through the CLI."""

from __future__ import annotations

import contextlib
import re
import sqlite3
import uuid
from pathlib import Path

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver

from telar_checkpoint import MemoryStore, TelarSaver, migrate
from telar_checkpoint.cli import main
from telar_checkpoint.errors import ForeignStoreError, NoStoreError, StoreError
from telar_checkpoint.migration import open_source
from telar_checkpoint.stores.opening import open_store
from telar_checkpoint.stores.sqlite import SQLiteStore
from tests.graphs import multi_step
from tests.stores import POSTGRES_URL, postgres_admin

PROG = "telar-checkpoint: error: "
LOOKS_LANGGRAPH = "this looks like a LangGraph SqliteSaver database: did you mean langgraph+sqlite:///"


def config(thread: str) -> dict:
    return {"configurable": {"thread_id": thread}}


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def tables(path: Path) -> set[str]:
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


@pytest.fixture
def langgraph_db(tmp_path) -> Path:
    """A LangGraph SqliteSaver database holding one thread."""
    path = tmp_path / "lg.sqlite"
    with SqliteSaver.from_conn_string(str(path)) as saver:
        multi_step().compile(checkpointer=saver).invoke({"log": [], "count": 0}, config("t"))
    return path


@pytest.fixture
def our_db(tmp_path) -> Path:
    path = tmp_path / "ours.db"
    store = SQLiteStore(path)
    multi_step().compile(checkpointer=TelarSaver(store)).invoke({"log": [], "count": 0}, config("t"))
    store.close()
    return path


# --- a LangGraph database given as ours, and the reverse ----------------------------------------------


def test_langgraph_database_as_a_store_is_named_and_left_alone(capsys, langgraph_db, tmp_path) -> None:
    before = tables(langgraph_db)
    url = f"sqlite:///{langgraph_db}"
    with pytest.raises(ForeignStoreError, match=re.escape(LOOKS_LANGGRAPH)):
        open_store(url, create=False)
    with pytest.raises(ForeignStoreError, match=re.escape(LOOKS_LANGGRAPH)):
        with open_source(url):
            pass
    for argv in (["threads", url], ["verify", url], ["history", url, "t"],
                 ["migrate", "--from", url, "--to", str(tmp_path / "out")]):
        code, out, err = run(capsys, *argv)
        assert (code, out) == (2, ""), argv
        assert err == (f"{PROG}SQLite database {langgraph_db} holds no telar-checkpoint store: "
                       f"{LOOKS_LANGGRAPH}{langgraph_db}? (only `migrate --from` reads those)\n")
    assert tables(langgraph_db) == before == {"checkpoints", "writes"}
    assert not (tmp_path / "out").exists()  # the target is not created for a source that fails


def test_our_database_as_a_langgraph_source_is_named_and_left_alone(capsys, our_db, tmp_path) -> None:
    before = tables(our_db)
    url = f"langgraph+sqlite:///{our_db}"
    hint = f"this looks like a telar-checkpoint store; did you mean sqlite:///{our_db}?"
    with pytest.raises(ForeignStoreError, match=hint.replace("?", r"\?")):
        with open_source(url):
            pass
    code, out, err = run(capsys, "migrate", "--from", url, "--to", str(tmp_path / "out"))
    assert (code, out) == (2, "")
    assert err == f"{PROG}SQLite database {our_db} holds no LangGraph SqliteSaver tables: {hint}\n"
    assert tables(our_db) == before and "checkpoints" not in before


def test_a_file_that_is_not_a_database(capsys, tmp_path) -> None:
    junk = tmp_path / "notes.txt"
    junk.write_text("hello\n")
    with pytest.raises(NoStoreError, match="is not a SQLite database"):
        with open_source(f"langgraph+sqlite:///{junk}"):
            pass
    code, _, err = run(capsys, "migrate", "--from", f"langgraph+sqlite:///{junk}", "--to", str(tmp_path / "o"))
    assert (code, err) == (2, f"{PROG}{junk} is not a SQLite database\n")
    code, _, err = run(capsys, "threads", f"sqlite:///{junk}")
    assert (code, err) == (2, f"{PROG}{junk} is not a SQLite database\n")
    assert junk.read_text() == "hello\n"


# --- plain paths --------------------------------------------------------------------------------------


def test_a_plain_path_must_be_a_directory_of_ours(capsys, tmp_path, langgraph_db, our_db) -> None:
    junk = tmp_path / "notes.txt"
    junk.write_text("hello\n")
    other = tmp_path / "other"
    other.mkdir()
    (other / "a.txt").write_text("x")
    cases = {
        str(langgraph_db): f"{langgraph_db} is a file, not a directory of ours: {LOOKS_LANGGRAPH}{langgraph_db}? "
                           "(only `migrate --from` reads those)",
        str(our_db): f"{our_db} is a SQLite database of ours, not a directory: did you mean sqlite:///{our_db}?",
        str(junk): f"{junk} is a file, not a directory of ours; a store is a directory (file:///dir), "
                   "sqlite:///file.db, postgresql://... or redis://...",
        str(other): f"{other} holds no telar-checkpoint threads, only other files (a.txt); is it the right directory?",
    }
    for path, message in cases.items():
        with pytest.raises(NoStoreError) as caught:
            open_store(path, create=False)
        assert str(caught.value) == message
        with pytest.raises(NoStoreError):
            open_store(path)  # nor is one written to
        code, out, err = run(capsys, "threads", path)
        assert (code, out, err) == (2, "", PROG + message + "\n")
    code, _, err = run(capsys, "migrate", "--from", str(our_db), "--to", str(tmp_path / "new"))
    assert code == 2 and "did you mean sqlite:///" in err
    assert sorted(p.name for p in other.iterdir()) == ["a.txt"] and junk.read_text() == "hello\n"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert run(capsys, "threads", str(empty))[:2] == (0, "0 threads, 0 bytes\n")  # an empty directory is fine


# --- an empty Postgres database, an unreachable server -----------------------------------------------------


@pytest.mark.servers("postgres")
def test_an_empty_postgres_schema_is_not_given_tables(capsys) -> None:
    schema = f"telar_test_{uuid.uuid4().hex[:12]}"
    postgres_admin(f'CREATE SCHEMA "{schema}"')
    try:
        url = f"{POSTGRES_URL}?options=-c%20search_path%3D{schema}"
        with pytest.raises(NoStoreError, match="holds no telar-checkpoint store"):
            open_store(url, create=False)
        for argv in (["threads", url], ["verify", url]):
            code, out, err = run(capsys, *argv)
            assert (code, out) == (2, ""), argv
            assert err.startswith(f"{PROG}PostgreSQL database at ") and err.endswith(
                "holds no telar-checkpoint store (no tables); nothing to read\n")
        with pytest.raises(NoStoreError, match="holds no LangGraph PostgresSaver tables"):
            with open_source(f"langgraph+{url}"):
                pass
        code, _, err = run(capsys, "migrate", "--from", f"langgraph+{url}", "--to", "memory://")
        assert code == 2 and "holds no LangGraph PostgresSaver tables (checkpoints, ...); nothing to migrate" in err
        created = postgres_admin("SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,))
        assert created == []
    finally:
        postgres_admin(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.mark.parametrize("url", ["postgresql://postgres@127.0.0.1:1/test", "redis://127.0.0.1:1/0"])
def test_an_unreachable_server_exits_5(capsys, url) -> None:
    pytest.importorskip("psycopg" if url.startswith("postgresql") else "redis")
    with pytest.raises(StoreError, match="127.0.0.1:1"):
        store = open_store(url, create=False).store
        try:
            list(store.keys())
        finally:
            store.close()
    code, out, err = run(capsys, "threads", url)
    assert (code, out) == (5, "") and err.startswith(PROG) and err.count("\n") == 1 and "127.0.0.1:1" in err
    code, _, err = run(capsys, "migrate", "--from", "langgraph+" + url, "--to", "memory://") if "postgres" in url \
        else (5, "", "")
    assert code == 5 and err.count("\n") <= 1


# --- migrate: a thread not found, an empty source ----------------------------------------------------------


def test_a_thread_asked_for_and_not_found_is_a_failure(capsys, our_db, tmp_path) -> None:
    source = TelarSaver(SQLiteStore(our_db))
    report = migrate(source, TelarSaver(MemoryStore()), thread_ids=["nope"])
    assert not report.ok and report.failed == {"nope": "not in the source"}
    code, out, _ = run(capsys, "migrate", "--from", f"sqlite:///{our_db}", "--to", str(tmp_path / "o"), "--thread", "nope")
    assert code == 1 and "FAILED 1 thread, nothing written for them ('nope': not in the source)." in out
    assert "Nothing failed" not in out


def test_an_empty_source_says_so(capsys, tmp_path) -> None:
    report = migrate(InMemorySaver(), TelarSaver(MemoryStore()))
    assert report.source_empty and report.format() == (
        "Nothing to migrate: InMemorySaver holds no threads (is it the right source?).")
    empty = tmp_path / "empty"
    empty.mkdir()
    code, out, _ = run(capsys, "migrate", "--from", str(empty), "--to", str(tmp_path / "o"))
    assert (code, out) == (3, "Nothing to migrate: TelarSaver (file store) holds no threads (is it the right source?).\n")


# --- errors that were tracebacks ----------------------------------------------------------------------------


def test_export_to_a_missing_directory(capsys, our_db) -> None:
    code, out, err = run(capsys, "export", f"sqlite:///{our_db}", "t", "-o", "/nonexistent/dir/x.jsonl")
    assert (code, out, err) == (2, "", f"{PROG}cannot write /nonexistent/dir/x.jsonl: No such file or directory\n")


@pytest.mark.servers("postgres")
def test_a_postgres_store_of_ours_is_read_without_setup(capsys) -> None:
    from telar_checkpoint.stores.postgres import PostgresStore

    schema = f"telar_test_{uuid.uuid4().hex[:12]}"
    postgres_admin(f'CREATE SCHEMA "{schema}"')
    try:
        url = f"{POSTGRES_URL}?options=-c%20search_path%3D{schema}"
        store = PostgresStore(url)
        multi_step().compile(checkpointer=TelarSaver(store)).invoke({"log": [], "count": 0}, config("t"))
        store.close()
        reader = PostgresStore(url, create=False)
        assert list(reader.keys()) == ["t"] and reader.schema_version() >= 1
        reader.close()
        code, out, _ = run(capsys, "threads", url)
        assert code == 0 and out.splitlines()[1].split()[:3] == ["t", "5", "3"]
        assert run(capsys, "verify", url)[0] == 0
    finally:
        postgres_admin(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.mark.servers("postgres")
def test_a_langgraph_postgres_database_as_a_store_is_named(capsys) -> None:
    from langgraph.checkpoint.postgres import PostgresSaver

    schema = f"telar_test_{uuid.uuid4().hex[:12]}"
    postgres_admin(f'CREATE SCHEMA "{schema}"')
    try:
        url = f"{POSTGRES_URL}?options=-c%20search_path%3D{schema}"
        with PostgresSaver.from_conn_string(url) as saver:
            saver.setup()
            multi_step().compile(checkpointer=saver).invoke({"log": [], "count": 0}, config("t"))
        before = postgres_admin("SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,))
        code, out, err = run(capsys, "threads", url)
        assert (code, out) == (2, "")
        assert err.endswith(f"holds no telar-checkpoint store: this looks like a LangGraph PostgresSaver database: "
                            f"did you mean langgraph+{url}? (only `migrate --from` reads those)\n")
        after = postgres_admin("SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,))
        assert sorted(after) == sorted(before)
        code, out, _ = run(capsys, "migrate", "--from", f"langgraph+{url}", "--to", "memory://")
        assert code == 0 and out.startswith("Migrated 1 thread (")
    finally:
        postgres_admin(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.mark.parametrize("kind", ["postgres", "redis", "sqlite under a file"])
def test_a_migration_target_that_cannot_be_opened_is_one_error_not_a_failed_thread_each(capsys, our_db, tmp_path, kind) -> None:
    """Found: `migrate --to` an unreachable server (or a SQLite path under a file) reported
    "Migrated 0 threads ... FAILED 1 thread" with the driver's message for each thread, exit 1."""
    if kind == "sqlite under a file":
        a_file = tmp_path / "notes.txt"
        a_file.write_text("hello\n")
        target, where = f"sqlite:///{a_file}/x.db", str(a_file)
    else:
        pytest.importorskip("psycopg" if kind == "postgres" else "redis")
        target, where = ("postgresql://postgres@127.0.0.1:1/test" if kind == "postgres" else "redis://127.0.0.1:1/0"), "127.0.0.1:1"
    for dry_run in ([], ["--dry-run"]):
        code, out, err = run(capsys, "migrate", "--from", f"sqlite:///{our_db}", "--to", target, *dry_run)
        assert (code, out) == (5, ""), dry_run
        assert err.startswith(PROG) and err.count("\n") == 1 and where in err
    if kind == "sqlite under a file":
        assert a_file.read_text() == "hello\n"


# --- found by the audit of this issue ------------------------------------------------------------------


def test_a_langgraph_database_as_a_migration_target_is_refused(capsys, langgraph_db, our_db) -> None:
    """Found: `migrate --to sqlite:///<a SqliteSaver database>` wrote our tables into it, exit 0."""
    before = tables(langgraph_db)
    with pytest.raises(ForeignStoreError, match=r"holds LangGraph SqliteSaver checkpoints \(1 thread\)") as caught:
        open_store(f"sqlite:///{langgraph_db}").store.setup()  # the store's own refusal (tests/test_foreign_data.py)
    code, out, err = run(capsys, "migrate", "--from", f"sqlite:///{our_db}", "--to", f"sqlite:///{langgraph_db}")
    assert (code, out) == (2, "")
    assert err == f"{PROG}{caught.value}\n"
    assert tables(langgraph_db) == before


@pytest.mark.parametrize("target", ["sqlite", "directory"])
def test_a_dry_run_creates_no_target(capsys, our_db, tmp_path, target) -> None:
    """Found: `migrate --dry-run` created the target database (or directory) it reported on."""
    where = tmp_path / "new" / ("x.db" if target == "sqlite" else "dir")
    url = f"sqlite:///{where}" if target == "sqlite" else str(where)
    code, out, _ = run(capsys, "migrate", "--from", f"sqlite:///{our_db}", "--to", url, "--dry-run")
    assert code == 0 and "1 thread" in out
    assert not (tmp_path / "new").exists()


def test_a_sqlite_database_under_a_file_is_named_as_such(tmp_path) -> None:
    """Found: the message was "[Errno 17] File exists: ..."."""
    (tmp_path / "afile").write_text("x")
    with pytest.raises(StoreError, match="a part of its path is a file, not a directory"):
        SQLiteStore(tmp_path / "afile" / "db.sqlite").read("t")


@pytest.mark.servers("postgres")
def test_our_postgres_store_as_a_langgraph_source_is_named(capsys) -> None:
    from telar_checkpoint.stores.postgres import PostgresStore

    schema = f"telar_test_{uuid.uuid4().hex[:12]}"
    try:
        store = PostgresStore(POSTGRES_URL, schema=schema)
        multi_step().compile(checkpointer=TelarSaver(store)).invoke({"log": [], "count": 0}, config("t"))
        store.close()
        url = f"{POSTGRES_URL}?options=-c%20search_path%3D{schema}"
        before = postgres_admin("SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,))
        code, out, err = run(capsys, "migrate", "--from", f"langgraph+{url}", "--to", "memory://")
        assert (code, out) == (2, "")
        assert "this looks like a telar-checkpoint store; did you mean" in err and err.count("\n") == 1
        after = postgres_admin("SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,))
        assert sorted(after) == sorted(before)
    finally:
        postgres_admin(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.mark.servers("postgres")
def test_alist_inside_from_conn_string_in_one_loop_after_another_never_hangs() -> None:
    """The issue's second script, on Postgres: 20 loops, each bounded."""
    import asyncio

    schema = f"telar_test_{uuid.uuid4().hex[:12]}"

    async def listing() -> int:
        async with TelarSaver.from_conn_string(POSTGRES_URL, schema=schema) as saver:
            await saver.aput({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, empty_checkpoint(), {}, {})
            return len([t async for t in saver.alist(None, limit=3)])

    try:
        for loop in range(20):
            assert asyncio.run(asyncio.wait_for(listing(), 20)) == min(loop + 1, 3)  # one put a loop
    finally:
        postgres_admin(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def test_a_thread_id_that_starts_as_a_stores_own_keys_is_refused() -> None:
    """A store without expiries of its own keeps them under `stores.base.RESERVED` keys: no thread
    may be stored there."""
    from langgraph.checkpoint.base import empty_checkpoint

    from telar_checkpoint import MemoryStore, TelarSaver, UsageError
    from telar_checkpoint.stores.base import RESERVED

    saver = TelarSaver(MemoryStore())
    config = {"configurable": {"thread_id": RESERVED + "expiry:t", "checkpoint_ns": ""}}
    with pytest.raises(UsageError, match="may not start with"):
        saver.put(config, empty_checkpoint(), {"source": "input", "step": -1, "parents": {}}, {})
    assert list(saver.store.keys()) == []
