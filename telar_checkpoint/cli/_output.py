"""Output for people and scripts: tables, JSON, a progress bar and the [y/N] question."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from typing import Any, TextIO

import orjson


def to_json(value: Any) -> str:
    """`value` (dataclasses included) as indented JSON text."""

    def default(obj: Any) -> Any:
        if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
        raise TypeError(type(obj).__name__)

    return orjson.dumps(value, default=default, option=orjson.OPT_INDENT_2).decode("utf-8")


def compact(value: Any) -> str:
    """`value` as one line of JSON (for table cells)."""
    return orjson.dumps(value).decode("utf-8")


def when(ts: str | None) -> str:
    """A checkpoint timestamp for a table: ``2024-05-01 12:00:00`` (UTC, as stored), or ``-``."""
    return ts[:19].replace("T", " ") if ts else "-"


def table(
    headers: Sequence[str], rows: Sequence[Sequence[Any]], right: Sequence[int] = (), optional: Sequence[int] = ()
) -> str:
    """Rows as aligned columns under `headers`. Columns numbered in `right` are right-aligned;
    those in `optional` are left out when no row has a value there."""
    cells = [[str(h) for h in headers]] + [["-" if c is None else str(c) for c in row] for row in rows]
    shown = [i for i in range(len(headers)) if i not in optional or any(row[i] for row in cells[1:])]
    widths = {i: max(len(row[i]) for row in cells) for i in shown}
    lines = []
    for row in cells:
        parts = [row[i].rjust(widths[i]) if i in right else row[i].ljust(widths[i]) for i in shown]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


class ProgressBar:
    """Draws ``label [#####-----] 5/10`` on stderr; a no-op unless stderr is a TTY or forced."""

    WIDTH = 30

    def __init__(self, label: str, force: bool = False, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.label = label
        self.enabled = force or self.stream.isatty()
        self.drawn = False

    def __call__(self, done: int, total: int, _item: object = None) -> None:
        if not self.enabled or total <= 0:
            return
        filled = self.WIDTH * done // total
        bar = "#" * filled + "-" * (self.WIDTH - filled)
        self.stream.write(f"\r{self.label} [{bar}] {done}/{total}")
        self.stream.flush()
        self.drawn = True

    def close(self) -> None:
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()
            self.drawn = False


def confirm(question: str, assume_yes: bool) -> bool:
    """Ask `question` with ``[y/N]`` on stderr and read the answer from stdin (no answer: no)."""
    if assume_yes:
        return True
    sys.stderr.write(f"{question} [y/N] ")
    sys.stderr.flush()
    answer = sys.stdin.readline()
    if not sys.stdin.isatty():  # piped: show the answer, as a terminal would have echoed it
        sys.stderr.write(answer.strip() + "\n")
    elif not answer.endswith("\n"):  # end of input at the prompt
        sys.stderr.write("\n")
    return answer.strip().lower() in ("y", "yes")
