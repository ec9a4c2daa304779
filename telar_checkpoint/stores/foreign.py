"""What another tool's data looks like, so a mistaken URL is named, not filled with our tables.

LangGraph's own savers keep their checkpoints in tables of known names; a
database holding those and none of ours was almost certainly meant for
``langgraph+sqlite://`` or ``langgraph+postgresql://`` (a migration source).
`sqlite_tables` reads a file's table names without changing it.

A store opened to write (the library's, and the CLI's targets) refuses a database that holds a
LangGraph saver's checkpoints and none of ours, before it writes anything: `langgraph_sqlite`,
and the checks of `PostgresStore` and `RedisStore` with the names here, find them, and
`refusal` says what is there, how to migrate it, and that ``share_database=True`` opens it anyway.
"""

from __future__ import annotations

import re
import shlex
import sqlite3
from collections.abc import Iterable
from pathlib import Path

from telar_checkpoint.errors import ForeignStoreError, NoStoreError

SQLITE_HEADER = b"SQLite format 3\x00"

# The tables each tool creates (all present means: that tool's database).
LANGGRAPH_SQLITE_TABLES = frozenset({"checkpoints", "writes"})
LANGGRAPH_POSTGRES_TABLES = frozenset({"checkpoints", "checkpoint_writes", "checkpoint_blobs"})
OUR_SQLITE_TABLES = frozenset({"telar_meta"})
# The keys of langgraph-checkpoint-redis's RedisSaver (and AsyncRedisSaver, the shallow ones): each
# is prefix + thread id + ":" + ...; ``checkpoint_blob:`` up to its release 0.5.0.
LANGGRAPH_REDIS_PREFIXES = (b"checkpoint:", b"checkpoint_write:", b"checkpoint_blob:", b"checkpoint_latest:", b"write_keys_zset:")
LANGGRAPH_REDIS_MATCH = b"checkpoint*"  # what SCAN is asked for (write_keys_zset: keys come with these)

THREADS_COUNTED = 10_000
"""At most this many of another tool's threads are counted for a message (then: "at least 10,000")."""

SHARE_OPTION = "share_database"
"""The option that opens a store beside another tool's data on purpose (also ``?share_database=true``)."""


def masked(url: str) -> str:
    """`url` for a message: a password in it is masked."""
    return re.sub(r"//([^/@:]*):[^/@]*@", r"//\1:***@", url)


def is_sqlite_file(path: Path) -> bool:
    """True when `path` is a file that starts as a SQLite database does."""
    try:
        with open(path, "rb") as f:
            return f.read(len(SQLITE_HEADER)) == SQLITE_HEADER
    except OSError:
        return False


def sqlite_tables(path: Path) -> set[str]:
    """The table names of the SQLite database at `path`, read without writing (not even a journal)."""
    if not is_sqlite_file(path):
        raise NoStoreError(f"{path} is not a SQLite database")
    uri = f"{path.resolve().as_uri()}?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True)
        try:
            return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise NoStoreError(f"{path} is not a readable SQLite database: {exc}") from exc


def sqlite_tool(tables: Iterable[str]) -> str | None:
    """Which tool's SQLite database holds `tables`: "telar-checkpoint", "LangGraph SqliteSaver" or None."""
    names = set(tables)
    if OUR_SQLITE_TABLES <= names or "telar_histories" in names:
        return "telar-checkpoint"
    if LANGGRAPH_SQLITE_TABLES <= names:
        return "LangGraph SqliteSaver"
    return None


def not_ours(where: str, tables: Iterable[str], *, postgres: bool, langgraph_url: str) -> NoStoreError:
    """The error for a database at `where` without our tables: another tool's (naming the likely
    fix, `langgraph_url`) or simply none of ours."""
    names = set(tables)
    langgraph = LANGGRAPH_POSTGRES_TABLES if postgres else LANGGRAPH_SQLITE_TABLES
    if langgraph <= names:
        saver = "PostgresSaver" if postgres else "SqliteSaver"
        return ForeignStoreError(
            f"{where} holds no telar-checkpoint store: this looks like a LangGraph {saver} database: "
            f"did you mean {langgraph_url}? (only `migrate --from` reads those)"
        )
    if names:
        shown = ", ".join(sorted(names)[:5]) + (", ..." if len(names) > 5 else "")
        return ForeignStoreError(f"{where} holds no telar-checkpoint store, only other tables ({shown})")
    return NoStoreError(f"{where} holds no telar-checkpoint store (no tables); nothing to read")


