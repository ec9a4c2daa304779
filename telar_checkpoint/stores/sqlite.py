"""`SQLiteStore`: each thread's value as ordered chunks in a single SQLite database file.

The database runs in WAL mode, so readers never wait for a writer. Each
update is a ``BEGIN IMMEDIATE`` transaction (writers queue on SQLite's lock,
across threads and processes, for up to `timeout` seconds) that is rolled back
on any exception. Connections are lent to one operation at a time (a process
after a fork opens its own). Commits run with ``synchronous=NORMAL`` and the
store then fsyncs the WAL file itself, once for every commit made before it
began (group commit, see `stores.group_commit`), so a write is durable when it
returns. (A lone append that commits with ``synchronous=FULL`` instead, syncing
the WAL in its commit, measured within noise: benchmarks/results/ab.md,
"lone-durable-append".) The store's commits and their counting take turns under
one lock, so a sync that covers the WAL covers every commit counted before it.
Keys and values are stored as the exact UTF-8 bytes of the string
(``surrogatepass``), keys as BLOBs and values as TEXT, so any Python string
round-trips.

A value is the concatenation, in ``seq`` order, of its rows in
``telar_chunks``; ``seq`` is an AUTOINCREMENT key, so it is never reused, and
the largest ``seq`` of a key is its version. Appending inserts one row (the
stored history is never rewritten for an append); any other change replaces
the key's rows by one, and an update that extends a value of many chunks
compacts them into one. The tables carry a schema version of their own in
``telar_meta``; a database of schema 1 (one row per thread) or 2 (no index) is
migrated when first opened.

The index (see `Store.index`) is ``telar_terms``, a row per term and key, in
the same database: a term recorded commits before the write it describes, and
the WAL is synced in commit order, so a durable write never has its terms lost.
Deleting a key deletes its terms in the same transaction. ``telar_meta`` holds
``index = ready`` once the index covers every value (at once for a new
database; after the saver's rebuild for one that schema 2 wrote).

Expiries (see `Store.expire_at`) are ``telar_expiry``, a row per key read in the order of
its index on ``(expires_at, key)``, and leases ``telar_leases``, a row per lease
with its holder and end, taken by one upsert; both commit as index changes do. They
are not in the schema version: they are made when the store is set up, or, opened
without `create` on a database older code wrote, on its first expiry or lease.
Deleting a key deletes its expiry in the same transaction.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Collection, Hashable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from telar_checkpoint import forks
from telar_checkpoint._arguments import check
from telar_checkpoint.errors import NoStoreError, StoreError
from telar_checkpoint.stores.base import Change, Store
from telar_checkpoint.stores.common import check_schema, decode_key, decode_value, decoded_keys, driver_error, encode, extension
from telar_checkpoint.stores.group_commit import GroupCommit, append_durably

SCHEMA_VERSION = 3
"""The layout of our tables; 1 and 2 are migrated, a database recording a newer one is refused
(3 added the index, which a release without it would leave behind when it writes)."""

IDLE_KEPT = 8  # idle connections kept open for the next operations

_SETUP = (
    "CREATE TABLE IF NOT EXISTS telar_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS telar_chunks "
    "(seq INTEGER PRIMARY KEY AUTOINCREMENT, key BLOB NOT NULL, value TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS telar_chunks_key ON telar_chunks (key, seq)",
    "CREATE TABLE IF NOT EXISTS telar_terms (term BLOB NOT NULL, key BLOB NOT NULL, PRIMARY KEY (term, key)) WITHOUT ROWID",
    "CREATE INDEX IF NOT EXISTS telar_terms_key ON telar_terms (key)",
)
_EXPIRY_SETUP = (  # not in the schema version: a release without them leaves them be
    "CREATE TABLE IF NOT EXISTS telar_expiry (key BLOB PRIMARY KEY, expires_at REAL NOT NULL)",
    "CREATE INDEX IF NOT EXISTS telar_expiry_when ON telar_expiry (expires_at, key)",
    "CREATE TABLE IF NOT EXISTS telar_leases (name TEXT PRIMARY KEY, holder TEXT NOT NULL, until REAL NOT NULL)",
)
_EXPIRY_TABLES = "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN ('telar_expiry', 'telar_leases')"
_EXPIRE_AT = (
    "INSERT INTO telar_expiry (key, expires_at) VALUES (?, ?) "
    "ON CONFLICT (key) DO UPDATE SET expires_at = max(expires_at, excluded.expires_at)"
)
_SET_EXPIRY = "INSERT OR REPLACE INTO telar_expiry (key, expires_at) VALUES (?, ?)"
_DROP_EXPIRY = "DELETE FROM telar_expiry WHERE key = ?"
_EXPIRY = "SELECT expires_at FROM telar_expiry WHERE key = ?"
_EXPIRED = "SELECT key, expires_at FROM telar_expiry WHERE expires_at <= ? ORDER BY expires_at, key LIMIT ?"
_LEASE = (
    "INSERT INTO telar_leases (name, holder, until) VALUES (?, ?, ?) ON CONFLICT (name) DO UPDATE "
    "SET holder = excluded.holder, until = excluded.until WHERE holder = excluded.holder OR until <= ?"
)
_RELEASE = "DELETE FROM telar_leases WHERE name = ? AND holder = ?"
_INDEX_READY = "SELECT 1 FROM telar_meta WHERE name = 'index' AND value = 'ready'"
_SET_INDEX_READY = "INSERT OR REPLACE INTO telar_meta (name, value) VALUES ('index', 'ready')"
_UNSET_INDEX_READY = "DELETE FROM telar_meta WHERE name = 'index'"
_EMPTY = "SELECT NOT EXISTS (SELECT 1 FROM telar_chunks)"
_ADD_TERM = "INSERT OR IGNORE INTO telar_terms (term, key) VALUES (?, ?)"
_DROP_TERM = "DELETE FROM telar_terms WHERE term = ? AND key = ?"
_DROP_TERMS = "DELETE FROM telar_terms WHERE key = ?"
_INDEXED = "SELECT key FROM telar_terms WHERE term = ? AND key >= ? ORDER BY key LIMIT ?"
_KEYS_FROM = "SELECT DISTINCT key FROM telar_chunks WHERE key >= ? ORDER BY key LIMIT ?"
_KEYS_AFTER = "SELECT DISTINCT key FROM telar_chunks WHERE key > ? ORDER BY key LIMIT ?"
_RECORD_VERSION = f"INSERT OR IGNORE INTO telar_meta (name, value) VALUES ('schema_version', '{SCHEMA_VERSION}')"
_V1_TABLE = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'telar_histories'"
_MIGRATE_V1 = (
    "INSERT INTO telar_chunks (key, value) SELECT key, value FROM telar_histories ORDER BY rowid",
    "DROP TABLE telar_histories",
)
_TO_CURRENT = (f"UPDATE telar_meta SET value = '{SCHEMA_VERSION}' WHERE name = 'schema_version'",)
_V3_TABLE = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'telar_terms'"
_RECORD_V1 = "INSERT OR IGNORE INTO telar_meta (name, value) VALUES ('schema_version', '1')"
_VERSION = "SELECT value FROM telar_meta WHERE name = 'schema_version'"
_READ = "SELECT seq, value FROM telar_chunks WHERE key = ? ORDER BY seq"
_LATEST = "SELECT max(seq) FROM telar_chunks WHERE key = ?"
_INSERT = "INSERT INTO telar_chunks (key, value) VALUES (?, CAST(? AS TEXT))"
_APPEND_IF = (
    "INSERT INTO telar_chunks (key, value) SELECT ?, CAST(? AS TEXT) "
    "WHERE (SELECT max(seq) FROM telar_chunks WHERE key = ?) = ?"
)
_DELETE = "DELETE FROM telar_chunks WHERE key = ?"
_KEYS = "SELECT DISTINCT key FROM telar_chunks"


class _Connection(sqlite3.Connection):
    """A connection that says whether it runs a write statement outside a transaction (an
    append), for a forked child to tell whether a write was under way."""

    writing = False


class SQLiteStore(Store):
    """Histories as chunks in ``telar_chunks`` of the database file at `path` (see the module docs)."""

    kind = "sqlite"
    # Versions: the largest seq of a key's chunks; deferred appends: commits share one fsync of the
    # WAL, in `flush`; the index: ``telar_terms``; expiries and leases: ``telar_expiry`` and ``telar_leases``.
    keeps_versions = keeps_index = defers_appends = True

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        timeout: float = 30.0,
        fsync: bool = True,
        mode: int = 0o600,
        create: bool = True,
        synced_index: bool = False,
        share_database: bool = False,
    ) -> None:
        """`timeout`: seconds to wait for another writer; `fsync`: a write returns once its
        commit is on disk (else it may be lost on power loss, never corrupted); `mode`: permissions of a new database file;
        `create`: False opens only a database that already holds our tables,
        changing nothing (NoStoreError otherwise, naming another tool's database);
        `synced_index`: every change of the index is durable when it returns (for an index of
        another store's data, whose writes sync nothing of this database: `file_index`);
        `share_database`: add our tables to a database that holds a LangGraph SqliteSaver's (else,
        when it holds no tables of ours, the first operation raises ForeignStoreError, writing nothing)."""
        check(SQLiteStore.__init__, locals())
        self.path = Path(path)
        self._where = f"SQLite database {self.path}"
        self.create = create
        self.timeout = timeout
        self.fsync = fsync
        self.mode = mode
        self._lock = threading.Lock()
        self._commit_lock = threading.Lock()  # held while a write commits and is counted
        self._idle: list[_Connection] = []  # connections no operation holds, most recent last
        self._generation = 0  # bumped by close(), so connections lent before it are closed on return
        self._lent: set[_Connection] = set()  # for a forked child, to tell whether a write was under way
        self._pid = forks.pid
        self._ready = False
        self._expiring = False  # the expiry and lease tables are known to be there
        self._commits = GroupCommit()
        self.synced_index = synced_index
        self.share_database = share_database
        _OPEN_STORES.add(self)

    # Connections

    @contextmanager
    def _connection(self) -> Iterator[_Connection]:
        """A connection for one operation, its errors as StoreError. Connections are lent, not
        tied to threads: LangGraph writes from short-lived executor threads, and a connection
        per thread would open (and leak) one per invoke."""
        with self._errors():
            with self._lock:
                if self._pid != forks.pid:  # forked: the parent's connections and locks are not ours
                    self._pid, self._idle, self._lent = forks.pid, [], set()
                    self._commit_lock, self._commits = threading.Lock(), GroupCommit()
                conn = self._idle.pop() if self._idle else None
                generation = self._generation
            if conn is None:
                conn = self._connect()
            with self._lock:
                self._lent.add(conn)
            try:
                yield conn
            finally:
                with self._lock:
                    self._lent.discard(conn)
                    keep = generation == self._generation and len(self._idle) < IDLE_KEPT and not conn.in_transaction
                    if keep:
                        self._idle.append(conn)
                if not keep:
                    conn.close()

    def _connect(self) -> _Connection:
        if not self.create and not self._ready:
            self._require_ours()
        if not self.path.exists():
            if any(p.exists() and not p.is_dir() for p in self.path.parents):
                raise StoreError(f"cannot create SQLite database {self.path}: a part of its path is a file, not a directory")
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.close(os.open(self.path, os.O_CREAT | os.O_WRONLY, self.mode))
        conn = sqlite3.connect(
            self.path, timeout=self.timeout, isolation_level=None, check_same_thread=False, factory=_Connection
        )
        try:
            conn.text_factory = bytes
            if conn.execute("PRAGMA encoding").fetchone()[0] != b"UTF-8":
                raise StoreError(f"SQLite database {self.path} is not UTF-8 encoded; use a new file")
            if self.create and not self._ready and not self.share_database:  # before the journal mode changes the file
                self._refuse_foreign(conn)
            self._use_wal(conn)
            conn.execute("PRAGMA synchronous = NORMAL")  # the WAL is fsynced by `flush`
            if not self._ready:
                self._setup(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def _use_wal(self, conn: sqlite3.Connection) -> None:
        """Switch to WAL. SQLite's busy timeout does not cover this switch: connections opening a
        new file at once get "database is locked", so wait and retry, within the store's timeout."""
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                if conn.execute("PRAGMA journal_mode").fetchone()[0] != b"wal":
                    conn.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as exc:
                if not _busy(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.005)

    def _require_ours(self) -> None:
        """Without `create`: refuse a missing file, or a database without our tables, before
        anything (even the journal mode) is changed; refuse schema 1, which opening would migrate."""
        from telar_checkpoint.stores.foreign import not_ours, sqlite_tables

        where = f"SQLite database {self.path}"
        if not self.path.exists():
            raise NoStoreError(f"no store at {self.path}: the file does not exist")
        tables = sqlite_tables(self.path)
        if "telar_histories" in tables:
            raise NoStoreError(f"{where} holds a store of schema 1; open it once with TelarSaver to upgrade it")
        if "telar_meta" not in tables:
            raise not_ours(where, tables, postgres=False, langgraph_url=f"langgraph+sqlite:///{self.path}")

    def _refuse_foreign(self, conn: sqlite3.Connection) -> None:
        """Refuse a LangGraph SqliteSaver's database without our tables (see `stores.foreign`)."""
        from telar_checkpoint.stores.foreign import langgraph_sqlite

        refused = langgraph_sqlite(conn, self.path)
        if refused is not None:
            raise refused

    def _setup(self, conn: sqlite3.Connection) -> None:
        self._refuse_if_forked_mid_write()
        if not self.create:  # the tables are there (`_require_ours`); only their version is checked
            version = int(conn.execute(_VERSION).fetchone()[0])
        else:
            with self._transaction(conn):
                conn.execute(_SETUP[0])
                conn.execute(_RECORD_VERSION if conn.execute(_V1_TABLE).fetchone() is None else _RECORD_V1)
                version = int(conn.execute(_VERSION).fetchone()[0])
                if version <= SCHEMA_VERSION:  # 1: one row per thread in telar_histories; 2: no index
                    fresh = version == SCHEMA_VERSION and conn.execute(_V3_TABLE).fetchone() is None
                    for statement in _SETUP[1:] + _EXPIRY_SETUP + (_MIGRATE_V1 if version == 1 else ()) + _TO_CURRENT:
                        conn.execute(statement)
                    if fresh and conn.execute(_EMPTY).fetchone()[0]:  # a new database: nothing to index
                        conn.execute(_SET_INDEX_READY)
        check_schema(self._where, version, SCHEMA_VERSION)
        self._expiring = self.create
        self._ready = True

    def schema_version(self) -> int:
        """The schema version recorded in the database."""
        with self._connection() as conn:
            return int(conn.execute(_VERSION).fetchone()[0])

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
            raise driver_error(self._where, exc) from exc
        except OSError as exc:
            raise StoreError(f"cannot open {self._where}: {exc}") from exc

    def _refuse_if_forked_mid_write(self) -> None:
        """A child forked while its parent was writing this database cannot write it: SQLite keeps
        the parent's lock in the child's memory, where nothing ever releases it, so every write
        would wait `timeout` seconds and fail, for the life of the child. Say so at once."""
        if _FORKED_MID_WRITE and os.path.realpath(self.path) in _FORKED_MID_WRITE:
            raise StoreError(
                f"SQLite database {self.path}: this process was forked while its parent was writing to "
                "the database, and SQLite cannot write it from such a child (the parent's lock stays "
                "held in the child's copy of SQLite; https://sqlite.org/howtocorrupt.html#fork). "
                "Reads still work; write from a process started with 'spawn' or 'forkserver', or "
                "fork before the parent writes"
            )

    def setup(self) -> None:
        """Create the database file and its tables now, as the first operation would (with
        `create=False`, check that they are ours)."""
        with self._connection():
            pass  # a first connection sets the database up (`_connect`)

    def close(self) -> None:
        with self._lock:
            connections, self._idle = self._idle, []
            self._generation += 1
        for conn in connections:
            conn.close()

    def __del__(self) -> None:
        """A store dropped unclosed closes its idle connections (Python 3.13 warns of each unclosed
        database otherwise), but not a forked parent's: closing may checkpoint the parent's WAL."""
        if getattr(self, "_pid", None) == forks.pid:
            for conn in getattr(self, "_idle", ()):
                conn.close()

    # The Store interface

    def read(self, key: str) -> str | None:
        with self._connection() as conn:
            rows = conn.execute(_READ, (encode(key),)).fetchall()
        return _joined(rows, key)[0]

    def version(self, key: str) -> int | None:
        """The largest ``seq`` of the key's chunks: every write inserts a chunk, and seqs are never reused."""
        with self._connection() as conn:
            return conn.execute(_LATEST, (encode(key),)).fetchone()[0]

    def append_if(self, key: str, suffix: str, version: Hashable) -> Hashable | None:
        return append_durably(self, key, suffix, version)

    def append_if_deferred(self, key: str, suffix: str, version: Hashable) -> int | None:
        if not isinstance(version, int):
            return None
        raw_key = encode(key)
        self._refuse_if_forked_mid_write()
        with self._connection() as conn, self._commit_lock:
            conn.writing = True
            try:
                cursor = conn.execute(_APPEND_IF, (raw_key, encode(suffix), raw_key, version))
            finally:
                conn.writing = False
            if cursor.rowcount != 1:
                return None
            self._commits.wrote()
        return cursor.lastrowid

    def flush(self, key: str) -> None:
        """Return once every commit of this store so far is on disk (see the module docstring)."""
        if self.fsync:
            self._commits.flush(self._commits.written, self._sync_wal)

    def _sync_wal(self) -> None:
        try:
            fd = os.open(f"{self.path}-wal", os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:  # checkpointed into the database file, which SQLite synced then
            return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    @contextmanager
    def _commit(self) -> Iterator[_Connection]:
        """A connection for one write that commits with ``synchronous=NORMAL``; once it is
        counted, return when it is on disk."""
        self._refuse_if_forked_mid_write()
        with self._connection() as conn:
            with self._commit_lock:
                yield conn
                ticket = self._commits.wrote()
        if self.fsync:
            self._commits.flush(ticket, self._sync_wal)

    def update(self, key: str, change: Change) -> str | None:
        return self.update_versioned(key, change)[0]

    def update_versioned(self, key: str, change: Change) -> tuple[str | None, int | None]:
        raw_key = encode(key)
        with self._commit() as conn:
            with self._transaction(conn):
                rows = conn.execute(_READ, (raw_key,)).fetchall()
                old, version = _joined(rows, key)
                new = change(old)
                if new is None:
                    if old is not None:
                        conn.execute(_DELETE, (raw_key,))
                        conn.execute(_DROP_TERMS, (raw_key,))
                        if self._has_expiry(conn):
                            conn.execute(_DROP_EXPIRY, (raw_key,))
                    return None, None
                if new == old:
                    return new, version
                suffix = extension(old, new, len(rows))
                if suffix is not None:
                    return new, conn.execute(_INSERT, (raw_key, encode(suffix))).lastrowid
                if old is not None:
                    conn.execute(_DELETE, (raw_key,))
                return new, conn.execute(_INSERT, (raw_key, encode(new))).lastrowid

    def delete(self, key: str) -> None:
        raw_key = encode(key)
        with self._commit() as conn, self._transaction(conn):
            conn.execute(_DELETE, (raw_key,))
            conn.execute(_DROP_TERMS, (raw_key,))
            if self._has_expiry(conn):
                conn.execute(_DROP_EXPIRY, (raw_key,))

    # The index (see the module docs)

    def index(self, key: str, terms: Collection[str]) -> None:
        raw_key = encode(key)
        with self._index_commit() as conn:
            conn.executemany(_ADD_TERM, [(encode(term), raw_key) for term in terms])

    def unindex(self, key: str, terms: Collection[str]) -> None:
        raw_key = encode(key)
        with self._index_commit() as conn:
            conn.executemany(_DROP_TERM, [(encode(term), raw_key) for term in terms])

    def indexed(self, term: str, start: str | None = None, limit: int | None = None) -> list[str]:
        params = (encode(term), b"" if start is None else encode(start), -1 if limit is None else limit)
        with self._connection() as conn:
            return decoded_keys(row[0] for row in conn.execute(_INDEXED, params).fetchall())

    def index_ready(self) -> bool:
        with self._connection() as conn:
            return conn.execute(_INDEX_READY).fetchone() is not None

    def set_index_ready(self) -> None:
        with self._commit() as conn:
            conn.execute(_SET_INDEX_READY)

    def sorted_keys(self, after: str | None = None, limit: int | None = None) -> list[str]:
        query, start = (_KEYS_FROM, b"") if after is None else (_KEYS_AFTER, encode(after))
        with self._connection() as conn:
            rows = conn.execute(query, (start, -1 if limit is None else limit)).fetchall()
        return decoded_keys(row[0] for row in rows)

    @contextmanager
    def _index_commit(self) -> Iterator[_Connection]:
        """A transaction on the index: committed without a sync of its own, as the write it
        describes syncs the WAL, and with it every commit before (see the module docs); synced
        as any write is with `synced_index`."""
        with self._commit() if self.synced_index else self._connection() as conn:
            with self._transaction(conn):
                yield conn

    # Expiries and leases (see the module docs)

    def _has_expiry(self, conn: sqlite3.Connection) -> bool:
        """Whether the expiry and lease tables are there (a store opened without `create`, on a
        database older code wrote, may have none until its first expiry or lease is recorded)."""
        if not self._expiring:
            self._expiring = conn.execute(_EXPIRY_TABLES).fetchone()[0] == 2
        return self._expiring

    @contextmanager
    def _expiry_commit(self) -> Iterator[_Connection]:
        """`_index_commit`, making the expiry and lease tables first when they are not there."""
        made = not self._expiring
        with self._index_commit() as conn:
            if made:
                for statement in _EXPIRY_SETUP:
                    conn.execute(statement)
            yield conn
        self._expiring = True

    def expire_at(self, key: str, when: float) -> None:
        with self._expiry_commit() as conn:
            conn.execute(_EXPIRE_AT, (encode(key), when))

    def set_expiry(self, key: str, when: float | None) -> None:
        with self._expiry_commit() as conn:
            if when is None:
                conn.execute(_DROP_EXPIRY, (encode(key),))
            else:
                conn.execute(_SET_EXPIRY, (encode(key), when))

    def expiry(self, key: str) -> float | None:
        with self._connection() as conn:
            row = conn.execute(_EXPIRY, (encode(key),)).fetchone() if self._has_expiry(conn) else None
        return None if row is None else float(row[0])

    def expired(self, now: float, limit: int) -> list[tuple[str, float]]:
        if limit <= 0:
            return []
        with self._connection() as conn:
            rows = conn.execute(_EXPIRED, (now, limit)).fetchall() if self._has_expiry(conn) else []
        return [(key, float(when)) for raw, when in rows if (key := decode_key(raw)) is not None]

    def lease(self, name: str, holder: str, now: float, seconds: float) -> bool:
        """One upsert in a ``BEGIN IMMEDIATE`` transaction: it changes a row only when the lease is
        free, lapsed or the holder's."""
        raw_holder = encode(holder)
        with self._expiry_commit() as conn:
            return conn.execute(_LEASE, (encode(name), raw_holder, now + seconds, now)).rowcount == 1

    def release(self, name: str, holder: str) -> None:
        with self._expiry_commit() as conn:
            conn.execute(_RELEASE, (encode(name), encode(holder)))

    def write_keys(self, keys: Iterable[str]) -> None:
        """Store each of `keys` that is not stored yet with an empty value, in one transaction."""
        have = set(self.keys())
        missing = [(encode(key), encode("")) for key in dict.fromkeys(keys) if key not in have]
        if missing:
            with self._commit() as conn, self._transaction(conn):
                conn.executemany(_INSERT, missing)

    def set_index_not_ready(self) -> None:
        """Note that the index does not cover every key (`index_ready` is False until set again)."""
        with self._commit() as conn:
            conn.execute(_UNSET_INDEX_READY)

    def _raw_keys(self) -> list[bytes]:
        with self._connection() as conn:
            return [row[0] for row in conn.execute(_KEYS)]

    def keys(self) -> Iterator[str]:
        return iter(decoded_keys(self._raw_keys()))

    def foreign(self) -> list[str]:
        """Rows whose key is not UTF-8 text (so not written by us), shown as hex."""
        return sorted(f"telar_chunks key x'{raw.hex()}'" for raw in self._raw_keys() if decode_key(raw) is None)


_OPEN_STORES: weakref.WeakSet[SQLiteStore] = weakref.WeakSet()
_FORKED_MID_WRITE: set[str] = set()
"""In a forked child: the databases (real paths) its parent was writing when it forked."""


def _note_writes_under_way() -> None:
    """In a forked child: remember the databases whose write (a transaction holding SQLite's
    write lock, or an append statement) was under way in the parent, by SQLite's own state."""
    for store in list(_OPEN_STORES):
        if any(conn.in_transaction or conn.writing for conn in list(store._lent)):
            _FORKED_MID_WRITE.add(os.path.realpath(store.path))


forks.in_child_after_fork(_note_writes_under_way)


def _busy(exc: sqlite3.OperationalError) -> bool:
    """Whether SQLite refused for a lock another connection holds (by its error code; Python 3.10
    gives no code, only the message SQLite writes for these codes)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    return str(exc) in ("database is locked", "database table is locked")


def _joined(rows: list[tuple[int, bytes]], key: str) -> tuple[str | None, int | None]:
    """The value held in `rows` (chunks in seq order) and its version; (None, None) when there are none."""
    if not rows:
        return None, None
    return decode_value(b"".join(row[1] for row in rows), key), rows[-1][0]
