"""Stores: strings keyed by thread id. See `Store` for the interface."""

from telar_checkpoint.stores.base import Change, Store
from telar_checkpoint.stores.file import FileStore
from telar_checkpoint.stores.memory import MemoryStore

__all__ = ["Change", "FileStore", "MemoryStore", "Store"]
