"""Output for people and scripts: tables, JSON, a progress bar and the [y/N] question."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from typing import Any, TextIO

import orjson

from telar_checkpoint.errors import SerializationError


def to_json(value: Any) -> str:
    """`value` (dataclasses included) as indented JSON text."""

    def default(obj: Any) -> Any:
        if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
        raise TypeError(type(obj).__name__)

    return _dumps(value, default=default, option=orjson.OPT_INDENT_2)


def compact(value: Any) -> str:
    """`value` as one line of JSON (for table cells)."""
    return _dumps(value)


def _dumps(value: Any, **options: Any) -> str:
    """JSON text of `value`; a value nested deeper than JSON writers go (orjson writes 255 levels,
    and reads 1,024) is refused in one line of ours, not a traceback."""
    try:
        return orjson.dumps(value, **options).decode("utf-8")
    except orjson.JSONEncodeError as exc:
        if "Recursion limit" not in str(exc):
            raise
        raise SerializationError(
            "a stored value is nested more than 255 levels deep, too deep to print as JSON; "
            "`telar-checkpoint export URL THREAD` gives the thread's lines as stored"
        ) from None


def when(ts: str | None) -> str:
    """A checkpoint timestamp for a table: ``2024-05-01 12:00:00`` (UTC, as stored), or ``-``."""
    return ts[:19].replace("T", " ") if ts else "-"


def _console(stream: TextIO) -> Any:
    """A rich console on `stream`: the terminal's width and colours (none with NO_COLOR), or, when
    `stream` is not a terminal, no width limit (a script reads whole lines) and no colour."""
    from rich.console import Console

    terminal = stream.isatty()
    return Console(
        file=stream, width=None if terminal else 1_000_000,
        markup=False, highlight=False, emoji=False, no_color=None if terminal else True,
    )  # fmt: skip


def table(
    headers: Sequence[str], rows: Sequence[Sequence[Any]], right: Sequence[int] = (), optional: Sequence[int] = ()
) -> str:
    """Rows as aligned columns under `headers`, two spaces apart. Columns numbered in `right` are
    right-aligned; those in `optional` are left out when no row has a value there. Drawn by rich for
    stdout: on a terminal, wide cells fold to its width and headers are bold."""
    from rich.table import Table

    cells = [["-" if c is None else str(c) for c in row] for row in rows]
    shown = [i for i in range(len(headers)) if i not in optional or any(row[i] for row in cells)]
    drawn = Table(box=None, padding=(0, 1), pad_edge=False, show_edge=False, header_style="bold")
    for i in shown:
        drawn.add_column(headers[i], justify="right" if i in right else "left", overflow="fold")  # never cut
    for row in cells:
        drawn.add_row(*(row[i] for i in shown))
    console = _console(sys.stdout)
    with console.capture() as captured:
        console.print(drawn)
    return "\n".join(line.rstrip() for line in captured.get().splitlines())


def styled(text: str, style: str) -> str:
    """`text` in a rich `style` (a colour, say) when stdout is a terminal; as it is otherwise.
    NO_COLOR drops the colour (rich follows it)."""
    if not sys.stdout.isatty():
        return text
    console = _console(sys.stdout)
    with console.capture() as captured:
        console.print(text, style=style, end="")
    return str(captured.get())


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


class ProgressBar:
    """A rich progress bar on stderr (``label ━━━━ 5/10``); a no-op unless stderr is a terminal or `force`
    (then, off a terminal, the bar is drawn once, when it closes, without control codes)."""

    def __init__(self, label: str, force: bool = False, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.label = label
        self.enabled = force or self.stream.isatty()
        self._bar: Any = None
        self._task: Any = None

    def __call__(self, done: int, total: int, _item: object = None) -> None:
        if not self.enabled or total <= 0:
            return
        if self._bar is None:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

            self._bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 console=_console(self.stream), transient=False)
            self._task = self._bar.add_task(self.label, total=total)
            self._bar.start()
        self._bar.update(self._task, completed=done, total=total)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


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
