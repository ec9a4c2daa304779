"""telar-checkpoint: durable, readable, versioned LangGraph checkpoints.

`TelarSaver` is the checkpointer; `CheckpointCodec` the pure string format it
stores; the stores hold one string per thread.
"""

from telar_checkpoint.codec import CheckpointCodec, CheckpointRecord, WriteRecord
from telar_checkpoint.errors import (
    ArgumentTypeError,
    CheckpointDroppedError,
    CorruptLineError,
    ForeignDataError,
    RefusedTypeError,
    SerializationError,
    StoreBusyError,
    StoredDataError,
    StoreError,
    StoreFullError,
    TelarError,
    ThreadDeletedError,
    UnknownFormatError,
    UsageError,
)
from telar_checkpoint.format import FORMAT_V1, FORMAT_V2
from telar_checkpoint.migration import migrate
from telar_checkpoint.repairing import repair
from telar_checkpoint.saver import TelarSaver
from telar_checkpoint.serializer import JsonSerializer
from telar_checkpoint.stores import FileStore, MemoryStore, Store

__all__ = [
    "FORMAT_V1",
    "FORMAT_V2",
    "ArgumentTypeError",
    "CheckpointCodec",
    "CheckpointDroppedError",
    "CheckpointRecord",
    "CorruptLineError",
    "FileStore",
    "ForeignDataError",
    "JsonSerializer",
    "MemoryStore",
    "RefusedTypeError",
    "SerializationError",
    "Store",
    "StoreBusyError",
    "StoreError",
    "StoreFullError",
    "StoredDataError",
    "ThreadDeletedError",
    "TelarError",
    "TelarSaver",
    "UnknownFormatError",
    "UsageError",
    "WriteRecord",
    "migrate",
    "repair",
]
