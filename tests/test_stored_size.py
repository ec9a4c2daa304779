"""A thread's size in bytes is what its store holds (`stores.common.stored_size`), lone surrogates
included: the CLI, the viewer and inspection all count it there (issue 52: inspection counted a
lone surrogate as one byte, while the stores write it as three)."""

from __future__ import annotations

import os
from pathlib import Path

from telar_checkpoint.inspection import summarize_thread
from telar_checkpoint.stores import FileStore
from telar_checkpoint.stores.common import stored_size
from telar_checkpoint.stores.sqlite import SQLiteStore
from telar_checkpoint.ui.views import thread_row

DAMAGED = "not a history: \udc80\udcff é\n"  # as `import` reads a file of bytes that are not UTF-8


def test_a_lone_surrogate_takes_the_three_bytes_a_store_writes(tmp_path: Path) -> None:
    assert stored_size("a\udc80") == 4 and stored_size("é") == 2 and stored_size("") == 0
    store = FileStore(tmp_path / "files")
    store.write("t", DAMAGED)
    text = store.read("t")
    assert text == DAMAGED
    on_disk = os.path.getsize(store.path("t"))
    assert stored_size(text) == on_disk == len(DAMAGED) + 2 * 2 + 1
    assert thread_row("t", text).size == on_disk  # the viewer's row of a damaged thread
    store.close()
    with SQLiteStore(tmp_path / "x.db") as database:
        database.write("t", DAMAGED)
        assert database.read("t") == DAMAGED


def test_a_history_is_counted_the_same_way(tmp_path: Path) -> None:
    from langgraph.checkpoint.base import empty_checkpoint

    from telar_checkpoint import TelarSaver

    store = FileStore(tmp_path)
    TelarSaver(store).put({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, empty_checkpoint(),
                          {"source": "input", "step": 0, "parents": {}, "note": "é"}, {})
    text = store.read("t")
    assert text is not None
    assert summarize_thread("t", text).size == thread_row("t", text).size == os.path.getsize(store.path("t"))
    store.close()
