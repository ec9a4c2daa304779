"""Stores: strings keyed by thread id. See `Store` for the interface: four methods, the rest derived.

The server stores are imported on first use of their names, so importing this
package does not import psycopg or redis.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from telar_checkpoint.stores.base import Change, Store
from telar_checkpoint.stores.file import FileStore
from telar_checkpoint.stores.memory import MemoryStore

if TYPE_CHECKING:
    from telar_checkpoint.stores.opening import OpenedStore, open_store
    from telar_checkpoint.stores.postgres import PostgresStore
    from telar_checkpoint.stores.redis import RedisStore
    from telar_checkpoint.stores.sqlite import SQLiteStore

_LAZY = {
    "SQLiteStore": "telar_checkpoint.stores.sqlite",
    "PostgresStore": "telar_checkpoint.stores.postgres",
    "RedisStore": "telar_checkpoint.stores.redis",
    "OpenedStore": "telar_checkpoint.stores.opening",
    "open_store": "telar_checkpoint.stores.opening",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


__all__ = [
    "Change", "FileStore", "MemoryStore", "OpenedStore", "PostgresStore", "RedisStore", "SQLiteStore", "Store", "open_store",
]
