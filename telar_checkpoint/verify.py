"""An integrity check of stored threads, line by line: what the tests and `telar-checkpoint verify` use.

`verify_thread` is pure (a thread id and its stored text in, findings out) and
reads every line, so one bad line does not hide the next. It checks that each
line is JSON of a format version we read, that each checkpoint's parent (and,
in a subgraph, each checkpoint it belongs to) is stored or recorded as
replaced or trimmed, and that pending writes belong to a stored checkpoint.
State values are loaded with the default `JsonSerializer` (or `serde`); a value
that does not load is a warning, since it may name an application class only
the application allows. `verify_store` runs it over a store and names the
foreign entries. Findings are errors (the data is not sound) or warnings.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from langgraph.checkpoint.serde.base import SerializerProtocol

from telar_checkpoint.errors import StoredDataError, UnknownFormatError
from telar_checkpoint.format import CheckpointLine, DroppedLine, WritesLine, is_same, line_version, read_stored_line
from telar_checkpoint.history import RESIDUE_SECONDS, History
from telar_checkpoint.inspection import read_thread
from telar_checkpoint.progress import Progress
from telar_checkpoint.stores.base import Store
from telar_checkpoint.values import ValueCodec

Severity = Literal["error", "warning"]


# What each finding `code` means, and whether it is an error or a warning: a code, a severity
# and the meaning a line. (A blank line holds nothing: the reader skips it, see `History.extend`.)
_FINDINGS = """
blank           warning  a blank line: it holds nothing, and is skipped on read
corrupt-line    error    a complete line that is not JSON or not a record of ours
unknown-format  error    a line with no format version, or one this release does not read
missing-parent  error    a checkpoint's parent is neither stored nor recorded as dropped
cycle           error    checkpoints whose parent links loop: a checkpoint is its own ancestor
missing-base    error    a checkpoint that appends to the lists of one that is not stored before it
missing-owner   error    a subgraph checkpoint's parent-graph checkpoint is neither stored nor dropped
orphan-writes   warning  pending writes for a checkpoint older than the latest that was never stored: what a crash \
between a step's writes and its checkpoint leaves; the next rewrite drops them
pending-put     warning  pending writes newer than the latest checkpoint, or older by less than RESIDUE_SECONDS (another \
run's put raced it): a put not yet stored
dropped-writes  warning  pending writes for a checkpoint recorded as replaced or trimmed (ignored)
duplicate       warning  the same checkpoint stored twice; the later line wins
value           warning  a state value that does not load with this serializer
unreachable     error    lines whose parent or checkpoint was on a damaged line (one finding for all)
torn            warning  an unterminated last line (an interrupted write), dropped on read
development-build  warning  a line written by a development build (as format version 3): it reads as version 1 \
or 2, and the thread's next write, or `telar-checkpoint upgrade`, writes it so
foreign         warning  an entry in the store that is not a history of ours (never touched)
stale-temp      warning  a temporary file a killed rewrite left; the store's next rewrite removes it
"""
CODES: dict[str, tuple[Severity, str]] = {
    code: (cast(Severity, severity), meaning)
    for code, severity, meaning in (row.split(None, 2) for row in _FINDINGS.strip().splitlines())
}


@dataclass(slots=True)
class Problem:
    """One finding: where (`thread_id`, `line`), what (`code`, see CODES) and a message for people."""

    thread_id: str | None
    line: int | None
    code: str
    message: str

    @property
    def severity(self) -> Severity:
        return CODES[self.code][0]

    def __str__(self) -> str:
        where = f"line {self.line}: " if self.line is not None else ""
        return f"{self.severity}: {where}{self.message}"


@dataclass(slots=True)
class VerifyReport:
    """The findings for each thread checked (an empty list: sound) and the foreign entries."""

    threads: dict[str, list[Problem]] = field(default_factory=dict)
    foreign: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)  # temporary files killed rewrites left

    @property
    def problems(self) -> list[Problem]:
        found = [p for problems in self.threads.values() for p in problems]
        found += [Problem(None, None, "foreign", f"foreign entry {name!r}") for name in self.foreign]
        return found + [Problem(None, None, "stale-temp", f"stale temporary file {name!r}") for name in self.stale]

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]

    @property
    def ok(self) -> bool:
        """True when no thread has an error (warnings allowed)."""
        return not self.errors


def _message(exc: StoredDataError) -> str:
    """The error's message without the "thread ..., line N: " prefix the finding already carries."""
    text = str(exc)
    prefix = ", ".join(
        part for part in (
            f"thread {exc.thread_id!r}" if exc.thread_id is not None else "",
            f"line {exc.line}" if exc.line is not None else "",
        ) if part
    )
    return text[len(prefix) + 2:] if prefix and text.startswith(prefix + ": ") else text


class _Checker:
    def __init__(self, thread_id: str, serde: SerializerProtocol | None) -> None:
        self.thread_id = thread_id
        self.values = ValueCodec(serde) if serde is not None else None
        self.problems: list[Problem] = []
        self.checkpoint_lines: dict[tuple[str, str], int] = {}
        self.writes_lines: dict[tuple[str, str], int] = {}

    def add(self, line: int | None, code: str, message: str) -> None:
        self.problems.append(Problem(self.thread_id, line, code, message))

    def read(self, text: str) -> History:
        """Every line read on its own, then added to the history built from the good ones."""
        raw_lines = text.split("\n")  # "\n" only, as History.parse
        tail = raw_lines.pop()
        history = History(self.thread_id)
        for number, raw in enumerate(raw_lines, 1):
            if not raw.strip():
                self.add(number, "blank", "a blank line, skipped on read")
                continue
            try:
                line, development = read_stored_line(raw, self.thread_id, number)
            except StoredDataError as exc:
                code = "unknown-format" if isinstance(exc, UnknownFormatError) else "corrupt-line"
                self.add(number, code, _message(exc))
                continue
            if development:
                self.add(number, "development-build", f"written by a development build (as format version 3); it "
                         f"reads as version {line_version(line)}, and the thread's next write (or `telar-checkpoint "
                         f"upgrade`) writes it so")
            try:
                history.extend(raw + "\n")
            except StoredDataError as exc:  # sound alone, not in its place: what it extends is not stored
                self.add(number, "missing-base", _message(exc))
                continue
            self.note(number, line)
        if tail:
            self.add(len(raw_lines) + 1, "torn", f"unterminated last line ({len(tail)} characters) is dropped on read; "
                     "the next write to the thread removes it")
        return history

    def note(self, number: int, line: CheckpointLine | WritesLine | DroppedLine) -> None:
        if isinstance(line, CheckpointLine):
            key = (line.ns, line.id)
            if key in self.checkpoint_lines:
                self.add(number, "duplicate", f"checkpoint {line.id}{_in(line.ns)} is also on line "
                         f"{self.checkpoint_lines[key]}; the later line wins")
            self.checkpoint_lines[key] = number
            self.check_values(number, ((ch, v) for ch, v in line.values.items() if not is_same(v)))  # a reference loads as its base
            self.check_values(number, ((ch, item) for ch, items in line.appended.items() for item in items))
        elif isinstance(line, WritesLine):
            self.writes_lines.setdefault((line.ns, line.checkpoint_id), number)
            self.check_values(number, ((channel, value) for _idx, channel, value in line.writes))

    def check_values(self, number: int, values: Iterable[tuple[str, Any]]) -> None:
        if self.values is None:
            return
        for channel, value in values:
            try:
                self.values.decode(value)
            except Exception as exc:  # the serializer's own error, whatever its class
                self.add(number, "value", f"the value of channel {channel!r} does not load: {exc}")

    def check_links(self, history: History) -> None:
        for ns, cid in history.cycles():
            self.add(self.checkpoint_lines.get((ns, cid)), "cycle", f"checkpoint {cid}{_in(ns)} is its own "
                     "ancestor: its parent links loop (reads stop there; `repair` cannot mend it, edit a parent)")
        for (ns, cid), entry in history.entries.items():
            number = self.checkpoint_lines.get((ns, cid))
            parent = entry.line.parent
            if parent is not None and history.get(ns, parent) is None and not _dropped(history, ns, parent):
                self.add(number, "missing-parent", f"checkpoint {cid}{_in(ns)} has parent {parent}, "
                         "which is not stored and not recorded as replaced or trimmed")
            if not ns:
                continue
            for owner_ns, owner in (entry.line.metadata.get("parents") or {}).items():
                if not isinstance(owner, str):
                    continue
                if history.get(owner_ns, owner) is None and not _dropped(history, owner_ns, owner):
                    self.add(number, "missing-owner", f"subgraph checkpoint {cid}{_in(ns)} belongs to checkpoint "
                             f"{owner}{_in(owner_ns)}, which is not stored and not recorded as replaced or trimmed")

    def check_orphans(self, history: History) -> None:
        for (ns, cid), writes in history.orphans.items():
            number = self.writes_lines.get((ns, cid))
            count = f"{len(writes)} pending write{'s' if len(writes) != 1 else ''}"
            latest = history.latest(ns)
            if reason := history.dropped_reason(ns, cid):
                self.add(number, "dropped-writes", f"{count} for checkpoint {cid}{_in(ns)}, which was {reason}")
            elif latest is None or cid > latest.line.id:
                self.add(number, "pending-put", f"{count} for checkpoint {cid}{_in(ns)}, newer than any stored: "
                         "its put has not landed (yet)")
            elif not history.is_residue(ns, cid):
                self.add(number, "pending-put", f"{count} for checkpoint {cid}{_in(ns)}, made less than "
                         f"{RESIDUE_SECONDS:g} s before the latest ({latest.line.id}): its put, racing another run's, "
                         "has not landed (yet)")
            else:
                self.add(number, "orphan-writes", f"{count} for checkpoint {cid}{_in(ns)}, which was never "
                         f"stored (the latest is {latest.line.id}): a crash left them; the next rewrite drops them")


def _in(ns: str) -> str:
    return f" in namespace {ns!r}" if ns else ""


def verify_thread(thread_id: str, text: str, *, serde: SerializerProtocol | None = None) -> list[Problem]:
    """Every finding in one thread's stored text, in line order; an empty list when it is sound.

    State values are loaded with `serde` (default: `JsonSerializer()`).
    """
    from telar_checkpoint.serializer import JsonSerializer

    checker = _Checker(thread_id, serde or JsonSerializer())
    history = checker.read(text)
    checker.check_links(history)
    checker.check_orphans(history)
    return _follow_ons_joined(thread_id, sorted(checker.problems, key=lambda p: (p.line is None, p.line or 0)))


_DAMAGE = ("blank", "corrupt-line", "unknown-format")
_LINKS = ("missing-base", "missing-parent", "missing-owner", "orphan-writes", "pending-put")


def _follow_ons_joined(thread_id: str, problems: list[Problem]) -> list[Problem]:
    """With a damaged line, the links it broke as one finding after it, not one per checkpoint."""
    damage = [p for p in problems if p.code in _DAMAGE]
    links = [p for p in problems if p.code in _LINKS]
    if not damage or not links:
        return problems
    numbers = ", ".join(str(p.line) for p in links[:5]) + (", ..." if len(links) > 5 else "")
    joined = Problem(
        thread_id, None, "unreachable",
        f"{len(links)} more line{'s' if len(links) != 1 else ''} ({numbers}) can no longer be reached, most likely "
        f"because line {damage[0].line} is damaged; `telar-checkpoint repair` drops them and keeps the rest",
    )
    rest = [p for p in problems if p.code not in _LINKS] + [joined]
    return sorted(rest, key=lambda p: (p.line is None, p.line or 0))


def verify_store(
    store: Store,
    thread_ids: Iterable[str] | None = None,
    *,
    serde: SerializerProtocol | None = None,
    progress: Progress | None = None,
) -> VerifyReport:
    """`verify_thread` over `thread_ids`, or over every thread and the store's foreign entries.

    A thread id given that the store does not hold raises `ThreadNotFoundError`.
    `progress(done, total, thread_id)`: called after each thread (telar_checkpoint/progress.py).
    """
    whole = thread_ids is None
    report = VerifyReport(foreign=store.foreign() if whole else [], stale=store.stale_temp_files() if whole else [])
    chosen = store.thread_keys() if thread_ids is None else list(thread_ids)
    for done, thread_id in enumerate(chosen, 1):
        text = read_thread(store, thread_id) if thread_ids is not None else store.read(thread_id)
        if text is not None:
            report.threads[thread_id] = verify_thread(thread_id, text, serde=serde)
        if progress is not None:
            progress(done, len(chosen), thread_id)
    return report


def _dropped(history: History, ns: str, cid: str) -> bool:
    """True when the history records `cid` as replaced, trimmed or deleted on request."""
    return history.dropped_reason(ns, cid) is not None or history.was_deleted(ns, cid)
