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
    return write_dropped(DroppedLine(ns, "00000001", ["00000000"], ["00000003"] if deleted else []))


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
        (checkpoint("child:1"), 2),
        (checkpoint(appended=True), 3),
        (checkpoint(same=True), 3),
        (checkpoint("child:1", appended=True), 3),
        (checkpoint("child:1", same=True), 3),
        (writes(), 1),
        (writes("child:1"), 2),
        (dropped(), 1),
        (dropped("child:1"), 2),
        (dropped(deleted=True), 3),
        (dropped("child:1", deleted=True), 3),
    ],
)
def test_a_line_is_written_with_the_oldest_version_that_reads_it_right(text: str, version: int) -> None:
    assert fmt(text) == version
    line = read_line(text, "t", 1)
    assert line_version(line) == version
    assert ("ns" in orjson.loads(text)) == bool(line.ns)


def test_the_tables_hold_every_field_the_writer_writes() -> None:
    """A field the writer gains without a table entry (and a version) fails here."""
    for ns, table in (("", ROOT_FIELDS), ("child:1", SUBGRAPH_FIELDS)):
        assert orjson.loads(checkpoint(ns, appended=True, same=True, extra=True)).keys() == table["checkpoint"]
        assert orjson.loads(writes(ns)).keys() == table["writes"]
        assert orjson.loads(dropped(ns, deleted=True)).keys() == table["dropped"]


# --- refusals: a field a version does not know ------------------------------------------

LINES = {  # (version, kind): a line of that version and kind, as the writer writes it
    (1, "checkpoint"): checkpoint(),
    (1, "writes"): writes(),
    (1, "dropped"): dropped(),
    (2, "checkpoint"): checkpoint("child:1"),
    (2, "writes"): writes("child:1"),
    (2, "dropped"): dropped("child:1"),
    (3, "checkpoint"): checkpoint(appended=True),
    (3, "checkpoint in a subgraph"): checkpoint("child:1", same=True),
    (3, "dropped"): dropped(deleted=True),
    (3, "dropped in a subgraph"): dropped("child:1", deleted=True),
    (3, "writes"): edit(writes(), format=3),  # never written so (nothing new), and read
    (3, "writes in a subgraph"): edit(writes("child:1"), format=3),
}


@pytest.mark.parametrize("version, kind", list(LINES))
@pytest.mark.parametrize("field", ["bogus", "thread_id", "values_v2"])
def test_an_unknown_field_is_refused_naming_field_thread_and_line(version: int, kind: str, field: str) -> None:
    text = LINES[version, kind]
    read_line(text, "t", 1)
    bad = edit(text, **{field: 1})
    with pytest.raises(UnknownFormatError, match=rf"thread 't', line 7: a version {version} {kind.split()[0]} line has field {field!r}"):
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


# --- stored data: versions 1 and 2 with what version 3 now carries ------------------------


@pytest.mark.parametrize(
    "text",
    [
        edit(checkpoint(appended=True), format=1),
        edit(checkpoint(same=True), format=1),
        edit(checkpoint("child:1", appended=True), format=2),
        edit(checkpoint("child:1", same=True), format=2),
        edit(dropped(deleted=True), format=1),
        edit(dropped("child:1", deleted=True), format=2),
    ],
)
def test_older_versions_still_read_what_releases_before_version_3_wrote_there(text: str) -> None:
    new = edit(text, format=3)
    old_line, new_line = read_line(text, "t", 1), read_line(new, "t", 1)
    if isinstance(old_line, CheckpointLine):
        old_line.text = new_line.text = ""
    assert old_line == new_line


# --- version gates ----------------------------------------------------------------------


@pytest.mark.parametrize("text", [checkpoint(appended=True), checkpoint("child:1", same=True), dropped(deleted=True)])
def test_a_reader_of_versions_1_and_2_refuses_a_version_3_line(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(line_format, "READERS", {v: line_format.READERS[v] for v in (1, 2)})
    with pytest.raises(UnknownFormatError, match=r"line 1: has format version 3, which this release does not read \(it reads 1, 2\)"):
        read_line(text, "t", 1)


def test_golden_v1_is_read_whole_by_a_reader_that_predates_subgraphs(monkeypatch: pytest.MonkeyPatch) -> None:
    text = (GOLDEN / "v1.jsonl").read_text(encoding="utf-8")
    expected = codec.decode_history("g", text)
    monkeypatch.setattr(line_format, "READERS", {1: line_format.READERS[1]})
    assert codec.decode_history("g", text) == expected


@pytest.mark.parametrize(
    "text, version, message",
    [
        (checkpoint("child:1", appended=True), 1, "a version 1 line has no namespace"),
        (checkpoint(appended=True), 2, "field 'ns' is missing"),
        (edit(checkpoint("child:1"), ns=""), 2, "a version 2 line carries a non-empty namespace"),
        (edit(checkpoint("child:1"), ns=""), 3, "a version 3 line's namespace, when it has one, is non-empty text"),
        (edit(checkpoint("child:1"), ns=None), 3, "a version 3 line's namespace, when it has one, is non-empty text"),
    ],
)
def test_each_version_checks_its_namespace(text: str, version: int, message: str) -> None:
    with pytest.raises(CorruptLineError, match=rf"line 1: {message}"):
        read_line(edit(text, format=version), "t", 1)


# --- golden files: one per version, read forever ----------------------------------------
# (named test_golden*: their Interrupt values need a newer langgraph than the lowest combination's)


def test_there_is_a_golden_file_for_every_version() -> None:
    for version in line_format.READERS:
        text = (GOLDEN / f"v{version}.jsonl").read_text(encoding="utf-8")
        assert version in {fmt(line) for line in text.splitlines()}


@pytest.mark.parametrize("name", GOLDEN_FILES)
def test_golden_files_read_to_the_records_pinned_beside_them(name: str) -> None:
    text = (GOLDEN / name).read_text(encoding="utf-8")
    pinned = orjson.loads((GOLDEN / name.replace(".jsonl", ".records.json")).read_bytes())
    assert orjson.loads(orjson.dumps(read_records(text))) == pinned
    assert History.parse("g", text).render() == text  # and a rewrite writes it as stored


def test_the_version_3_golden_holds_each_feature_of_version_3() -> None:
    lines = [orjson.loads(line) for line in (GOLDEN / "v3.jsonl").read_text(encoding="utf-8").splitlines()]
    v3 = [d for d in lines if d["format"] == 3]
    assert any(d["kind"] == "checkpoint" and "ns" not in d and d.get("appended") for d in v3)
    assert any(d["kind"] == "checkpoint" and "ns" in d and d.get("appended") for d in v3)
    assert any(d["kind"] == "checkpoint" and SAME in d["values"].values() for d in v3)
    assert any(d["kind"] == "dropped" and d.get("deleted") for d in v3)
    # Every line of it is written with the version the writer gives it today.
    for d in lines:
        if d["format"] < 3:
            assert not d.get("appended") and not d.get("deleted") and SAME not in d.get("values", {}).values()
