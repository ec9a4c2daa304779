"""The errors telar-checkpoint raises: one root class, split by whose fault it is.

`UsageError` is the caller's mistake (a bad argument); `StoredDataError` and its
subclasses are bad data found in a store, and always name the thread and line.
"""

from __future__ import annotations


class TelarError(Exception):
    """Root of every error raised by telar-checkpoint."""


class UsageError(TelarError, ValueError):
    """The caller asked for something that cannot be done (a bad argument or URL)."""


class ArgumentTypeError(UsageError, TypeError):
    """An argument of the wrong type: a `UsageError`, and the `TypeError` Python users expect."""


class SaverContextError(UsageError, AttributeError):
    """A saver's method asked of what `TelarSaver.from_conn_string` returns: a context manager
    (an `AttributeError` too, so `hasattr` answers False)."""


class SaverClosedError(UsageError):
    """A saver used after it was closed (its ``with`` block ended): make a new one."""


class NoAsyncDriverError(UsageError):
    """An async method of a store whose options give it a sync-only driver, or that was given only
    sync connections (a psycopg `Connection` or `ConnectionPool`, a sync redis-py client); the
    message says what to pass."""


class NoSyncDriverError(UsageError):
    """A sync method of a store that was given only async connections (an `AsyncConnection`, an
    `AsyncConnectionPool`, a `redis.asyncio` client); the message says what to pass."""


class UnusableConnectionError(UsageError):
    """A connection, pool or client the application gave a store cannot serve it (a pipeline, a
    closed pool, a connection inside a transaction of its own); the message says what to give instead."""


class NoStoreError(UsageError):
    """A URL or path names no store of ours: nothing is there, or another tool's data.

    Raised by the commands that only read (and by migration sources), which
    never create a store; the message says what is there and the likely fix.
    """


class ForeignStoreError(NoStoreError):
    """A URL or path names another tool's data (a LangGraph saver's database, say)."""


class StoreError(TelarError):
    """A store could not be reached or refused an operation.

    The stored value is as it was, except when the connection dropped while a
    commit was under way: then the write may or may not have been applied
    (never twice), and reading the thread tells which.
    """


class StoreFullError(StoreError):
    """The disk or quota that holds a store is full: the write was refused whole, and what
    was stored before is as it was. A rewrite needs room for a temporary copy of the thread."""


class StoreBusyError(StoreError):
    """Another writer held a thread's lock for longer than the store's timeout: nothing was
    written, and what was stored is as it was."""


class SerializationError(TelarError):
    """A value could not be written as JSON, or a stored value names a type we do not load."""


class RefusedTypeError(SerializationError):
    """A stored ``$serde`` value names a type its serializer may not load: one not on the
    serde allowlist (`telar_checkpoint.serde_allowlist`), or pickle without ``pickle_fallback=True``.

    The value was not handed to the serializer, so nothing was built and no code ran;
    `refused` names what was refused (``"os.system"``, ``"pickle"``, ...).
    """

    def __init__(self, message: str, *, refused: str) -> None:
        super().__init__(message)
        self.refused = refused


class StoredDataError(TelarError):
    """Stored data that is not a valid history; `thread_id` and `line` say where."""

    def __init__(self, message: str, *, thread_id: str | None = None, line: int | None = None) -> None:
        where = []
        if thread_id is not None:
            where.append(f"thread {thread_id!r}")
        if line is not None:
            where.append(f"line {line}")
        super().__init__(f"{', '.join(where)}: {message}" if where else message)
        self.thread_id = thread_id
        self.line = line


class CorruptLineError(StoredDataError):
    """A complete line that is not valid JSON or not a record of ours."""


class UnknownFormatError(StoredDataError):
    """A line whose format version this reader does not know, or that has none."""


class ForeignDataError(StoredDataError):
    """Data in a store's space that is not a telar-checkpoint history; it is never overwritten."""


class CheckpointDroppedError(TelarError, LookupError):
    """A checkpoint the thread held was dropped (replaced by a newer branch, or trimmed)."""

    def __init__(self, thread_id: str, checkpoint_ns: str, checkpoint_id: str, reason: str) -> None:
        ns = f" in namespace {checkpoint_ns!r}" if checkpoint_ns else ""
        super().__init__(
            f"thread {thread_id!r}: checkpoint {checkpoint_id}{ns} was {reason}; "
            "the thread keeps only the path that led to its current state"
            + (" and its last max_history checkpoints" if reason == "trimmed" else "")
        )
        self.thread_id = thread_id
        self.checkpoint_ns = checkpoint_ns
        self.checkpoint_id = checkpoint_id
        self.reason = reason


class ThreadDeletedError(TelarError):
    """A write for a thread that was deleted (`delete_thread`, `prune`, an expiry) while a run
    still wrote to it: its checkpoint, or the checkpoint it continues, was in the deleted thread.
    Nothing was stored, so the thread does not come back half-written; a new run (a put with no
    parent) starts the thread again."""

    def __init__(self, thread_id: str | None, checkpoint_ns: str, checkpoint_id: str, deleted_at: str | None, why: str) -> None:
        ns = f" (namespace {checkpoint_ns!r})" if checkpoint_ns else ""
        super().__init__(
            f"thread {thread_id!r} was deleted at {deleted_at}: {why}{ns}, so nothing was stored; "
            "a new run (no checkpoint_id in its config) starts the thread again"
        )
        self.thread_id = thread_id
        self.checkpoint_ns = checkpoint_ns
        self.checkpoint_id = checkpoint_id
        self.deleted_at = deleted_at


__all__ = [
    "CheckpointDroppedError",
    "CorruptLineError",
    "ForeignDataError",
    "ForeignStoreError",
    "NoStoreError",
    "NoAsyncDriverError",
    "NoSyncDriverError",
    "RefusedTypeError",
    "SaverClosedError",
    "SerializationError",
    "StoreBusyError",
    "StoreError",
    "StoreFullError",
    "StoredDataError",
    "TelarError",
    "ThreadDeletedError",
    "UnknownFormatError",
    "UnusableConnectionError",
    "UsageError",
]
