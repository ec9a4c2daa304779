"""The storage policy: when a history's string is appended to and when it is written whole.

Every change of a history ends here (`rules.apply`): given the history it made and the lines
it adds, `edit` (or `trimmed`, for a put that trimmed) says what the store must do,
`Append(lines)` or `Rewrite(text)`, from facts the history gives; it changes no count of the
history (the rules count what they append). A change
that drops or updates a stored line must rewrite; so must a string that is not canonical
(`History.must_rewrite`). Appending is the fast path (a store appends without reading), but
what an append leaves behind costs every later reader: lines a floor trimmed stay in the
string, and a value that extends or repeats its parent's is read through it. The bounds
below say how much of that a string may hold before a rewrite makes it canonical again.
Pure, as the rules are: edits are values, and nothing here does I/O. The history imports
nothing from here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from telar_checkpoint.format import DroppedLine, write_dropped

if TYPE_CHECKING:
    from telar_checkpoint.history import History

MAX_CHAIN = 64  # a value is written whole again after this many lines that extend or repeat it
SLACK_LINES = 64  # trimming appends floors until the string holds 2x its live lines + this,
SLACK_SIZE = 256 * 1024  # and 2x the characters of the lines its live checkpoints read + this,
FLOORS_APPENDED = 64  # or this many floor lines (each costs a reader a pass over the history)
FLOOR_LINE_IDS = 64  # a dropped record listing more ids than this is written by a rewrite


# --- edits: what a change does to the stored string ---------------------------------
# Values: nothing changes one once it is made (plain slotted dataclasses, not frozen ones, by
# convention only: a frozen dataclass's init costs twice as much, on every write).


@dataclass(slots=True)
class Append:
    """Add these lines at the end of the string (none: the string stays as it is)."""

    lines: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        """The lines, each followed by a newline."""
        return "\n".join(self.lines) + "\n" if self.lines else ""


@dataclass(slots=True)
class Rewrite:
    """Replace the whole string with `text`."""

    text: str


Edit = Append | Rewrite


def edited(stored: str | None, edit: Edit) -> str:
    """The string `stored` after `edit`."""
    if isinstance(edit, Rewrite):
        return edit.text
    if not edit.lines:
        return stored or ""  # the very string given: a caller may tell "unchanged" by identity
    return (stored or "") + edit.text


def edit(history: History, lines: Sequence[str], *, rewrite: bool = False) -> Edit:
    """What the store does for a change that made `history` and adds `lines` to its string:
    append them, or write the string whole when the change dropped or updated a stored line
    (`rewrite`) or the string is not canonical (`History.must_rewrite`)."""
    if rewrite or history.must_rewrite:
        return Rewrite(history.render())
    return Append(tuple(lines))


def trimmed(history: History, lines: Sequence[str], floors: Sequence[DroppedLine] | None) -> Edit:
    """What the store does for a put that adds `lines` and then trimmed `history`: the lines and
    the `floors` (the `dropped` records whose lines trim the stored string as the history was
    trimmed), or a rewrite where only a rewrite can say it (`floors` None), the string is not
    canonical (`History.must_rewrite`) or would hold too much (`floors_fit`)."""
    if floors is None or history.must_rewrite or not floors_fit(history, lines, floors):
        return Rewrite(history.render())
    return Append((*lines, *map(write_dropped, floors)))


def floors_fit(history: History, lines: Sequence[str], floors: Sequence[DroppedLine]) -> bool:
    """Whether a trim may append the lines of `floors` after `lines` to the string `history`
    stands for; False: rewrite it. The facts are the history's: the lines and characters of its
    string, the floors it holds, and what its kept checkpoints need (`History.needed_lines`,
    `needed_size`)."""
    return (
        max((len(r.replaced) + len(r.deleted) for r in floors), default=0) <= FLOOR_LINE_IDS
        and history.floors_appended + len(floors) <= FLOORS_APPENDED
        and history.line_count + len(lines) + len(floors) <= 2 * history.needed_lines() + SLACK_LINES
        and history.size + sum(map(len, lines)) + len(lines) <= 2 * history.needed_size() + SLACK_SIZE
    )
