"""Format versions: which version the writer gives each line, the fields each version knows (any
other is refused), and the golden files, one per version, read forever (docs/FORMAT.md)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from telar_checkpoint import CheckpointCodec, CorruptLineError, UnknownFormatError
from telar_checkpoint import format as line_format
from telar_checkpoint.format import (
    ROOT_FIELDS,
    SAME,
    SUBGRAPH_FIELDS,
    CheckpointLine,
    DroppedLine,
    WritesLine,
    line_version,
    read_line,
    read_stored_line,
    write_checkpoint,
    write_dropped,
    write_writes,
)
from telar_checkpoint.history import History
from telar_checkpoint.verify import verify_thread
from tests.make_golden import read_records

GOLDEN = Path(__file__).parent / "golden"
GOLDEN_FILES = sorted(p.name for p in GOLDEN.glob("*.jsonl"))
codec = CheckpointCodec()


def checkpoint(ns: str = "", *, appended: bool = False, same: bool = False, extra: bool = False, parent: str | None = "00000001") -> str:
    metadata = {"source": "loop", "step": 1, "parents": {"": "00000009"} if ns else {}}
    values = {"count": 1, "profile": SAME if same else {"name": "x"}}
    return write_checkpoint(
        CheckpointLine(
            ns, "00000002", parent, metadata, {"v": 4, "ts": "t", "channel_versions": {"count": 2}, "versions_seen": {}},
            {"pending_sends": []} if extra else {}, values, {"log": ["a"]} if appended else {},
        )
    )


def writes(ns: str = "") -> str:
    return write_writes(WritesLine(ns, "00000002", "task", "path", [(0, "log", ["a"])]))


def dropped(ns: str = "", *, deleted: bool = False) -> str:
    """A dropped line; `deleted`: with every field its namespace may hold (a deleted thread's
    record and the thread's own time-to-live on the root)."""
    whole = deleted and not ns
    return write_dropped(DroppedLine(
        ns, "00000001", ["00000000"], ["00000003"] if deleted else [], 2 if deleted else None,
        "1f1f1e17-2c5a-6013-bfff-ffffffffffff" if whole else None, "2026-12-07T01:56:42+00:00" if whole else None,
        60.0 if whole else None,
    ))


def fmt(text: str) -> int:
    return orjson.loads(text)["format"]


def edit(text: str, **fields: object) -> str:
    doc = orjson.loads(text)
    for key, value in fields.items():
        if value is ...:
            doc.pop(key, None)
        else:
            doc[key] = value
    return orjson.dumps(doc).decode()


# --- the version the writer gives each line --------------------------------------------


@pytest.mark.parametrize(
    "text, version",
    [
        (checkpoint(), 1),
        (checkpoint(extra=True), 1),
        (checkpoint(appended=True), 1),
        (checkpoint(same=True), 1),
        (checkpoint(appended=True, same=True, extra=True), 1),
        (checkpoint("child:1"), 2),
        (checkpoint("child:1", appended=True), 2),
        (checkpoint("child:1", same=True), 2),
        (writes(), 1),
        (writes("child:1"), 2),
        (dropped(), 1),
        (dropped(deleted=True), 1),
        (dropped("child:1"), 2),
        (dropped("child:1", deleted=True), 2),
    ],
)
def test_a_line_is_version_2_inside_a_subgraph_and_version_1_elsewhere_whatever_it_holds(text: str, version: int) -> None:
    assert fmt(text) == version
    line = read_line(text, "t", 1)
    assert line_version(line) == version
    assert ("ns" in orjson.loads(text)) == bool(line.ns)


def test_the_tables_hold_every_field_the_writer_writes() -> None:
    """A field the writer gains without a table entry fails here."""
    for ns, table in (("", ROOT_FIELDS), ("child:1", SUBGRAPH_FIELDS)):
        assert orjson.loads(checkpoint(ns, appended=True, same=True, extra=True)).keys() == table["checkpoint"]
        assert orjson.loads(writes(ns)).keys() == table["writes"]
        assert orjson.loads(dropped(ns, deleted=True)).keys() == table["dropped"]


def test_the_format_has_two_versions_and_no_public_name_for_a_third() -> None:
    import telar_checkpoint

    assert sorted(line_format.READERS) == [1, 2]
    assert [name for name in telar_checkpoint.__all__ if name.startswith("FORMAT_")] == ["FORMAT_V1", "FORMAT_V2"]
    assert not hasattr(telar_checkpoint, "FORMAT_V3") and not hasattr(line_format, "FORMAT_V3")


# --- refusals: a field a version does not know ------------------------------------------

LINES = {  # (version, kind): a line of that version and kind, as the writer writes it
    (1, "checkpoint"): checkpoint(appended=True, same=True),
    (1, "writes"): writes(),
    (1, "dropped"): dropped(deleted=True),
    (2, "checkpoint"): checkpoint("child:1", appended=True, same=True),
    (2, "writes"): writes("child:1"),
    (2, "dropped"): dropped("child:1", deleted=True),
    # what development builds wrote (read, and written again as 1 or 2)
    (3, "checkpoint"): edit(checkpoint(appended=True), format=3),
    (3, "checkpoint in a subgraph"): edit(checkpoint("child:1", same=True), format=3),
    (3, "dropped"): edit(dropped(deleted=True), format=3),
    (3, "writes in a subgraph"): edit(writes("child:1"), format=3),
}


@pytest.mark.parametrize("version, kind", list(LINES))
@pytest.mark.parametrize("field", ["bogus", "thread_id", "values_v2"])
def test_an_unknown_field_is_refused_naming_field_thread_and_line(version: int, kind: str, field: str) -> None:
    text = LINES[version, kind]
    read_line(text, "t", 1)
    bad = edit(text, **{field: 1})
    reads_as = 2 if "ns" in orjson.loads(text) else 1  # a development build's line reads as 1 or 2
    with pytest.raises(UnknownFormatError, match=rf"thread 't', line 7: a version {reads_as} {kind.split()[0]} line has field {field!r}"):
        read_line(bad, "t", 7)
    with pytest.raises(UnknownFormatError, match=rf"line 2: .* field {field!r}.*upgrade telar-checkpoint"):
        codec.decode_history("t", checkpoint(parent=None) + "\n" + bad + "\n")


@pytest.mark.parametrize(
    "text, field",
    [
        (checkpoint(), "parents"),  # a root line has no parents map
        (edit(checkpoint(), format=3), "parents"),
        (writes("child:1"), "parents"),  # only checkpoint lines carry parents
        (dropped(), "step"),  # a projection of checkpoint lines only
        (writes(), "deleted"),
        (dropped(), "appended"),
    ],
)
def test_a_field_of_another_kind_or_namespace_is_refused(text: str, field: str) -> None:
    with pytest.raises(UnknownFormatError, match=rf"line 1: .* has field {field!r}"):
        read_line(edit(text, **{field: {}}), "t", 1)


def test_verify_reports_an_unknown_field_as_an_unknown_format() -> None:
    problems = verify_thread("t", checkpoint(parent=None) + "\n" + edit(writes(), later=True) + "\n")
    assert [(p.code, p.line) for p in problems if p.severity == "error"] == [("unknown-format", 2)]
    assert "'later'" in problems[0].message


@pytest.mark.parametrize("ns", ["", "child:1"])
def test_projections_are_known_and_ignored_on_read(ns: str) -> None:
    for text in (checkpoint(ns), checkpoint(ns, appended=True)):
        edited = edit(text, step=99, source="fork")
        assert read_line(edited, "t", 1).metadata == read_line(text, "t", 1).metadata
        projections_gone = edit(text, step=..., source=...)
        assert read_line(projections_gone, "t", 1).metadata == read_line(text, "t", 1).metadata
    assert line_format.PROJECTIONS["checkpoint"] <= ROOT_FIELDS["checkpoint"]


# --- lines of development builds (version 3): read, written again as 1 and 2 ---------------
# (the tests of the golden file of version 3 are named test_golden*: its Interrupt values need a
# newer langgraph than the lowest combination's)


@pytest.mark.parametrize("text", [v for (version, _), v in LINES.items() if version < 3])
def test_a_development_builds_line_reads_as_the_line_of_version_1_or_2_it_stands_for(text: str) -> None:
    line, development = read_stored_line(edit(text, format=3), "t", 1)
    assert development
    ours, mine = read_stored_line(text, "t", 1)
    assert not mine
    if isinstance(line, CheckpointLine):
        assert line.text == ""  # no text of its own: a rewrite writes it anew, as 1 or 2
        ours.text = ""
    assert line == ours


def development_thread() -> str:
    """A thread of a development build: the golden file of version 3."""
    return (GOLDEN / "v3.jsonl").read_text(encoding="utf-8")


def versions(text: str) -> set[int]:
    return {fmt(line) for line in text.splitlines()}


def test_golden_v3_the_next_write_rewrites_a_development_builds_thread_in_versions_1_and_2() -> None:
    from telar_checkpoint import MemoryStore, TelarSaver

    text = development_thread()
    assert 3 in versions(text)
    store = MemoryStore()
    store.write("g", text)
    saver = TelarSaver(store)
    before = list(saver.list({"configurable": {"thread_id": "g"}}))
    latest = before[0]
    # a write that changes nothing else (a write already stored) is still the next write
    saver.put_writes(latest.config, [("log", ["x"])], "some-task")
    after_text = store.read("g")
    assert versions(after_text) == {1, 2}
    assert [t.checkpoint["id"] for t in saver.list({"configurable": {"thread_id": "g"}})] == [t.checkpoint["id"] for t in before]
    assert verify_thread("g", after_text) == []


def test_golden_v3_a_development_builds_thread_rewritten_reads_to_the_same_records() -> None:
    text = development_thread()
    history = History.parse("g", text)
    assert history.development_lines == sum(1 for line in text.splitlines() if fmt(line) == 3)
    assert history.must_rewrite
    rendered = history.render()
    assert versions(rendered) == {1, 2}
    assert not History.parse("g", rendered).must_rewrite
    assert read_records(rendered) == read_records(text)
    # the subgraph's lines keep their namespace as version 2, the root's are version 1
    for line in rendered.splitlines():
        assert fmt(line) == (2 if "ns" in orjson.loads(line) else 1)


def test_golden_v3_migrating_or_importing_a_development_builds_thread_writes_it_in_versions_1_and_2() -> None:
    from telar_checkpoint import MemoryStore, TelarSaver
    from telar_checkpoint.migration import import_thread, migrate

    text = development_thread()
    source, target = MemoryStore(), MemoryStore()
    source.write("g", text)
    assert migrate(TelarSaver(source), TelarSaver(target)).threads == 1
    assert import_thread(TelarSaver(target), "imported", text).threads == 1
    for thread in ("g", "imported"):
        stored = target.read(thread) or ""
        assert versions(stored) == {1, 2}
        assert read_records(stored) == read_records(text)
    assert migrate(TelarSaver(source), TelarSaver(target)).skipped == {"g": "already migrated"}


def test_golden_v3_copying_a_development_builds_thread_writes_it_in_versions_1_and_2() -> None:
    from telar_checkpoint import MemoryStore, TelarSaver

    text = development_thread()
    store = MemoryStore()
    store.write("g", text)
    TelarSaver(store).copy_thread("g", "copy")
    copied = store.read("copy") or ""
    assert versions(copied) == {1, 2}
    assert read_records(copied) == read_records(text)
    assert store.read("g") == text, "the source is left as it is"


def test_golden_v3_verify_names_a_development_builds_lines() -> None:
    text = development_thread()
    problems = verify_thread("g", text)
    found = [p for p in problems if p.code == "development-build"]
    assert [p.line for p in found] == [n for n, line in enumerate(text.splitlines(), 1) if fmt(line) == 3]
    assert all(p.severity == "warning" and "written by a development build" in p.message for p in found)
    assert [p for p in problems if p.code != "development-build"] == []


# --- version gates ----------------------------------------------------------------------


@pytest.mark.parametrize("text", [edit(checkpoint(), format=4), edit(writes("child:1"), format=4), edit(dropped(), format=0)])
def test_a_version_that_is_not_1_or_2_is_refused(text: str) -> None:
    with pytest.raises(UnknownFormatError, match=r"line 1: has format version \d, which this release does not read \(it reads 1, 2\)"):
        read_line(text, "t", 1)


@pytest.mark.parametrize("text", [checkpoint("child:1", appended=True), writes("child:1"), dropped("child:1", deleted=True)])
def test_a_reader_that_predates_subgraphs_refuses_a_version_2_line(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(line_format, "READERS", {1: line_format.READERS[1]})
    monkeypatch.setattr(line_format, "_STORED_ONLY", {})
    with pytest.raises(UnknownFormatError, match=r"line 1: has format version 2, which this release does not read \(it reads 1\)"):
        read_line(text, "t", 1)


@pytest.mark.parametrize("name", ["v1.jsonl", "v1-interrupt.jsonl", "v1-appended.jsonl"])
def test_golden_v1_is_read_whole_by_a_reader_that_predates_subgraphs(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    text = (GOLDEN / name).read_text(encoding="utf-8")
    expected = codec.decode_history("g", text)
    monkeypatch.setattr(line_format, "READERS", {1: line_format.READERS[1]})
    monkeypatch.setattr(line_format, "_STORED_ONLY", {})
    assert codec.decode_history("g", text) == expected


@pytest.mark.parametrize(
    "text, version, message",
    [
        (checkpoint("child:1", appended=True), 1, "a version 1 line has no namespace"),
        (checkpoint(appended=True), 2, "field 'ns' is missing"),
        (edit(checkpoint("child:1"), ns=""), 2, "a version 2 line carries a non-empty namespace"),
        (edit(checkpoint("child:1"), ns=""), 3, "a development build's version 3 line's namespace, when it has one, is non-empty text"),
        (edit(checkpoint("child:1"), ns=None), 3, "a development build's version 3 line's namespace, when it has one, is non-empty text"),
    ],
)
def test_each_version_checks_its_namespace(text: str, version: int, message: str) -> None:
    with pytest.raises(CorruptLineError, match=rf"line 1: {message}"):
        read_line(edit(text, format=version), "t", 1)


# --- golden files: one per version, read forever ----------------------------------------
# (named test_golden*: their Interrupt values need a newer langgraph than the lowest combination's)


def test_there_is_a_golden_file_for_every_version_and_for_development_builds() -> None:
    for version in (*line_format.READERS, 3):
        text = (GOLDEN / f"v{version}.jsonl").read_text(encoding="utf-8")
        assert version in versions(text)


@pytest.mark.parametrize("name", GOLDEN_FILES)
def test_golden_files_read_to_the_records_pinned_beside_them(name: str) -> None:
    text = (GOLDEN / name).read_text(encoding="utf-8")
    pinned = orjson.loads((GOLDEN / name.replace(".jsonl", ".records.json")).read_bytes())
    assert orjson.loads(orjson.dumps(read_records(text))) == pinned
    rendered = History.parse("g", text).render()
    if name == "v3.jsonl":  # a development build's: a rewrite writes it in versions 1 and 2
        assert versions(rendered) == {1, 2}
        assert orjson.loads(orjson.dumps(read_records(rendered))) == pinned
    else:
        assert rendered == text  # and a rewrite writes it as stored


@pytest.mark.parametrize("name, kept", [("v1.jsonl", {1}), ("v2.jsonl", {1, 2})])
def test_the_golden_files_of_versions_1_and_2_hold_appended_lists_same_values_and_deleted_ids(name: str, kept: set[int]) -> None:
    lines = [orjson.loads(line) for line in (GOLDEN / name).read_text(encoding="utf-8").splitlines()]
    assert {d["format"] for d in lines} == kept
    for version in kept:
        mine = [d for d in lines if d["format"] == version]
        assert any(d["kind"] == "checkpoint" and d.get("appended") for d in mine)
        assert any(d["kind"] == "checkpoint" and SAME in d["values"].values() for d in mine)
        assert any(d["kind"] == "dropped" and d.get("deleted") for d in mine)
