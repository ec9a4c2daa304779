"""The history rules alone, on the pure codec, under random sequences of operations.

Hypothesis plays puts (loop, input, fork, update, a resume from an old checkpoint), pending
writes and subgraphs (persistent ones, and calls that run under the root's head) at random
depths. After every operation the stored history must be:
- bounded: at most N checkpoints per namespace, and namespaces only of the root, the
  persistent subgraphs and the calls still running under the root's head;
- the path: once a run moves on, every checkpoint of its namespace is on its head's path;
- never short of live state: the latest checkpoint of every live namespace is kept.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from telar_checkpoint import CheckpointCodec, CheckpointRecord
from telar_checkpoint.history import History

codec = CheckpointCodec()
PERSISTENT = ("p", "q")

operation = st.one_of(
    st.tuples(st.just("loop"), st.just(0)),
    st.tuples(st.just("input"), st.just(0)),
    st.tuples(st.just("fork"), st.integers(0, 30)),  # update_state / replay on an older checkpoint
    st.tuples(st.just("update"), st.integers(0, 30)),
    st.tuples(st.just("resume_old"), st.integers(0, 30)),  # a loop put whose parent is an older checkpoint
    st.tuples(st.just("writes"), st.integers(0, 3)),
    st.tuples(st.just("persistent"), st.integers(0, 1)),  # a persistent subgraph runs one step
    st.tuples(st.just("call"), st.integers(1, 3)),  # a subgraph call of n steps under the root's head
)


class Thread:
    """Plays operations on the codec and keeps what the rules must guarantee."""

    def __init__(self, max_history: int | None) -> None:
        self.max_history = max_history
        self.text: str | None = None
        self.n = 0
        self.root_ids: list[str] = []  # every root id ever put, in order
        self.latest: dict[str, str] = {}  # namespace -> id of its latest put
        self.calls = 0

    def new_id(self) -> str:
        self.n += 1
        return f"{self.n:08d}"

    def put(self, ns: str, source: str, parent: str | None, parents: dict[str, str] | None = None) -> str:
        cid = self.new_id()
        step = int(parent) if parent else -1
        metadata = {"source": source, "step": step, "parents": parents or {}}
        checkpoint = {
            "v": 4, "id": cid, "ts": "2026-01-01T00:00:00+00:00", "channel_values": {"log": [cid], "n": self.n},
            "channel_versions": {"log": self.n, "n": self.n}, "versions_seen": {}, "updated_channels": None,
        }
        self.text = codec.append(self.text, CheckpointRecord(checkpoint, metadata, ns, parent), self.max_history, thread_id="t")
        self.latest[ns] = cid
        if not ns:
            self.root_ids.append(cid)
        return cid

    def history(self) -> History:
        return History.parse("t", self.text)

    def head(self, ns: str = "") -> str | None:
        entry = self.history().latest(ns)
        return entry.line.id if entry else None

    def older(self, pick: int) -> str | None:
        held = [e.line.id for e in self.history().in_ns("")]
        return held[pick % len(held)] if held else None

    def apply(self, op: str, arg: int) -> bool:
        """Play one operation; True when it moved the root on from a stored parent."""
        head = self.head()
        if op in ("loop", "input"):
            self.put("", op, head)
            return head is not None
        if op in ("fork", "update"):
            self.put("", op, self.older(arg))
            return False
        if op == "resume_old":
            parent = self.older(arg)
            self.put("", "loop", parent)
            return parent is not None
        if op == "writes":
            if head is not None:
                self.text = codec.add_writes(self.text, "", head, f"task{arg}", [(0, "log", [arg])], thread_id="t")
            return False
        if op == "persistent":
            ns = PERSISTENT[arg]
            self.put(ns, "loop", self.head(ns), {"": head} if head else {})
            return False
        if head is not None:  # a call of `arg` steps under the root's head
            self.calls += 1
            ns, parent = f"child:{self.calls}", None
            for _ in range(arg):
                parent = self.put(ns, "loop" if parent else "input", parent, {"": head})
        return False

    def check(self, moved_on: bool) -> None:
        history = self.history()
        root_head = history.latest("")
        by_ns: dict[str, list[str]] = {}
        for ns, cid in history.entries:
            by_ns.setdefault(ns, []).append(cid)
        for ns, ids in by_ns.items():
            if self.max_history is not None:
                assert len(ids) <= self.max_history, (ns, ids)
            if ":" in ns:  # a call: only until the root stores a checkpoint after it
                assert root_head is not None and history.latest(ns).line.id > root_head.line.id, ns
            else:
                assert ns in ("",) + PERSISTENT
        # The latest checkpoint of every live namespace is kept.
        for ns in ("",) + PERSISTENT:
            if ns in self.latest:
                assert (ns, self.latest[ns]) in history.entries, (ns, self.latest[ns])
        if moved_on:  # the root's history is the path to its head
            path = history.parent_chain("", root_head.line.id)
            assert sorted(by_ns[""]) == sorted(path), (by_ns[""], path)
        # Subgraph lines (version 2, or 3 with a namespace) only for persistent subgraphs and calls under the head.
        for line in (self.text or "").split("\n")[:-1]:
            if '"ns":' in line:
                assert '"ns":"p"' in line or '"ns":"q"' in line or any(f'"ns":"{ns}"' in line for ns in by_ns if ":" in ns)


@settings(max_examples=150, deadline=None)
@given(st.lists(operation, min_size=1, max_size=40), st.sampled_from([None, 1, 2, 3, 5]))
def test_the_history_rules_hold_after_every_operation(operations, max_history) -> None:
    thread = Thread(max_history)
    for op, arg in operations:
        moved_on = thread.apply(op, arg)
        thread.check(moved_on)
