"""What another tool's data looks like, so a mistaken URL is named, not filled with our tables.

LangGraph's own savers keep their checkpoints in tables of known names; a
database holding those and none of ours was almost certainly meant for
``langgraph+sqlite://`` or ``langgraph+postgresql://`` (a migration source).
`sqlite_tables` reads a file's table names without changing it.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterable
from pathlib import Path

from telar_checkpoint.errors import ForeignStoreError, NoStoreError

SQLITE_HEADER = b"SQLite format 3\x00"

# The tables each tool creates (all present means: that tool's database).
LANGGRAPH_SQLITE_TABLES = frozenset({"checkpoints", "writes"})
LANGGRAPH_POSTGRES_TABLES = frozenset({"checkpoints", "checkpoint_writes", "checkpoint_blobs"})
OUR_SQLITE_TABLES = frozenset({"telar_meta"})


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
