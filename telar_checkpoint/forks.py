"""One way for every part to tell a forked child: the pid noted at fork, and hooks run then.

A forked child inherits what its parent held (open files and the ``flock`` on them, database
connections, locks held by threads that are not in the child) and must not use or close it.
Each part that holds such things tells the child either way, never by a mechanism of its own:

- by `pid`, this process's id, read where the part uses what it holds (a writer's turns, a
  store's connections): compared with the pid it noted when it made them. `pid` is kept
  current by the hook on fork, so reading it costs no system call (`os.getpid()` is one, and
  a saver's turns read it on every write);
- by `in_child_after_fork(hook)`, where the child must act before it runs on (close its
  copies of the parent's file descriptors, note the writes the parent had under way).
"""

from __future__ import annotations

import os
from collections.abc import Callable

pid = os.getpid()
"""This process's id, kept current in a forked child before any of its code runs."""

_HOOKS: list[Callable[[], None]] = []


def in_child_after_fork(hook: Callable[[], None]) -> None:
    """Run `hook` in every forked child, after `pid` is the child's, in the order registered."""
    _HOOKS.append(hook)


def _forked() -> None:
    global pid
    pid = os.getpid()
    for hook in _HOOKS:
        hook()


if hasattr(os, "register_at_fork"):  # (not on Windows, which cannot fork)
    os.register_at_fork(after_in_child=_forked)
