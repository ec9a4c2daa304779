"""`open_store` on a URL: each URL form, and clean errors for bad schemes, dead servers and missing drivers."""

from __future__ import annotations

import sys
import time
import uuid
from pathlib import Path

import pytest

from telar_checkpoint.errors import StoreError, UsageError
from telar_checkpoint.stores import FileStore, MemoryStore, Store, open_store
from telar_checkpoint.stores.sqlite import SQLiteStore
from tests.stores import POSTGRES_URL, REDIS_URL


def test_file_urls_and_plain_paths(tmp_path: Path) -> None:
    urls = {"a": f"file://{tmp_path}/a", "b": f"file://localhost{tmp_path}/b", "c": str(tmp_path / "c")}
    urls.update(d=f"file:{tmp_path}/d", e=f"file://{tmp_path}/%65")
    for name, url in urls.items():
        store = open_store(url).store
        assert isinstance(store, FileStore) and store.directory == tmp_path / name


def test_sqlite_urls_relative_and_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    relative = open_store("sqlite:///rel.db").store
    absolute = open_store(f"sqlite:///{tmp_path}/abs.db").store
    assert isinstance(relative, SQLiteStore) and relative.path == Path("rel.db")
    assert isinstance(absolute, SQLiteStore) and absolute.path == tmp_path / "abs.db"
    relative.write("t", "v")
    assert (tmp_path / "rel.db").exists()
    relative.close()


def test_memory_url() -> None:
    assert isinstance(open_store("memory://").store, MemoryStore)


@pytest.mark.parametrize("url, kind", [(POSTGRES_URL, "postgres"), (POSTGRES_URL.replace("postgresql://", "postgres://"), "postgres"),
                                       (REDIS_URL, "redis")])  # fmt: skip
def test_server_urls(url: str, kind: str) -> None:
    tag = f"telar_test_url_{uuid.uuid4().hex[:12]}"  # a space of its own: tests run in parallel
    store: Store = open_store(url, **({"schema": tag} if kind == "postgres" else {"prefix": f"{tag}:"})).store
    try:
        assert store.kind == kind
        assert store.read("missing") is None
    finally:
        store.close()
        if kind == "postgres":
            from tests.stores import postgres_admin

            postgres_admin(f'DROP SCHEMA IF EXISTS "{tag}" CASCADE')
        else:
            from tests.stores import redis_delete_prefix

            redis_delete_prefix(f"{tag}:")


@pytest.mark.parametrize("url", ["s3://bucket/x", "mysql://u:secret@h/db", "http://example.invalid/"])
def test_unknown_scheme_names_it_and_lists_the_supported(url: str) -> None:
    with pytest.raises(UsageError) as caught:
        open_store(url)
    message = str(caught.value)
    assert f"unknown scheme {url.split(':')[0]!r}" in message
    assert all(scheme in message for scheme in ("file:", "sqlite:", "postgresql:", "redis:", "memory:"))
    assert "secret" not in message


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///", "file://host/dir", "sqlite:///x.db?mode=ro", "memory://x"])
def test_malformed_local_urls(url: str) -> None:
    with pytest.raises(UsageError, match="store URL"):
        open_store(url)


def test_bad_option_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="bad option.*colour"):
        open_store(str(tmp_path), colour="red")


@pytest.mark.parametrize("url", ["postgresql://postgres@127.0.0.1:1/test", "redis://127.0.0.1:1"])
async def test_unreachable_server_is_a_store_error_naming_it(url: str) -> None:
    store = open_store(url, connect_timeout=2).store
    started = time.monotonic()
    with pytest.raises(StoreError, match="server at 127.0.0.1:1"):
        store.read("t")
    with pytest.raises(StoreError, match="server at 127.0.0.1:1"):
        store.update("t", lambda old: "v")
    with pytest.raises(StoreError, match="server at 127.0.0.1:1"):
        await store.aread("t")
    assert time.monotonic() - started < 10
    await store.aclose()


@pytest.mark.parametrize(("url", "driver", "extra"), [(POSTGRES_URL, "psycopg", "postgres"), (REDIS_URL, "redis", "redis")])
def test_missing_driver_says_what_to_install(url: str, driver: str, extra: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, driver, None)  # importing it now raises ImportError
    monkeypatch.delitem(sys.modules, f"telar_checkpoint.stores.{extra}", raising=False)
    with pytest.raises(UsageError, match=rf"pip install 'telar-checkpoint\[{extra}\]'"):
        open_store(url)


# (not "postgresql://a b": libpq 18 rejects it, but the libpq 16 in psycopg-binary 3.2.1 takes "a b" as a host)
@pytest.mark.parametrize("url", ["redis://host:notaport/0", "postgresql://[::1/db"])
def test_malformed_server_urls(url: str) -> None:
    with pytest.raises(UsageError, match="not a (Redis URL|PostgreSQL connection string)"):
        open_store(url)


def test_local_path_and_scheme_read_every_form_once() -> None:
    """`scheme` and `local_path` are the one reading of store URLs (the CLI and migration's too)."""
    from telar_checkpoint.stores.url import local_path, scheme

    cases = {
        "runs/store": (None, Path("runs/store")),
        "C:store": (None, Path("C:store")),  # a Windows drive, not a scheme
        "file:///srv/store": ("file", Path("/srv/store")),
        "sqlite:///rel.db": ("sqlite", Path("rel.db")),
        "SQLite:////abs.db": ("sqlite", Path("/abs.db")),
        "langgraph+sqlite:///lg.sqlite": ("langgraph+sqlite", Path("lg.sqlite")),
        "postgresql://u@h/db": ("postgresql", None),
        "redis://h:6379/0": ("redis", None),
        "memory://": ("memory", None),
    }
    assert {url: (scheme(url), local_path(url)) for url in cases} == cases


def test_a_missing_driver_is_named_and_another_import_error_is_not_taken_for_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Found: any ImportError while loading a server store's module said "the redis package is not installed"."""
    import importlib

    from telar_checkpoint.stores import url as url_module

    def broken(name: str, *args: object) -> object:
        raise ImportError("cannot import name 'something' from a half-edited module")

    monkeypatch.setattr(importlib, "import_module", broken)
    with pytest.raises(ImportError, match="half-edited"):
        url_module.store_from_url("redis://127.0.0.1:6379/0")
    monkeypatch.setitem(sys.modules, "redis", None)  # as if not installed: importing it raises ImportError
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "redis" else object())
    with pytest.raises(UsageError, match=r"the redis package is not installed; pip install 'telar-checkpoint\[redis\]'"):
        url_module.store_from_url("redis://127.0.0.1:6379/0")
