"""Writers killed with SIGKILL at random moments lose no acknowledged checkpoint (see tests/crash_harness.py).

`TELAR_CRASH_KILLS` sets the kills per mode on each local store (file, sqlite; default 10),
`TELAR_CRASH_SERVER_KILLS` on postgres and redis (default: a fifth of that, at least 2).
`TELAR_CRASH_SEED` replays a run; `TELAR_RELIABILITY_LOG` names a file that gets one JSON
line of figures per run (used for RELIABILITY.md).
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from telar_checkpoint import CheckpointCodec, TelarSaver
from telar_checkpoint.history import History
from telar_checkpoint.stores import FileStore
from tests.crash_harness import CrashRun, Zygote, counter_graph, log_figures, zygote_fixture
from tests.stores import describe, make_store

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the crash harness forks writers")

KILLS = int(os.environ.get("TELAR_CRASH_KILLS", "10"))
SERVER_KILLS = int(os.environ.get("TELAR_CRASH_SERVER_KILLS", str(max(2, KILLS // 5))))
SEED = int(os.environ.get("TELAR_CRASH_SEED", str(random.randrange(1 << 30))))


zygote = zygote_fixture()  # forks every writer of this module


RUNS = [(kind, mode) for kind in ("file", "sqlite", "postgres", "redis") for mode in ("graph", "raw")]


@pytest.mark.parametrize(("kind", "mode"), [*RUNS, ("file", "raw-ascii")])
def test_killed_writers_lose_nothing(
    kind: str, mode: str, zygote: Zygote, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    store = make_store(kind, tmp_path, request)
    kills = KILLS if kind in ("file", "sqlite") else SERVER_KILLS
    report = CrashRun(describe(store), mode, seed=SEED).run(kills, zygote)
    log_figures("crash", SEED, store=kind, mode=mode, **vars(report))
    print(f"{kind}/{mode} seed={SEED}: {report}")
    assert report.kills == kills
    assert report.checkpoints > 0 or kills < 3


# --- torn tails, made on purpose: every cut of the last line is detected and dropped ---


def golden_history(tmp_path: Path) -> str:
    store = FileStore(tmp_path / "golden", fsync=False)
    graph = counter_graph().compile(checkpointer=TelarSaver(store))
    graph.invoke({"marks": []}, {"configurable": {"thread_id": "t"}})
    text = store.read("t")
    assert text is not None and text.endswith("\n")
    return text


def test_every_cut_of_the_last_append_is_a_torn_tail_that_is_dropped(tmp_path: Path) -> None:
    """A file cut anywhere inside its last line (as a crash mid-append leaves it) reads as the lines
    before, reports the torn tail, and the next write drops it and keeps everything before."""
    text = golden_history(tmp_path)
    lines = text.splitlines(keepends=True)
    before, last = "".join(lines[:-1]), lines[-1]
    codec = CheckpointCodec()
    expected = [r.id for r in codec.decode_history("t", before)]
    store = FileStore(tmp_path / "cut", fsync=False)
    saver = TelarSaver(store)
    graph = counter_graph().compile(checkpointer=saver)
    cuts = sorted({1, 2, len(last) // 2, len(last) - 2, len(last) - 1, *random.sample(range(1, len(last)), 10)})
    for cut in cuts:
        store.path("t").write_text(before + last[:cut], encoding="utf-8")
        history = History.parse("t", store.read("t"))
        assert history.torn == last[:cut]
        assert [r.id for r in codec.decode_history("t", store.read("t"))] == expected
        # the run resumes from the last whole checkpoint, and the torn tail is gone
        config = {"configurable": {"thread_id": "t"}}
        state = graph.get_state(config)
        assert state.config["configurable"]["checkpoint_id"] == expected[-1]
        graph.invoke(None if state.next else {"marks": []}, config)
        after = store.read("t")
        assert after is not None and after.endswith("\n")
        kept = History.parse("t", after)
        assert kept.torn is None
        for key, entry in History.parse("t", before).entries.items():  # rewritten, and nothing lost
            assert kept.entries[key].line.text == entry.line.text
            assert kept.entries[key].writes.items() >= entry.writes.items()
        ids = [r.id for r in codec.decode_history("t", after)]
        assert ids[: len(expected)] == expected and len(ids) > len(expected)
        values = graph.get_state(config).values
        assert values["total"] == values["count"] * (values["count"] + 1) // 2


def test_a_tear_inside_a_multibyte_character_is_a_torn_tail(tmp_path: Path) -> None:
    """The crash the harness found (bug, fixed in 0af9e55), made certain: a line cut between the bytes of "中"."""
    store = FileStore(tmp_path / "store", fsync=False)
    graph = counter_graph().compile(checkpointer=TelarSaver(store))
    config = {"configurable": {"thread_id": "t"}}
    graph.invoke({"marks": ["中文"]}, config)
    data = store.path("t").read_bytes()
    cut = data.rindex("中".encode()) + 1  # inside the character
    before = data[: data.rindex(b"\n", 0, cut) + 1]
    store.path("t").write_bytes(data[:cut])
    history = History.parse("t", store.read("t"))
    assert history.torn is not None
    assert history.entries.keys() == History.parse("t", before.decode()).entries.keys()
    resumed = TelarSaver(FileStore(tmp_path / "store", fsync=False))
    graph = counter_graph().compile(checkpointer=resumed)
    state = graph.get_state(config)
    graph.invoke(None if state.next else {"marks": []}, config)
    assert History.parse("t", store.read("t")).torn is None
    values = graph.get_state(config).values
    assert values["total"] == values["count"] * (values["count"] + 1) // 2