def not_langgraph(where: str, tables: Iterable[str], *, postgres: bool, our_url: str) -> NoStoreError:
    """The error for a migration source without LangGraph's tables: ours (naming `our_url`) or none."""
    names = set(tables)
    saver = "PostgresSaver" if postgres else "SqliteSaver"
    if any(n.startswith("telar") and n.endswith(("_meta", "_histories")) for n in names):
        return ForeignStoreError(
            f"{where} holds no LangGraph {saver} tables: this looks like a telar-checkpoint store; "
            f"did you mean {our_url}?"
        )
    return NoStoreError(f"{where} holds no LangGraph {saver} tables (checkpoints, ...); nothing to migrate")


def threads_phrase(count: int, complete: bool = True) -> str:
    """``"1 thread"``, ``"3 threads"``, ``"at least 10,000 threads"``."""
    return f"{'' if complete else 'at least '}{count:,} thread{'' if count == 1 else 's'}"


def with_share_option(url: str) -> str:
    """`url` with ``share_database=true`` in its query."""
    return f"{url}{'&' if '?' in url else '?'}{SHARE_OPTION}=true"


def refusal(where: str, saver: str, threads: int, complete: bool, *, source: str | None, target: str) -> ForeignStoreError:
    """The error of a store that found `saver`'s checkpoints at `where` and none of ours, before
    writing anything: how many threads, the command that migrates them (``migrate --from
    source --to target``; `source` None: migrate cannot read that saver), and the option that
    opens the store beside them on purpose."""
    counted = threads_phrase(threads, complete)
    found = f"{where} holds LangGraph {saver} checkpoints ({counted}) and no telar-checkpoint store; nothing was written"
    if source is not None:
        command = shlex.join(["telar-checkpoint", "migrate", "--from", source, "--to", with_share_option(target)])
        move = (
            f"To move them into telar-checkpoint, beside LangGraph's data (left as it is), run: {command} "
            "(then the URL opens without the option)"
        )
    else:
        move = (
            f"To move them, call telar_checkpoint.migrate(source, TelarSaver({target!r}, {SHARE_OPTION}=True)) "
            f"from Python with the {saver} as the source (the migrate command has no source URL for it)"
        )
    return ForeignStoreError(
        f"{found}. {move}. To keep telar-checkpoint's data in this same place on purpose, "
        f"pass {SHARE_OPTION}=True (TelarSaver(url, {SHARE_OPTION}=True), or ?{SHARE_OPTION}=true in the URL)"
    )


def langgraph_sqlite(conn: sqlite3.Connection, path: str | Path) -> ForeignStoreError | None:
    """The refusal for the SQLite database `conn` is open on, when it holds a LangGraph
    SqliteSaver's tables and none of ours; None otherwise. Reads two small queries, writes nothing."""
    names = {
        row[0].decode() if isinstance(row[0], bytes) else row[0]
        for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN ('telar_meta', 'telar_histories', 'checkpoints', 'writes')"
        )
    }
    if sqlite_tool(names) != "LangGraph SqliteSaver":
        return None
    (threads,) = conn.execute(
        "SELECT count(*) FROM (SELECT DISTINCT thread_id FROM checkpoints LIMIT ?)", (THREADS_COUNTED + 1,)
    ).fetchone()
    return refusal(
        f"SQLite database {path}", "SqliteSaver", min(threads, THREADS_COUNTED), threads <= THREADS_COUNTED,
        source=f"langgraph+sqlite:///{path}", target=f"sqlite:///{path}",
    )


def redis_thread(raw_key: bytes) -> bytes | None:
    """The thread id in a key that langgraph-checkpoint-redis writes, or None for another key."""
    if not raw_key.startswith(LANGGRAPH_REDIS_PREFIXES):
        return None
    parts = raw_key.split(b":", 2)
    return parts[1] if len(parts) == 3 else None
