"""`store_from_url`: the store a URL names, as a user would write it in a config or on a command line.

``file:///abs/dir`` or a plain path, ``sqlite:///rel.db`` or ``sqlite:////abs/path.db`` (as in
SQLAlchemy), ``postgresql://...`` (or ``postgres://``), ``redis://...`` (or ``rediss://``),
``redis+cluster://host:port[,host:port...]`` (or ``rediss+cluster://``) for a Redis Cluster, and
``memory://``. Server stores connect on first use; an unreachable server is a `StoreError`
naming it, and a missing driver is a `UsageError` saying what to install. A SQLite, PostgreSQL
or Redis URL may end with ``?share_database=true``: the store's ``share_database`` option, taken
off the URL (see `stores.foreign`).

This module is the one place that reads store URLs: `scheme`, `local_path` and `shown` serve
the CLI and migration too. It makes the store and checks nothing else: `stores.opening.open_store`,
which calls it, is the way to open a store.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from telar_checkpoint.errors import UsageError
from telar_checkpoint.stores.base import Store
from telar_checkpoint.stores.foreign import SHARE_OPTION

CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
"""The schemes of a Redis Cluster's URL (``rediss``: TLS)."""

SCHEMES = ("file", "sqlite", "postgresql", "postgres", "redis", "rediss", *CLUSTER_SCHEMES, "memory")
"""The URL schemes `store_from_url` knows."""

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")
_DRIVERS = {
    "postgres": ("telar_checkpoint.stores.postgres", "PostgresStore", "psycopg"),
    "redis": ("telar_checkpoint.stores.redis", "RedisStore", "redis"),
}


def shown(url: str) -> str:
    """`url` for a message: a password in it is masked."""
    return re.sub(r"//([^/@:]*):[^/@]*@", r"//\1:***@", url)



def scheme(url: str) -> str | None:
    """The scheme of `url`, lower-cased (``langgraph+sqlite`` included), or None for a plain
    path (a one-letter scheme without ``//`` is a Windows drive)."""
    match = _SCHEME.match(url)
    return match.group(1).lower() if match and (len(match.group(1)) > 1 or "://" in url) else None


def store_kind(url: str) -> str:
    """The `Store.kind` of the store `url` names (a plain path: a file store), without opening it."""
    kind = scheme(url) or "file"
    if kind in CLUSTER_SCHEMES:
        return "redis-cluster"
    return {"postgresql": "postgres", "rediss": "redis"}.get(kind, kind)


def local_path(url: str) -> Path | None:
    """The directory or database file that a plain path, ``file:`` or ``sqlite:`` URL (also
    ``langgraph+sqlite:``) names; None for other URLs."""
    kind = scheme(url)
    if kind is None:
        return Path(url)
    if kind in ("file", "sqlite", "langgraph+sqlite"):
        return Path(_path(url, kind))
    return None


def share_option(url: str) -> tuple[str, bool | None]:
    """`url` without its ``share_database`` parameter, and the parameter's value (None: not given).

    >>> share_option("sqlite:///app.db?share_database=true")
    ('sqlite:///app.db', True)
    """
    base, mark, rest = url.partition("?")
    query, hash_mark, fragment = rest.partition("#")
    kept, value = [], None
    for item in query.split("&") if mark else []:
        name, _, text = item.partition("=")
        if unquote(name) != SHARE_OPTION:
            kept.append(item)
        elif unquote(text).lower() in ("true", "1", "yes", "false", "0", "no"):
            value = unquote(text).lower() in ("true", "1", "yes")
        else:
            raise UsageError(f"store URL {shown(url)!r}: {SHARE_OPTION} is true or false, not {unquote(text)!r}")
    if value is None:
        return url, None
    return base + ("?" + "&".join(kept) if kept else "") + hash_mark + fragment, value


def _path(url: str, kind: str) -> str:
    """The local path a ``file:`` or ``sqlite:`` URL names (``sqlite:///x`` is relative, as in SQLAlchemy)."""
    url = share_option(url)[0]
    parts = urlsplit(url)
    if parts.query or parts.fragment:
        raise UsageError(f"store URL {url!r}: a {kind} URL takes no query or fragment; pass options as arguments")
    if parts.netloc not in ("", "localhost"):
        raise UsageError(f"store URL {url!r}: a {kind} URL names a local path, not a host ({parts.netloc!r})")
    path = unquote(parts.path)
    if kind != "file" and url[len(kind) :].startswith(":///"):
        path = path[1:]  # sqlite:///rel.db is relative, sqlite:////abs.db absolute
    if not path:
        raise UsageError(f"store URL {url!r} names no path; e.g. {kind}:///{'dir' if kind == 'file' else 'data.db'}")
    return path


