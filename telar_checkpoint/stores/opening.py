"""`open_store`: the one way to open a store, from whatever a user gives.

A path (None: `DEFAULT_DIRECTORY`), a store URL (`stores.url`), a `Store` (used as it is),
or the application's own psycopg connection or pool or redis-py client (neither driver is
imported unless the application imported it). A plain path or ``file:`` URL must name a
directory of ours, an empty one or none yet: a file, or a directory that holds only other
files, is refused before anything is written. With ``create=False`` (whatever only reads:
the CLI's looking commands, a migration source) nothing is created, and what is there
instead is named (no directory, a database without our tables, another tool's database).
A database that holds a LangGraph saver's data and none of ours is refused by the store
itself, on first use (`stores.foreign`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, NamedTuple

from telar_checkpoint.errors import ArgumentTypeError, ForeignStoreError, NoStoreError, UsageError
from telar_checkpoint.stores.base import Store
from telar_checkpoint.stores.file import FileStore
from telar_checkpoint.stores.file_index import INDEX_DIR
from telar_checkpoint.stores.file_names import LONG_DIR, SUFFIX
from telar_checkpoint.stores.file_temps import TMP
from telar_checkpoint.stores.foreign import is_sqlite_file, sqlite_tables, sqlite_tool
from telar_checkpoint.stores.url import local_path, scheme, store_from_url

DEFAULT_DIRECTORY = ".telar-checkpoint"
"""The directory a store is kept in when none is named."""

_OURS = (SUFFIX, ".d", LONG_DIR, TMP, INDEX_DIR)  # how the names a FileStore puts at the top of its directory end
_CHECKED = ("sqlite", "postgresql", "postgres")  # the stores that take `create=False` and check for our tables


class OpenedStore(NamedTuple):
    """What `open_store` gives: the store, and whether the caller owns it."""

    store: Store
    owned: bool
    """True when the store was made here (from a path, a URL or the application's connection),
    so the caller closes it (which leaves the application's connection open); False for a
    `Store` given as it is."""


def open_store(
    target: Store | str | os.PathLike[str] | object | None = None,
    *,
    create: bool = True,
    share_database: bool = False,
    **options: Any,
) -> OpenedStore:
    """The store `target` names: a `Store`, a directory path, a store URL, or the application's
    own psycopg connection or pool or redis-py client; None for `DEFAULT_DIRECTORY`.

    `create=False` creates and changes nothing: a missing store is a `NoStoreError`. A path
    that is a file, or a directory holding only files not ours, is refused (`NoStoreError`,
    `ForeignStoreError` naming them) before anything is written. `share_database` and
    `options` go to the store's constructor (see `stores.url`); a `Store` takes none.

    >>> open_store("memory://").store.kind
    'memory'
    """
    if isinstance(target, Store):
        if options or share_database:
            named = sorted(options) + (["share_database"] if share_database else [])
            raise UsageError(f"store options {named} are for a store opened from a path or URL; give them to the store you made")
        return OpenedStore(target, owned=False)
    if share_database:
        options["share_database"] = True
    if target is None or isinstance(target, os.PathLike):
        directory = os.fspath(target if target is not None else DEFAULT_DIRECTORY)
        return OpenedStore(_open_directory(Path(directory), create, options), owned=True)
    if isinstance(target, str):
        return OpenedStore(_open_url(target, create, options), owned=True)
    given = _given_store(target, create, options)
    if given is None:
        raise ArgumentTypeError(
            f"store must be a Store, a directory path or a store URL (sqlite:///x.db, postgresql://..., "
            f"redis://...), or the application's own psycopg connection or pool or redis-py client, not {type(target).__name__}"
        )
    return OpenedStore(given, owned=True)


def _open_url(url: str, create: bool, options: dict[str, Any]) -> Store:
    kind = scheme(url)
    path = local_path(url)
    if kind in (None, "file") and path is not None:
        return _open_directory(path, create, options)
    if create or kind not in _CHECKED:
        return store_from_url(url, **options)
    store = store_from_url(url, create=False, **options)
    try:
        store.setup()  # with create=False, checks that our tables are there: a missing or foreign store is named now
    except BaseException:
        store.close()
        raise
    return store


def _open_directory(path: Path, create: bool, options: dict[str, Any]) -> FileStore:
    options.pop("share_database", None)  # no other tool's data to share a directory with
    _check_directory(path, must_exist=not create)
    try:
        return FileStore(path, create=create, **options)
    except TypeError as exc:
        raise UsageError(f"store {str(path)!r}: bad option: {exc}") from exc


def _check_directory(path: Path, *, must_exist: bool) -> None:
    """Refuse a file, or a directory with other files and nothing of ours, where a directory store is meant."""
    if not path.exists():
        if must_exist:
            raise NoStoreError(f"no store at {str(path)!r}: {path} does not exist")
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
    others = []
    with os.scandir(path) as entries:
        for entry in entries:
            if entry.name.endswith(_OURS):
                return
            others.append(entry.name)
    if others:
        others.sort()
        shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
        raise ForeignStoreError(
            f"{path} holds no telar-checkpoint threads, only other files ({shown}); is it the right directory?"
        )


def _given_store(target: object, create: bool, options: dict[str, Any]) -> Store | None:
    """A store on the application's own connection, pool or client (`target`), or None when it is
    none: psycopg's and psycopg_pool's objects make a `PostgresStore`, redis-py's a `RedisStore`
    (each refuses what it cannot serve). Neither driver is imported unless the application has
    imported it (it made `target` with it)."""
    module = type(target).__module__.split(".")[0]
    if module in ("psycopg", "psycopg_pool") and module in sys.modules:
        from telar_checkpoint.stores.postgres import PostgresStore

        return PostgresStore(target, create=create, **options)  # type: ignore[arg-type]  # (it refuses what it cannot serve)
    if module == "redis" and "redis" in sys.modules:
        from telar_checkpoint.stores.redis import RedisStore
        from telar_checkpoint.stores.redis_clients import is_redis_object

        if is_redis_object(target):
            return RedisStore(target, **options)  # type: ignore[arg-type]  # (a pipeline is refused in our words)
    return None
