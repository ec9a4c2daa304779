"""The history rules as a table: a history, an operation, the edit and the history it gives.

Pure values in and out (`telar_checkpoint.rules`), no store and no graph: each row says what
an operation does to the stored string, and that the history it was given is left as it was.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from telar_checkpoint.compaction import Append, Rewrite, edited
from telar_checkpoint.errors import ThreadDeletedError
from telar_checkpoint.format import SAME, CheckpointLine, DroppedLine, WritesLine, write_checkpoint, write_dropped, write_writes
from telar_checkpoint.history import History
from telar_checkpoint.rules import DeleteThread, KeepLatest, Operation, Put, Remove, Trim, apply


def line(n: int, parent: int | None, source: str = "loop", ns: str = "") -> CheckpointLine:
    """Checkpoint `n` (id ``0000000n``, step n) of namespace `ns`, child of `parent`."""
    made = CheckpointLine(
        ns=ns, id=f"{n:08}", parent=None if parent is None else f"{parent:08}",
        metadata={"source": source, "step": n, "parents": {}}, checkpoint={"v": 4, "ts": f"2026-01-01T00:00:{n:02}"},
        extra={}, values={"count": n},
    )
    made.text = write_checkpoint(made)
    return made


def put(n: int, parent: int | None, source: str = "loop", ns: str = "", writes: tuple[WritesLine, ...] = (),
        max_history: int | None = None) -> Put:
    """The put of checkpoint `n` as `line` writes it, with these writes and history depth."""
    made = line(n, parent, source, ns)
    return Put(made.ns, made.id, made.parent, made.metadata, made.checkpoint, made.extra, dict(made.values),
               dict(made.values), writes, max_history)


def text_of(*lines: CheckpointLine) -> str:
    return "".join(each.text + "\n" for each in lines)


CHAIN = text_of(line(1, None, "input"), line(2, 1), line(3, 2))  # three checkpoints, each the parent of the next
FORKED = CHAIN + text_of(line(4, 1, "fork"))  # and a fork from the first
TRIMMED = write_dropped(DroppedLine("", "00000002")) + "\n" + text_of(line(2, 1), line(3, 2))  # checkpoint 1 trimmed
TASK_WRITES = WritesLine("", "00000004", "task", "", [(0, "count", 9)])  # one task's writes, with the put of checkpoint 4
WRITES = WritesLine("", "00000003", "task", "", [(0, "count", 7)])  # pending writes are their own operation
DELETE = DeleteThread("00000003", "2026-12-07T00:00:00+00:00")  # the thread deleted once checkpoint 3 was made
DELETED = write_dropped(DroppedLine("", None, deleted_before="00000003", deleted_at=DELETE.at)) + "\n"  # its record


@dataclass(frozen=True)
class Row:
    name: str
    stored: str
    operation: Operation
    edit: type  # Append or Rewrite
    ids: list[str]  # the checkpoints of the new history, in stored order
    lines_added: int = 0  # for an Append: how many lines


def ids(*numbers: int) -> list[str]:
    return [f"{n:08}" for n in numbers]


ROWS = [
    Row("a put that moves on from the head appends its line", CHAIN, put(4, 3), Append, ids(1, 2, 3, 4), 1),
    Row("a put into an empty history appends", "", put(1, None, "input"), Append, ids(1), 1),
    Row("a put with writes appends them after it", CHAIN, put(4, 3, writes=(TASK_WRITES,)), Append, ids(1, 2, 3, 4), 2),
    Row("a fork from the past is kept beside the path", CHAIN, put(4, 1, "fork"), Append, ids(1, 2, 3, 4), 1),
    Row("moving on from a fork replaces what came after its parent", FORKED, put(5, 4), Rewrite, ids(1, 4, 5)),
    Row("the same checkpoint again is updated in place", CHAIN, put(3, 2), Rewrite, ids(1, 2, 3)),
    Row("max_history cuts the oldest with a floor line appended", CHAIN, put(4, 3, max_history=2), Append, ids(3, 4), 2),
    Row("writes for a stored checkpoint append one line", CHAIN, WRITES, Append, ids(1, 2, 3), 1),
    Row("writes already stored change nothing", CHAIN + write_writes(WritesLine("", "00000003", "task", "", [(0, "count", 7)])) + "\n",
        WRITES, Append, ids(1, 2, 3), 0),
    Row("writes for a trimmed checkpoint are not stored", TRIMMED, WritesLine("", "00000001", "late", "", [(0, "count", 1)]),
        Append, ids(2, 3), 0),
    Row("a trim that cuts rewrites", CHAIN, Trim(1), Rewrite, ids(3)),
    Row("a trim with nothing to cut changes nothing", CHAIN, Trim(5), Append, ids(1, 2, 3), 0),
    Row("removing checkpoints rewrites without them", CHAIN, Remove(frozenset({("", ids(2)[0])})), Rewrite, ids(1, 3)),
    Row("removing nothing changes nothing", CHAIN, Remove(frozenset()), Append, ids(1, 2, 3), 0),
    Row("keep latest keeps the head of each namespace", CHAIN + text_of(line(5, None, "loop", "child")), KeepLatest(), Rewrite, ids(3, 5)),
    Row("keep latest of one checkpoint changes nothing", text_of(line(1, None, "input")), KeepLatest(), Append, ids(1), 0),
    Row("deleting a thread rewrites it to its record", CHAIN, DELETE, Rewrite, []),
    Row("a put without a parent starts a deleted thread again", DELETED, put(4, None, "input"), Append, ids(4), 1),
    Row("the new thread's runs go on after a deletion", DELETED + text_of(line(4, None, "input")), put(5, 4), Append, ids(4, 5), 1),
    Row("a torn last line is dropped by a rewrite", CHAIN + '{"format":1,"id":"000', put(4, 3), Rewrite, ids(1, 2, 3, 4)),
]


@pytest.mark.parametrize("row", ROWS, ids=[row.name for row in ROWS])
def test_rule(row: Row) -> None:
    history = History.parse("t", row.stored)
    before = history.render() if history.torn is None else None
    new, edit = apply(history, row.operation)
    assert type(edit) is row.edit
    assert [cid for _ns, cid in new.entries] == row.ids
    if isinstance(edit, Append):
        assert len(edit.lines) == row.lines_added
    text = edited(row.stored, edit)
    assert [cid for _ns, cid in History.parse("t", text).entries] == row.ids, "the edited string reads as the new history"
    if before is not None:
        assert History.parse("t", row.stored).render() == before and history.render() == before, "the history given is left as it was"


def test_an_edit_applied_to_the_string_gives_the_new_historys_text() -> None:
    history = History.parse("t", CHAIN)
    new, edit = apply(history, put(4, 3, writes=(TASK_WRITES,)))
    assert isinstance(edit, Append) and edited(CHAIN, edit) == new.render() == CHAIN + edit.text


def test_a_failing_operation_leaves_the_history_as_it_was() -> None:
    history = History.parse("t", CHAIN)
    with pytest.raises(Exception, match="own ancestor"):
        apply(history, put(2, 2))
    assert history.render() == CHAIN and [cid for _ns, cid in history.entries] == ids(1, 2, 3)


def test_a_copy_shares_no_container_with_its_history() -> None:
    """`clone` copies every container field (a new one, added later, included), so a rule that
    changes the copy never reaches the history readers hold."""
    history = History.parse("t", FORKED + write_writes(WritesLine("", "00000009", "early", "", [(0, "count", 1)])) + "\n")
    history, _ = apply(history, Trim(2))
    copy = history.clone()
    shared = [name for name, value in vars(history).items()
              if isinstance(value, (dict, set, list)) or hasattr(value, "copy") and not isinstance(value, (str, bytes, tuple, frozenset))
              if getattr(copy, name) is value]
    assert shared == []
    assert vars(copy).keys() == vars(history).keys()


# --- the line built against its parent, and the rules beside it --------------------------


def chat_put(n: int, parent: int | None, messages: list, versions: dict, encoded: tuple[str, ...], ns: str = "",
             parents: dict | None = None, source: str = "loop") -> Put:
    """Checkpoint `n` holding a list channel `messages` and a dict channel `profile`; `encoded`:
    the channels LangGraph changed (encoded when given), the others as given."""
    values = {"messages": messages, "profile": {"name": "Ada"}}
    checkpoint = {"v": 4, "ts": f"2026-01-01T00:00:{n:02}", "channel_versions": versions}
    return Put(ns, f"{n:08}", None if parent is None else f"{parent:08}", {"source": source, "step": n, "parents": parents or {}},
               checkpoint, {}, {ch: values[ch] for ch in encoded}, values, encode=lambda value: value)


LINE_ROWS = [
    # (name, the put after a first checkpoint holding ["a"] and the profile, what the line stores)
    ("a list that only grew is stored as what it added",
     chat_put(2, 1, ["a", "b"], {"messages": 2, "profile": 1}, ("messages",)),
     {"appended": {"messages": ["b"]}, "values": {"profile": SAME}}),
    ("a list changed in place is stored whole",
     chat_put(2, 1, ["z", "b"], {"messages": 2, "profile": 1}, ("messages",)),
     {"appended": {}, "values": {"messages": ["z", "b"], "profile": SAME}}),
    ("a channel whose version is its parent's is stored by reference, not encoded again",
     chat_put(2, 1, ["a"], {"messages": 1, "profile": 1}, ()),
     {"appended": {"messages": []}, "values": {"profile": SAME}}),
    ("a channel whose version moved is encoded, even when LangGraph did not name it",
     chat_put(2, 1, ["a"], {"messages": 1, "profile": 2}, ()),
     {"appended": {"messages": []}, "values": {"profile": {"name": "Ada"}}}),
    ("without its parent stored, every value is written whole",
     chat_put(2, 9, ["a", "b"], {"messages": 2, "profile": 1}, ("messages",)),
     {"appended": {}, "values": {"messages": ["a", "b"], "profile": {"name": "Ada"}}}),
]


@pytest.mark.parametrize("row", LINE_ROWS, ids=[row[0] for row in LINE_ROWS])
def test_the_line_of_a_put_is_built_against_its_parent(row) -> None:
    _name, operation, stored = row
    first = chat_put(1, None, ["a"], {"messages": 1, "profile": 1}, ("messages", "profile"), source="input")
    history, _ = apply(History(), first)
    new, edit = apply(history, operation)
    assert isinstance(edit, Append) and len(edit.lines) == 1
    line = new.entries[("", operation.id)].line
    assert line.appended == stored["appended"]
    assert {ch: v for ch, v in line.values.items()} == stored["values"]
    read = History.parse("t", edited(edited(None, apply(History(), first)[1]), edit))
    entry = read.entries[("", operation.id)]
    assert entry.value("messages") == operation.channel_values["messages"], "the line reads back as the value given"
    assert entry.value("profile") == {"name": "Ada"}


def test_a_finished_subgraph_call_goes_with_the_next_put_of_the_graph_around_it() -> None:
    root = apply(History(), put(1, None, "input"))[0]
    call = chat_put(2, None, ["x"], {"messages": 1, "profile": 1}, ("messages", "profile"), ns="node:task", parents={"": "00000001"})
    with_call = apply(root, call)[0]
    assert ("node:task", "00000002") in with_call.entries
    new, edit = apply(with_call, put(3, 1))
    assert isinstance(edit, Rewrite), "dropping the call's lines rewrites the string"
    assert [key for key in new.entries] == [("", "00000001"), ("", "00000003")]


@pytest.mark.parametrize(
    "operation",
    [
        put(4, 3),  # the run goes on from its last checkpoint
        put(4, 1, "fork"),  # or from an older one
        put(5, 4),  # or from one it made after the deletion, never stored
        WritesLine("", "00000003", "late", "", [(0, "count", 1)]),  # a task's writes arrive late
        Put("child:x", "00000004", None, {"source": "loop", "step": 0, "parents": {"": "00000002"}}, {}, {}, {}, {}),
    ],
    ids=["put", "fork", "put after a refused put", "writes", "a subgraph's first put under a deleted checkpoint"],
)
def test_a_write_of_a_run_of_the_deleted_thread_is_refused(operation: Operation) -> None:
    deleted, edit = apply(History.parse("t", CHAIN), DELETE)
    assert isinstance(edit, Rewrite) and edit.text == DELETED and deleted.only_deleted
    with pytest.raises(ThreadDeletedError, match=r"thread 't' was deleted at 2026-12-07T00:00:00\+00:00") as caught:
        apply(deleted, operation)
    assert caught.value.thread_id == "t" and caught.value.deleted_at == DELETE.at
    assert deleted.render() == DELETED, "the refused write changed nothing"


def test_the_mark_is_never_below_an_id_the_thread_named() -> None:
    """A deletion whose clock is behind the ids stored (another process's clock, or ids not made
    by uuid6) marks the greatest of them."""
    deleted, _ = apply(History.parse("t", CHAIN), DeleteThread("00000001", DELETE.at))
    assert deleted.deletion_record is not None and deleted.deletion_record.deleted_before == "00000003"
    with pytest.raises(ThreadDeletedError):
        apply(deleted, put(4, 3))


def test_writes_for_a_replaced_checkpoint_are_not_stored() -> None:
    replaced, _ = apply(History.parse("t", FORKED), put(5, 4))
    assert replaced.dropped_reason("", "00000002") == "replaced"
    new, edit = apply(replaced, WritesLine("", "00000002", "late", "", [(0, "count", 1)]))
    assert isinstance(edit, Append) and edit.lines == () and ("", "00000002") not in new.entries
