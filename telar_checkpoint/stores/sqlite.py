"""`SQLiteStore`: one row per thread in a single SQLite database file.

The database runs in WAL mode, so readers never wait for a writer. Each
update is a ``BEGIN IMMEDIATE`` transaction (writers queue on SQLite's lock,
across threads and processes, for up to `timeout` seconds) that is rolled back
on any exception. Each thread (and each process, after a fork) gets its own
connection. Keys and values are stored as the exact UTF-8 bytes of the string
(``surrogatepass``), keys as BLOBs and values as TEXT, so any Python string
round-trips; a value that extends the stored one is appended in SQL
(``value || ?``) rather than sent whole. The tables carry a schema version of
their own in ``telar_meta``.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from telar_checkpoint.errors import StoreError, StoredDataError
from telar_checkpoint.stores.base import Change, Store

SCHEMA_VERSION = 1
"""The layout of our tables; a database recording a newer one is refused."""

_SETUP = (
    "CREATE TABLE IF NOT EXISTS telar_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS telar_histories (key BLOB PRIMARY KEY, value TEXT NOT NULL)",
    f"INSERT OR IGNORE INTO telar_meta (name, value) VALUES ('schema_version', '{SCHEMA_VERSION}')",
)
_VERSION = "SELECT value FROM telar_meta WHERE name = 'schema_version'"
_READ = "SELECT value FROM telar_histories WHERE key = ?"
_INSERT = "INSERT INTO telar_histories (key, value) VALUES (?, CAST(? AS TEXT))"
_REPLACE = "UPDATE telar_histories SET value = CAST(? AS TEXT) WHERE key = ?"
_APPEND = "UPDATE telar_histories SET value = value || CAST(? AS TEXT) WHERE key = ?"
_DELETE = "DELETE FROM telar_histories WHERE key = ?"
_KEYS = "SELECT key FROM telar_histories"


def _encode(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def _decode(raw: bytes, key: str) -> str:
    try:
        return raw.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError as exc:
        raise StoredDataError(f"the stored value is not UTF-8 text: {exc}", thread_id=key) from exc


class SQLiteStore(Store):
    """Histories as rows of ``telar_histories`` in the database file at `path`."""

    kind = "sqlite"

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        timeout: float = 30.0,
        fsync: bool = True,
        mode: int = 0o600,
        append_in_sql: bool = True,
    ) -> None:
        """`timeout`: seconds to wait for another writer; `fsync`: ``synchronous=FULL``
        (else ``NORMAL``); `mode`: permissions of a new database file;
        `append_in_sql`: extend values with ``value || ?`` (False rewrites them whole)."""
        self.path = Path(path)
        self.timeout = timeout
        self.fsync = fsync
        self.mode = mode
        self.append_in_sql = append_in_sql
        self._local = threading.local()
        self._lock = threading.Lock()
        self._connections: list[sqlite3.Connection] = []
        self._generation = 0  # bumped by close(), so threads drop their closed connections
        self._ready = False

    # Connections

    def _connection(self) -> sqlite3.Connection:
        owner = (self._generation, os.getpid())
        held = getattr(self._local, "held", None)
        if held is not None and held[0] == owner:
            return held[1]
        conn = self._connect()
        self._local.held = (owner, conn)
        with self._lock:
            self._connections.append(conn)
        return conn

    def _connect(self) -> sqlite3.Connection:
        if not self.path.exists():
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.close(os.open(self.path, os.O_CREAT | os.O_WRONLY, self.mode))
        conn = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None, check_same_thread=False)
        try:
            conn.text_factory = bytes
            if conn.execute("PRAGMA encoding").fetchone()[0] != b"UTF-8":
                raise StoreError(f"SQLite database {self.path} is not UTF-8 encoded; use a new file")
            if conn.execute("PRAGMA journal_mode").fetchone()[0] != b"wal":
                conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(f"PRAGMA synchronous = {'FULL' if self.fsync else 'NORMAL'}")
            if not self._ready:
                self._setup(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def _setup(self, conn: sqlite3.Connection) -> None:
        with self._transaction(conn):
            for statement in _SETUP:
                conn.execute(statement)
            version = int(conn.execute(_VERSION).fetchone()[0])
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"SQLite database {self.path} has store schema version {version}, newer than this "
                f"telar-checkpoint knows ({SCHEMA_VERSION}); upgrade telar-checkpoint"
            )
        self._ready = True

    def schema_version(self) -> int:
        """The schema version recorded in the database."""
        with self._errors():
            return int(self._connection().execute(_VERSION).fetchone()[0])

    @contextmanager
    def _transaction(self, conn: sqlite3.Connection) -> Iterator[None]:
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    @contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            raise StoreError(f"SQLite database {self.path}: {exc}") from exc
        except OSError as exc:
            raise StoreError(f"cannot open SQLite database {self.path}: {exc}") from exc

    def close(self) -> None:
        with self._lock:
            connections, self._connections = self._connections, []
            self._generation += 1
        for conn in connections:
            conn.close()

    # The Store interface

    def read(self, key: str) -> str | None:
        with self._errors():
            row = self._connection().execute(_READ, (_encode(key),)).fetchone()
        return None if row is None else _decode(row[0], key)

    def update(self, key: str, change: Change) -> str | None:
        raw_key = _encode(key)
        with self._errors():
            conn = self._connection()
            with self._transaction(conn):
                row = conn.execute(_READ, (raw_key,)).fetchone()
                old = None if row is None else _decode(row[0], key)
                new = change(old)
                if new is None:
                    if old is not None:
                        conn.execute(_DELETE, (raw_key,))
                elif old is None:
                    conn.execute(_INSERT, (raw_key, _encode(new)))
                elif self.append_in_sql and new.startswith(old):
                    if len(new) > len(old):
                        conn.execute(_APPEND, (_encode(new[len(old) :]), raw_key))
                elif new != old:
                    conn.execute(_REPLACE, (_encode(new), raw_key))
        return new

    def delete(self, key: str) -> None:
        with self._errors():
            conn = self._connection()
            with self._transaction(conn):
                conn.execute(_DELETE, (_encode(key),))

    def _raw_keys(self) -> list[bytes]:
        with self._errors():
            return [row[0] for row in self._connection().execute(_KEYS)]

    def keys(self) -> Iterator[str]:
        for raw in self._raw_keys():
            try:
                yield raw.decode("utf-8", "surrogatepass")
            except UnicodeDecodeError:
                continue

    def foreign(self) -> list[str]:
        """Rows whose key is not UTF-8 text (so not written by us), shown as hex."""
        found = []
        for raw in self._raw_keys():
            try:
                raw.decode("utf-8", "surrogatepass")
            except UnicodeDecodeError:
                found.append(f"telar_histories key x'{raw.hex()}'")
        return sorted(found)
