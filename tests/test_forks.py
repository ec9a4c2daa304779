"""`forks`: the one way every part tells a forked child (its pid noted at fork, hooks run then)."""

from __future__ import annotations

import os
import sys

import pytest

from telar_checkpoint import forks

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="this platform cannot fork")


def test_a_forked_child_reads_its_own_pid_and_runs_the_hooks_in_order() -> None:
    ran: list[tuple[str, int]] = []
    forks.in_child_after_fork(lambda: ran.append(("first", forks.pid)))
    forks.in_child_after_fork(lambda: ran.append(("second", forks.pid)))
    assert forks.pid == os.getpid()
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the child: report what it saw, then leave without running pytest's teardown
        try:
            seen = f"{forks.pid == os.getpid()} {ran}"
            os.write(write, seen.encode())
        finally:
            os._exit(0)
    os.close(write)
    try:
        with os.fdopen(read) as pipe:
            seen = pipe.read()
    finally:
        os.waitpid(child, 0)
    assert forks.pid == os.getpid()  # the parent's is unchanged
    assert ran == []  # hooks run in the child only
    child_pid_line = f"True [('first', {child}), ('second', {child})]"
    assert seen == child_pid_line, "the child read a pid other than its own, or ran the hooks out of order"


def test_every_part_that_holds_what_a_child_cannot_share_uses_this_module() -> None:
    """No part of the library registers a fork hook or compares pids on its own."""
    import telar_checkpoint

    root = os.path.dirname(telar_checkpoint.__file__)
    own = []
    for folder, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            if not name.endswith(".py") or path == forks.__file__:
                continue
            with open(path, encoding="utf-8") as source:
                text = source.read()
            if "register_at_fork" in text or "_pid != os.getpid()" in text or "_pid == os.getpid()" in text:
                own.append(os.path.relpath(path, root))
    assert own == [], f"fork handled outside telar_checkpoint/forks.py in {own}"
    assert sys.modules["telar_checkpoint.writing"].forks is forks
