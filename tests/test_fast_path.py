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
            kept = saver._records.latest("t")
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


def test_the_records_of_threads_are_bounded_by_threads_and_by_characters() -> None:
    """`ThreadRecords` keeps the threads used last, forgetting the least recently used first when
    it holds more threads than `threads`, or more characters than `chars`."""
    from telar_checkpoint.threads import ThreadRecords

    line = _one_line()
    by_threads = ThreadRecords(threads=3, chars=1 << 30)
    for i in range(5):
        by_threads.parse(f"t{i}", line, i)
    assert [t for t in (f"t{i}" for i in range(5)) if by_threads.latest(t) is not None] == ["t2", "t3", "t4"]
    by_threads.latest("t2")  # used: t3 is now the least recently used
    by_threads.parse("t5", line, 5)
    assert by_threads.latest("t3") is None and by_threads.latest("t2") is not None

    by_chars = ThreadRecords(threads=100, chars=3 * len(line))
    threads = [f"t{i}" for i in range(5)]
    for i, thread_id in enumerate(threads):
        by_chars.parse(thread_id, line, i)
    assert by_chars._chars <= by_chars.chars
    with_text = [t for t in threads if by_chars.latest(t) is not None]  # the texts go least recently used first
    assert with_text == threads[len(threads) - len(with_text):] and "t4" in with_text and len(with_text) < 5
    by_chars.parse("big", line * 10, 9)  # more than the bound alone: kept (the newest is never forgotten), and alone
    assert [t for t in ["t2", "t3", "t4", "big"] if by_chars.latest(t) is not None] == ["big"]


def test_the_records_keep_parsed_histories_for_the_threads_used_last_and_text_for_the_others() -> None:
    """Beyond `parsed_lines` lines of parsed histories, the least recently used threads keep their
    text only (what the garbage collector does not walk), and are parsed again from it, without a
    read of the store, when next used; what else is known of them stays."""
    from telar_checkpoint.threads import ThreadRecords

    line = _one_line()
    records = ThreadRecords(parsed_lines=4)  # a history of one line counts two
    for i in range(4):
        records.parse(f"t{i}", line, i)
        records.add_terms(f"t{i}", {f"run:{i}"})
    parsed = [t for t in (f"t{i}" for i in range(4)) if records._records[t].kept.history is not None]  # type: ignore[union-attr]
    assert parsed == ["t2", "t3"]
    assert records.get("t0", 0) is not None and records._records["t0"].kept.history is not None  # type: ignore[union-attr]
    assert records.terms("t1") == ("run:1",) and records._records["t1"].kept.text == line  # type: ignore[union-attr]
    records.forget("t1")
    assert records.terms("t1") == () and records.latest("t1") is None


def test_a_thread_idle_for_a_second_keeps_its_text_only() -> None:
    """Parsed histories are kept for the threads in use: one not used for `parsed_seconds` gives
    way to its text (and its latest checkpoint alone) as soon as another is kept."""
    from telar_checkpoint.threads import ThreadRecords

    now = [0.0]
    records = ThreadRecords(clock=lambda: now[0])
    line = _one_line()
    for i in range(3):
        records.parse(f"t{i}", line, i)
    now[0] += 0.5
    assert records.get("t1", 1) is not None  # used: its clock starts again
    now[0] += 0.7
    records.parse("t3", line, 3)
    parsed = {t for t, r in records._records.items() if r.kept is not None and r.kept.history is not None}
    assert parsed == {"t1", "t3"}
    assert records._records["t0"].kept.text == line and records._records["t0"].kept.latest  # type: ignore[union-attr]
    assert records.latest("t0") is not None, "parsed again from its text when next written"


def _one_line() -> str:
    checkpoint = {"v": 4, "id": "1", "ts": "2026-01-01T00:00:00+00:00", "channel_values": {"msgs": ["m"]},
                  "channel_versions": {"msgs": 1}, "versions_seen": {}, "updated_channels": None}  # fmt: skip
    return CheckpointCodec().append(None, CheckpointRecord(checkpoint, {"source": "input", "step": -1, "parents": {}}, "", None))


def test_a_thread_kept_without_its_history_reads_as_a_thread_read_afresh() -> None:
    """Threads pushed out of the parsed form (and then out of the text form) read the same, in
    every LangGraph read, as the same threads read afresh from the store: the latest checkpoint
    of each from `History.latest_alone` (with a paused run's interrupt and pending writes, and
    a thread's own time-to-live), and everything else from its text or from the store."""
    from langgraph.types import Command

    from telar_checkpoint.stores.memory import MemoryStore
    from telar_checkpoint.threads import ThreadRecords
    from tests.graphs import multi_step, nested_subgraphs, with_interrupt

    store = MemoryStore()
    saver = TelarSaver(store, ttl={})
    saver._records.parsed_lines = 1  # (the instance the writer and the index share: bounds of a few threads)
    saver._records.chars = 40_000
    graphs = {"steps": multi_step(), "paused": with_interrupt(), "subgraph": nested_subgraphs(1)}
    for name, builder in graphs.items():
        graph = builder.compile(checkpointer=saver)
        for i in range(3):
            thread = {"configurable": {"thread_id": f"{name}-{i}"}}
            graph.invoke({"log": [], "count": 0} if name == "steps" else {"request": f"r{i}", "log": []}, thread)
            if name == "paused" and i == 2:
                graph.invoke(Command(resume="yes"), thread)
    saver.set_thread_ttl("steps-0", 600)
    saver._records.chars = saver._records._chars // 2  # half the texts give way to their latest checkpoint alone
    saver._records.keep("", None, History(""), "")  # (the bounds apply as a thread is kept)
    forms = {(r.kept is not None and r.kept.history is not None, r.kept is not None and r.kept.text is not None)
             for r in saver._records._records.values()}  # fmt: skip
    assert (False, True) in forms and (False, False) in forms, forms  # some kept as text, some as their latest alone
    assert isinstance(saver._records, ThreadRecords)
    afresh = TelarSaver(store, ttl={})
    for name, builder in graphs.items():
        ours, theirs = builder.compile(checkpointer=saver), builder.compile(checkpointer=afresh)
        for i in range(3):
            thread = {"configurable": {"thread_id": f"{name}-{i}"}}
            assert saver.get_tuple(thread) == afresh.get_tuple(thread)
            assert ours.get_state(thread, subgraphs=True) == theirs.get_state(thread, subgraphs=True)
            assert list(saver.list(thread)) == list(afresh.list(thread))
