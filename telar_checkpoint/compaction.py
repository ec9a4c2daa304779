"""The storage policy: when a history's string is appended to and when it is written whole.

Appending is the fast path (a store appends without reading), but what an append leaves
behind costs every later reader: lines a floor trimmed stay in the string, and a value
that extends or repeats its parent's is read through it. These bounds say how much of
that a string may hold before a rewrite makes it canonical again.
"""

from __future__ import annotations

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
