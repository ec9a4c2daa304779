"""What `TelarSaver(x)` opens when `x` is not a `Store`: a URL opens the store it names (never a
local directory named ``postgresql:``), an existing file is refused (issue 17)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from telar_checkpoint import TelarSaver
from telar_checkpoint.errors import TelarError, UsageError
from telar_checkpoint.stores import FileStore
from telar_checkpoint.stores.sqlite import SQLiteStore
from tests.stores import POSTGRES_URL, REDIS_URL, postgres_admin

CONFIG: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
METADATA: Any = {"source": "input", "step": 0, "parents": {}}


def round_trip(saver: TelarSaver) -> None:
    saved = saver.put(CONFIG, empty_checkpoint(), METADATA, {})
    found = saver.get_tuple(saved)
    assert found is not None and found.config == saved


def test_a_sqlite_url_opens_a_sqlite_store_not_a_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Found: the URL was taken for a directory path, so the saver wrote under ./sqlite:/x.db/."""
    monkeypatch.chdir(tmp_path)
    with TelarSaver("sqlite:///x.db") as saver:
        assert isinstance(saver.store, SQLiteStore)
        round_trip(saver)
    assert (tmp_path / "x.db").is_file()
    assert not (tmp_path / "sqlite:").exists()


@pytest.mark.servers("postgres")
def test_a_postgres_url_opens_a_postgres_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    schema = f"telar_test_{uuid.uuid4().hex[:12]}"
    postgres_admin(f'CREATE SCHEMA "{schema}"')
    url = f"{POSTGRES_URL}?options=-csearch_path%3D{schema}"
    try:
        with TelarSaver(url, max_history=3) as saver:
            assert saver.store.kind == "postgres" and saver.max_history == 3
            round_trip(saver)
        assert postgres_admin(f"SELECT count(*) FROM \"{schema}\".telar_threads")[0][0] == 1
    finally:
        postgres_admin(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    assert list(tmp_path.iterdir()) == []


@pytest.mark.servers("redis")
def test_a_redis_url_opens_a_redis_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with TelarSaver(REDIS_URL) as saver:
        assert saver.store.kind == "redis" and saver.store.url == REDIS_URL  # type: ignore[attr-defined]
        assert saver.get_tuple({"configurable": {"thread_id": f"absent-{uuid.uuid4().hex}"}}) is None
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_scheme_is_refused_with_the_supported_ones(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match="unknown scheme 's3'.*sqlite:///"):
        TelarSaver("s3://bucket/checkpoints")
    assert list(tmp_path.iterdir()) == []


def test_an_existing_file_is_refused_as_a_directory(tmp_path: Path) -> None:
    """Found: TelarSaver("a_file.py") failed later, on the first write, with NotADirectoryError."""
    program = tmp_path / "a_file.py"
    program.write_text("print('hello')\n")
    with pytest.raises(TelarError, match=r"a_file\.py is a file, not a directory of ours; .*sqlite:///"):  # as the CLI says
        TelarSaver(str(program))
    with pytest.raises(UsageError):
        TelarSaver(program)
    assert program.read_text() == "print('hello')\n"


def test_a_plain_path_is_still_a_directory(tmp_path: Path) -> None:
    saver = TelarSaver(tmp_path / "new")
    assert isinstance(saver.store, FileStore) and saver.store.directory == tmp_path / "new"
    round_trip(saver)
