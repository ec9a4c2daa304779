"""Opening a store from a URL a person typed, refusing the likely mistakes before anything changes.

`open_existing` is for whatever only reads (the CLI's looking commands, a migration
source): it creates nothing, and names what is there instead (no file, another
tool's database). `open_target` creates a store where there is none, but refuses a
plain path that is a file, or a directory that holds only other files. A plain path
is accepted only as a directory of ours (or, for `open_target`, a new one). A database
that holds a LangGraph saver's data and none of ours is refused by the store itself, as
in the library (`stores.foreign`); `open_target` sets the store up at once to say so.
"""

from __future__ import annotations

import os
from pathlib import Path

from telar_checkpoint.errors import ForeignStoreError, NoStoreError
from telar_checkpoint.stores.base import Store
from telar_checkpoint.stores.foreign import is_sqlite_file, sqlite_tables, sqlite_tool
from telar_checkpoint.stores.url import local_path, open_store, scheme

_OUR_ENTRIES = (".jsonl", ".d", "~long", ".tmp", ".index")  # what a FileStore puts at the top of its directory
_NO_CREATE = ("sqlite", "postgresql", "postgres")  # the stores that take `create=False`
_SET_UP = (*_NO_CREATE, "redis", "rediss")  # the stores that refuse another tool's data when set up


def _check_directory(url: str, path: Path, *, must_exist: bool) -> None:
    """Refuse a file, or a directory with other files and nothing of ours, where a directory store is meant."""
    if not path.exists():
        if must_exist:
            raise NoStoreError(f"no store at {url!r}: {path} does not exist")
        return
    if not path.is_dir():
        if is_sqlite_file(path):
            tool = sqlite_tool(sqlite_tables(path))
            if tool == "LangGraph SqliteSaver":
                raise ForeignStoreError(
                    f"{path} is a file, not a directory of ours: this looks like a LangGraph SqliteSaver "
                    f"database: did you mean langgraph+sqlite:///{path}? (only `migrate --from` reads those)"
                )
            if tool == "telar-checkpoint":
                raise NoStoreError(f"{path} is a SQLite database of ours, not a directory: did you mean sqlite:///{path}?")
        raise NoStoreError(
            f"{path} is a file, not a directory of ours; a store is a directory (file:///dir), "
            "sqlite:///file.db, postgresql://... or redis://..."
        )
    with os.scandir(path) as entries:
        names = sorted(entry.name for entry in entries)
    if names and not any(name.endswith(_OUR_ENTRIES) for name in names):
        shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
        raise ForeignStoreError(
            f"{path} holds no telar-checkpoint threads, only other files ({shown}); is it the right directory?"
        )


def _open(url: str, *, create: bool) -> Store:
    kind = scheme(url)
    path = local_path(url)
    if kind in (None, "file") and path is not None:
        _check_directory(url, path, must_exist=not create)
    if kind in (_SET_UP if create else _NO_CREATE):
        store = open_store(url) if create else open_store(url, create=False)
        try:
            store.schema_version()  # type: ignore[attr-defined]  # (every store of _SET_UP has one) connects now: a missing or foreign store is named before anything else
        except BaseException:
            store.close()
            raise
        return store
    return open_store(url)


def open_existing(url: str) -> Store:
    """The store `url` names, opened without creating or changing anything.

    Raises NoStoreError when nothing of ours is there (ForeignStoreError when another
    tool's data is, with the likely fix). A Redis prefix with no keys reads as an empty store.
    """
    return _open(url, create=False)


def open_target(url: str) -> Store:
    """The store `url` names, created when it does not exist; a plain path must be a directory of ours or new."""
    return _open(url, create=True)
