"""The storage policy: when a history's string is appended to and when it is written whole.

Every change of a history ends here (`rules.apply`): given the history it made and the lines
it adds, `edit` says what the store must do, `Append(lines)` or `Rewrite(text)`. A change
that drops or updates a stored line must rewrite; so must a string that is not canonical
(`History.must_rewrite`). Appending is the fast path (a store appends without reading), but
what an append leaves behind costs every later reader: lines a floor trimmed stay in the
string, and a value that extends or repeats its parent's is read through it. The bounds
below say how much of that a string may hold before a rewrite makes it canonical again.
Pure, as the rules are: edits are values, and nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from telar_checkpoint.format import DroppedLine
    from telar_checkpoint.history import History, Key

MAX_CHAIN = 64  # a value is written whole again after this many lines that extend or repeat it
SLACK_LINES = 64  # trimming appends floors until the string holds 2x its live lines + this,
SLACK_SIZE = 256 * 1024  # and 2x the characters of the lines its live checkpoints read + this,
FLOORS_APPENDED = 64  # or this many floor lines (each costs a reader a pass over the history)
FLOOR_LINE_IDS = 64  # a dropped record listing more ids than this is written by a rewrite


def floors_fit(
    *, lines: int, size: int, floors_appended: int, new_floors: int, longest_record: int, needed_lines: int, needed_size: int
) -> bool:
    """Whether a trim may append `new_floors` floor lines (whose records list at most
    `longest_record` ids) to a string of `lines` lines and `size` characters that already
    holds `floors_appended` of them, when the history needs `needed_lines` lines and
    `needed_size` characters; False: rewrite it."""
    return (
        longest_record <= FLOOR_LINE_IDS
        and floors_appended + new_floors <= FLOORS_APPENDED
        and lines + new_floors <= 2 * needed_lines + SLACK_LINES
        and size <= 2 * needed_size + SLACK_SIZE
    )


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
    history.count_appended(lines)
    return Append(tuple(lines))


def trimmed(history: History, cut: set[Key], before: dict[str, DroppedLine], lines: Sequence[str]) -> Edit:
    """What the store does for a change that adds `lines` (already counted) and then trimmed
    `cut` from `history` (whose `dropped` records were `before`): the lines and the floors that
    trim the stored string as the history was trimmed, or a rewrite where only a rewrite can
    say it, or the string would hold too much (`History.floor_lines`, `floors_fit`)."""
    floors = history.floor_lines(cut, before)
    if floors is None:
        return Rewrite(history.render())
    history.count_appended(floors)
    return Append((*lines, *floors))
