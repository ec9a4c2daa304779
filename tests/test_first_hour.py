"""The first hour of a new user: a mistake of the public API is answered in our words, with what to do
(issue "The first hour of a new user", the first items)."""

from __future__ import annotations

import asyncio

import pytest

from telar_checkpoint import ArgumentTypeError, MemoryStore, TelarError, TelarSaver, UsageError
from telar_checkpoint.errors import SaverContextError


@pytest.mark.parametrize(
    "args, kwargs, message",
    [
        ((5,), {}, "store must be a Store, a directory path or a store URL .* not int"),
        ((b"dir",), {}, "store must be a Store, a directory path or a store URL .* not bytes"),
        ((MemoryStore(),), {"serde": "json"}, "serde must be a LangGraph serializer .* not str"),
        ((MemoryStore(),), {"keep_finished_subgraphs": "yes"}, "keep_finished_subgraphs must be True or False, not str"),
    ],
)
def test_a_wrong_type_is_our_error_and_a_type_error(tmp_path, monkeypatch, args, kwargs, message) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ArgumentTypeError, match=message) as raised:
        TelarSaver(*args, **kwargs)
    assert isinstance(raised.value, TypeError) and isinstance(raised.value, TelarError)
    assert list(tmp_path.iterdir()) == [], "nothing is created for a refused saver"


def test_a_wrong_max_history_is_our_error() -> None:
    with pytest.raises(UsageError, match="max_history must be a positive integer or None"):
        TelarSaver(MemoryStore(), max_history=0)


def test_from_conn_string_without_with_says_how_to_use_it() -> None:
    context = TelarSaver.from_conn_string("memory://")
    with pytest.raises(SaverContextError, match=r"use `with TelarSaver.from_conn_string\(url\) as saver:`"):
        context.get_tuple({"configurable": {"thread_id": "t"}})
    assert not hasattr(context, "put") and isinstance(SaverContextError("x"), TelarError)
    with context as saver:
        assert saver.get_tuple({"configurable": {"thread_id": "t"}}) is None

    async def used_async() -> None:
        async with TelarSaver.from_conn_string("memory://") as saver:
            assert await saver.aget_tuple({"configurable": {"thread_id": "t"}}) is None

    asyncio.run(used_async())


def test_a_dry_run_migration_names_the_store_it_would_write(tmp_path, capsys) -> None:
    from telar_checkpoint import FileStore
    from telar_checkpoint.cli import main

    with TelarSaver(FileStore(tmp_path / "from")) as saver:
        saver.put({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, _checkpoint(), {"source": "input", "step": -1}, {})
    for target, kind in ((tmp_path / "new-dir", "file"), (f"sqlite:///{tmp_path / 'new.db'}", "sqlite")):
        assert main(["migrate", "--from", str(tmp_path / "from"), "--to", str(target), "--dry-run"]) == 0
        out = capsys.readouterr().out
        assert f"to TelarSaver ({kind} store)" in out and "memory store" not in out
    assert not (tmp_path / "new-dir").exists() and not (tmp_path / "new.db").exists()


def test_a_repair_backup_is_readable_by_its_owner_only(tmp_path) -> None:
    import stat

    from telar_checkpoint import FileStore, repair

    store = FileStore(tmp_path)
    with TelarSaver(store) as saver:
        saver.put({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, _checkpoint(), {"source": "input", "step": -1}, {})
    store.write("t", (store.read("t") or "") + "not json\n")
    done = repair(store, "t")
    assert done.backup is not None
    assert stat.S_IMODE((tmp_path / "t.jsonl").stat().st_mode) == 0o600
    assert stat.S_IMODE(__import__("os").stat(done.backup).st_mode) == 0o600


def _checkpoint() -> dict:
    from langgraph.checkpoint.base import empty_checkpoint

    return empty_checkpoint()  # type: ignore[return-value]