def cluster_nodes(url: str) -> tuple[list[tuple[str, int]], dict[str, Any]]:
    """The nodes (host, port) a Redis Cluster URL names, and the client options it carries
    (``username``, ``password``, ``ssl``).

    >>> cluster_nodes("redis+cluster://:secret@10.0.0.1:7000,[::1]/")
    ([('10.0.0.1', 7000), ('::1', 6379)], {'password': 'secret'})
    """
    kind = scheme(url)
    if kind not in CLUSTER_SCHEMES:
        raise UsageError(f"store URL {shown(url)!r} is not a Redis Cluster URL (redis+cluster://host:port,...)")
    parts = urlsplit(url)
    if parts.query or parts.fragment or parts.path not in ("", "/", "/0"):
        raise UsageError(
            f"store URL {shown(url)!r}: a Redis Cluster URL names its nodes only (a cluster has database 0 alone); "
            "pass options as arguments"
        )
    userinfo, _, hosts = parts.netloc.rpartition("@")
    options: dict[str, Any] = {"ssl": True} if kind == "rediss+cluster" else {}
    if userinfo:
        username, has_password, password = userinfo.partition(":")
        options.update({"username": unquote(username)} if username else {})
        options.update({"password": unquote(password)} if has_password else {})
    nodes = []
    for node in hosts.split(","):
        match = _NODE.match(node)
        if match is None:
            raise UsageError(f"store URL {shown(url)!r}: {node!r} is not host:port")
        nodes.append((match.group(1) or match.group(2), int(match.group(3) or 6379)))
    return nodes, options


_NODE = re.compile(r"^(?:\[([0-9A-Fa-f:.]+)\]|([^\[\]:/,]+))(?::([0-9]{1,5}))?$")


def _server_store(kind: str, url: str, options: dict[str, Any]) -> Store:
    module_name, class_name, driver = _DRIVERS[kind]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        if importlib.util.find_spec(driver) is not None:  # the driver is there: the error is another
            raise
        raise UsageError(
            f"store URL {shown(url)!r}: the {driver} package is not installed; "
            f"pip install 'telar-checkpoint[{kind}]'"
        ) from exc
    store: Store = getattr(module, class_name)(url, **options)
    return store


def store_from_url(url: str, **options: Any) -> Store:
    """The store `url` names, made as it is (`stores.opening.open_store` checks a path first);
    `options` go to the store's constructor, but for ``share_database``
    (also ``?share_database=true`` in the URL), which a file or memory store has no use for.

    >>> store_from_url("memory://").kind
    'memory'
    """
    kind = scheme(url)
    url, shared = share_option(url) if kind is not None else (url, None)
    if shared or options.get(SHARE_OPTION):
        options[SHARE_OPTION] = True
    if kind in (None, "file", "memory"):
        options.pop(SHARE_OPTION, None)  # no other tool's data to share a directory with
    try:
        if kind is None or kind == "file":
            from telar_checkpoint.stores.file import FileStore

            return FileStore(url if kind is None else _path(url, "file"), **options)
        if kind == "sqlite":
            from telar_checkpoint.stores.sqlite import SQLiteStore

            return SQLiteStore(_path(url, "sqlite"), **options)
        if kind in ("postgresql", "postgres"):
            return _server_store("postgres", url, options)
        if kind in ("redis", "rediss", *CLUSTER_SCHEMES):
            return _server_store("redis", url, options)
        if kind == "memory":
            if url.rstrip("/") not in ("memory:", "memory:/") or options:
                raise UsageError(f"store URL {url!r}: write memory:// (a memory store takes no path or options)")
            from telar_checkpoint.stores.memory import MemoryStore

            return MemoryStore()
    except TypeError as exc:
        raise UsageError(f"store URL {shown(url)!r}: bad option: {exc}") from exc
    raise UsageError(
        f"store URL {shown(url)!r}: unknown scheme {kind!r}; supported: "
        "file:///dir (or a plain path), sqlite:///file.db, postgresql://..., redis://..., "
        "redis+cluster://host:port,..., memory://"
    )
