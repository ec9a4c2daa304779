"""`stores.opening.open_store`, the one way to open a store: a directory that holds files not
ours is refused, naming them, before anything is written, by the saver, `from_conn_string`, the
server hook and the CLI alike (issue 52: the saver wrote its files beside them, while `migrate` and
`import` refused the same directory). An empty or missing directory, or one of ours, is opened."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from telar_checkpoint import TelarSaver
from telar_checkpoint.cli import main
from telar_checkpoint.errors import ArgumentTypeError, ForeignStoreError, NoStoreError, UsageError
from telar_checkpoint.server import checkpointer
from telar_checkpoint.stores import FileStore, MemoryStore, open_store
from telar_checkpoint.stores.opening import DEFAULT_DIRECTORY
from telar_checkpoint.stores.sqlite import SQLiteStore

CONFIG: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
METADATA: Any = {"source": "input", "step": 0, "parents": {}}


def listing(directory: Path) -> dict[str, bytes]:
    """Every file under `directory` and what it holds."""
    return {str(p.relative_to(directory)): p.read_bytes() if p.is_file() else b"" for p in sorted(directory.rglob("*"))}


def put_one(saver: TelarSaver) -> None:
    saver.put(CONFIG, empty_checkpoint(), METADATA, {})


@pytest.fixture
def notes(tmp_path: Path) -> Path:
    """A directory that holds only someone's notes."""
    directory = tmp_path / "project"
    directory.mkdir()
    (directory / "notes.txt").write_text("buy milk\n")
    return directory


def refusal(directory: Path) -> str:
    return f"{directory} holds no telar-checkpoint threads, only other files (notes.txt); is it the right directory?"


def test_the_saver_refuses_a_directory_of_other_files_and_writes_nothing(notes: Path) -> None:
    before = listing(notes)
    for given in (str(notes), notes):
        with pytest.raises(ForeignStoreError) as caught:
            TelarSaver(given)
        assert str(caught.value) == refusal(notes)
    with pytest.raises(ForeignStoreError, match="notes.txt"):
        with TelarSaver.from_conn_string(str(notes)):
            pass
    with pytest.raises(ForeignStoreError, match="notes.txt"):
        with TelarSaver.from_conn_string(f"file://{notes}"):
            pass
    assert listing(notes) == before


async def test_the_server_hook_refuses_it(notes: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TELAR_CHECKPOINT_URL", str(notes))
    monkeypatch.delenv("TELAR_CHECKPOINT_MAX_HISTORY", raising=False)
    before = listing(notes)
    with pytest.raises(ForeignStoreError, match="notes.txt"):
        async with checkpointer():
            pass
    assert listing(notes) == before


def test_the_cli_and_a_migration_target_refuse_it_alike(capsys: pytest.CaptureFixture[str], notes: Path, tmp_path: Path) -> None:
    source = tmp_path / "source"
    with TelarSaver(source) as saver:
        put_one(saver)
    exported = tmp_path / "t.jsonl"
    exported.write_text((source / "t.jsonl").read_text())
    before = listing(notes)
    expected = f"telar-checkpoint: error: {refusal(notes)}\n"
    migrate = ["migrate", "--from", str(source), "--to", str(notes)]
    for argv in (["threads", str(notes)], ["ui", str(notes)], ["demo", str(notes)], ["import", str(notes), "t", str(exported)],
                 migrate, [*migrate, "--dry-run"]):
        code = main(argv)
        out, err = capsys.readouterr()
        assert (code, out, err) == (2, "", expected), argv
    assert listing(notes) == before


def test_an_empty_or_missing_directory_or_one_of_ours_is_opened(tmp_path: Path) -> None:
    empty, missing = tmp_path / "empty", tmp_path / "missing" / "deeper"
    empty.mkdir()
    for directory in (empty, missing):
        with TelarSaver(directory) as saver:
            put_one(saver)
        assert (directory / "t.jsonl").is_file()
    (empty / "notes.txt").write_text("mine too\n")  # a directory of ours may hold other files as well
    with TelarSaver(str(empty)) as saver:
        assert saver.get_tuple(CONFIG) is not None
    with pytest.raises(NoStoreError, match="does not exist"):
        open_store(tmp_path / "nowhere", create=False)
    assert not (tmp_path / "nowhere").exists()


def test_the_default_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    opened = open_store()
    assert isinstance(opened.store, FileStore) and opened.store.directory == Path(DEFAULT_DIRECTORY) and opened.owned
    assert (tmp_path / DEFAULT_DIRECTORY).is_dir()


def test_it_says_who_closes_the_store(tmp_path: Path) -> None:
    own = MemoryStore()
    assert open_store(own) == (own, False)
    for target in ("memory://", f"sqlite:///{tmp_path / 'x.db'}", str(tmp_path / "d"), tmp_path / "e"):
        store, owned = open_store(target)
        assert owned, target
        store.close()
    assert isinstance(open_store(f"sqlite:///{tmp_path / 'x.db'}").store, SQLiteStore)


def test_what_it_cannot_open_is_refused_in_our_words(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"store options \['fsync'\] are for a store opened from a path or URL"):
        open_store(MemoryStore(), fsync=False)
    with pytest.raises(UsageError, match=r"\['share_database'\]"):
        TelarSaver(MemoryStore(), share_database=True)
    with pytest.raises(ArgumentTypeError, match="psycopg connection or pool or redis-py client, not int"):
        open_store(3)
    with pytest.raises(UsageError, match="bad option"):
        open_store(tmp_path, colour="red")
    assert not os.listdir(tmp_path)
