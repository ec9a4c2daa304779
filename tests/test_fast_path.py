"""Every fast path gives exactly the string the codec's `append` gives for the same operations.

Hypothesis drives random sequences of puts (forks, updates, subgraph namespaces, growing
and changing lists) and writes through TelarSaver, whose versioned fast path appends to a
cached history, and through the pure codec on plain strings; the stored strings must match.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from telar_checkpoint import CheckpointCodec, CheckpointRecord, FileStore, MemoryStore, TelarSaver
from telar_checkpoint.history import History

SOURCES = ["input", "loop", "loop", "loop", "fork", "update"]

put_op = st.tuples(
    st.just("put"),
    st.sampled_from(["latest", "older", "none", "same"]),
    st.sampled_from(SOURCES),
    st.sampled_from(["", "", "child:a", "child:b"]),
    st.sampled_from(["grow", "grow", "change", "keep"]),
)
writes_op = st.tuples(
    st.just("writes"),
    st.sampled_from(["latest", "older"]),
    st.integers(0, 3),  # task
    st.sampled_from(["ch", "__error__", "__interrupt__"]),
    st.integers(0, 9),
)
operations = st.lists(st.one_of(put_op, put_op, writes_op), min_size=1, max_size=40)


class Model:
    """Plays operations on a saver and on the codec alone, keeping them in step."""

    def __init__(self, saver: TelarSaver) -> None:
        self.saver, self.codec, self.text = saver, CheckpointCodec(), None
        self.n, self.ids, self.msgs = 0, {"": [], "child:a": [], "child:b": []}, []

    def put(self, parent_choice: str, source: str, ns: str, change: str) -> None:
        ids = self.ids[ns]
        if parent_choice == "same" and ids:
            cid = ids[-1]
            parent = None
        else:
            self.n += 1
            cid = f"{self.n:08d}"
            parent = {"latest": ids[-1:], "older": ids[:1]}.get(parent_choice, [])
            parent = parent[0] if parent else None
        if change == "grow":
            self.msgs = self.msgs + [f"m{self.n}"]
        elif change == "change":
            self.msgs = [f"x{self.n}"] + self.msgs[1:]
        step = len(ids) - 1
        metadata = {"source": source, "step": step, "parents": {"": self.ids[""][-1]} if ns and self.ids[""] else {}}
        checkpoint = {"v": 4, "id": cid, "ts": "2026-01-01T00:00:00+00:00", "channel_values": {"msgs": list(self.msgs)},
                      "channel_versions": {"msgs": self.n}, "versions_seen": {}, "updated_channels": None}  # fmt: skip
        config = {"configurable": {"thread_id": "t", "checkpoint_ns": ns}}
        if parent:
            config["configurable"]["checkpoint_id"] = parent
        self.saver.put(config, checkpoint, metadata, {})
        record = CheckpointRecord(checkpoint, metadata, ns, parent)
        self.text = self.codec.append(self.text, record, self.saver.max_history)
        if cid not in ids:
            ids.append(cid)

    def writes(self, target: str, task: int, channel: str, value: int) -> None:
        ids = self.ids[""]
        if not ids:
            return
        cid = ids[-1] if target == "latest" else ids[0]
        config = {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": cid}}
        self.saver.put_writes(config, [(channel, value)], f"task-{task}", f"path-{task}")
        idx = {"__error__": -1, "__interrupt__": -3}.get(channel, 0)
        self.text = self.codec.add_writes(self.text, "", cid, f"task-{task}", [(idx, channel, value)], f"path-{task}")


def play(saver: TelarSaver, ops: list) -> None:
    model = Model(saver)
    for op in ops:
        getattr(model, op[0])(*op[1:])
        if model.text is not None:
            assert saver.store.read("t") == model.text
            # What the writer kept, the string read afresh and its rewrite all say the same
            # (trimming appends floors that must cut on read exactly what the writer cut).
            kept = saver._writer.histories.latest("t")
            fresh = History.parse("t", model.text)
            expected = _summary(fresh)
            assert _summary(History.parse("t", History.parse("t", model.text).render())) == expected
            if kept is not None:
                assert _summary(kept.history) == expected
            saver.get_tuple({"configurable": {"thread_id": "t"}})  # reads refill the cache


def _summary(history: History) -> tuple:
    codec = CheckpointCodec()
    entries = [(key, codec.record(entry)) for key, entry in history.entries.items()]
    dropped = {ns: (d.floor, d.replaced, d.deleted) for ns, d in history.dropped.items() if d.floor or d.replaced or d.deleted}
    residue = set(history.crash_residue())  # writes no checkpoint will take: a rewrite drops them
    return entries, dropped, {key: writes for key, writes in history.orphans.items() if key not in residue}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=operations, max_history=st.sampled_from([None, None, 2, 5]))
def test_memory_store_fast_path_matches_the_codec(ops, max_history) -> None:
    play(TelarSaver(MemoryStore(), max_history=max_history), ops)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=operations, max_history=st.sampled_from([None, 3]))
def test_file_store_fast_path_matches_the_codec(tmp_path_factory, ops, max_history) -> None:
    play(TelarSaver(FileStore(tmp_path_factory.mktemp("fast"), fsync=False), max_history=max_history), ops)


def test_the_fast_path_is_taken() -> None:
    """After a first read, puts append without a whole update."""
    store = MemoryStore()
    saver = TelarSaver(store)
    calls = []
    update = store.update_versioned
    store.update_versioned = lambda key, change: calls.append(key) or update(key, change)  # type: ignore[method-assign]
    Model(saver).put("none", "input", "", "grow")
    model = Model(saver)
    model.n = 1
    model.ids[""] = ["00000001"]
    for _ in range(5):
        model.put("latest", "loop", "", "grow")
    assert calls == ["t"], "only the first put of the thread updates the whole value"


def test_the_cache_of_histories_is_bounded_by_threads_and_by_characters() -> None:
    """`Histories` keeps the threads used last, forgetting the least recently used first when it
    holds more threads than `size`, or more characters of histories than `chars`."""
    from telar_checkpoint.writing import Histories

    checkpoint = {"v": 4, "id": "1", "ts": "2026-01-01T00:00:00+00:00", "channel_values": {"msgs": ["m"]},
                  "channel_versions": {"msgs": 1}, "versions_seen": {}, "updated_channels": None}  # fmt: skip
    line = CheckpointCodec().append(None, CheckpointRecord(checkpoint, {"source": "input", "step": -1, "parents": {}}, "", None))
    by_threads = Histories(size=3, chars=1 << 30)
    for i in range(5):
        by_threads.parse(f"t{i}", line, i)
    assert [t for t in (f"t{i}" for i in range(5)) if by_threads.latest(t) is not None] == ["t2", "t3", "t4"]
    by_threads.latest("t2")  # used: t3 is now the least recently used
    by_threads.parse("t5", line, 5)
    assert by_threads.latest("t3") is None and by_threads.latest("t2") is not None

    by_chars = Histories(size=100, chars=3 * len(line))
    for i in range(5):
        by_chars.parse(f"t{i}", line, i)
    assert [t for t in (f"t{i}" for i in range(5)) if by_chars.latest(t) is not None] == ["t2", "t3", "t4"]
    by_chars.parse("big", line * 10, 9)  # more than the bound alone: kept (the newest is never forgotten), and alone
    assert [t for t in ["t2", "t3", "t4", "big"] if by_chars.latest(t) is not None] == ["big"]
