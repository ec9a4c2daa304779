"""What the store contract's tests share: keys and values to store, changes, the work of writer
threads and processes and the checks of what they wrote."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable

try:
    import pytest
except ImportError as exc:  # pragma: no cover - the test extra is missing
    raise ImportError("telar_checkpoint.testing needs pytest and hypothesis: pip install 'telar-checkpoint[test]'") from exc

from telar_checkpoint.stores.base import Change, Store

KEYS = ["a/b", "..", "../../etc/passwd", "/abs", "nul\x00key", "new\nline", "x" * 300, "тред-é", "🧵🪡", "", " ", "%2F", "."]
INDEX_KEYS = ["b", "a", "тред", "nul\x00key", "x" * 300, "", "c/d"]
VALUES = [
    "plain",
    '{"line":1}\n{"line":2}\n',
    "sep\u2028para\u2029end\n",
    '{"nul":"\\u0000"}\n',
    "non-ASCII: é ü ñ 中文 🧵\n",
    "crlf\r\nalone\rend",
    "",
]


def append(suffix: str) -> Change:
    return lambda old: (old or "") + suffix


def fail(_old: str | None) -> str:
    raise RuntimeError("the change refused")


def append_lines(open_store: Callable[[], Store], worker: int, count: int) -> None:
    """Append `count` lines ``worker:i`` to the key "shared", one update each (run in a child process)."""
    store = open_store()
    try:
        for i in range(count):
            store.update("shared", append(f"{worker}:{i}\n"))
    finally:
        store.close()


def append_if_lines(open_store: Callable[[], Store], worker: int, count: int) -> None:
    """`append_if_loop` on a store of its own (run in a child process)."""
    store = open_store()
    try:
        append_if_loop(store, worker, count)
    finally:
        store.close()


def append_if_loop(store: Store, worker: int, count: int) -> None:
    """Append `count` lines ``worker:i:version`` to "shared" by `append_if`, each at the version just
    read, retrying when another writer moved it."""
    i = 0
    while i < count:
        version = store.version("shared")
        if store.append_if("shared", f"{worker}:{i}:{version!r}\n", version) is not None:
            i += 1


def assert_all_lines(value: str | None, *, workers: int, count: int) -> None:
    lines = (value or "").splitlines()
    assert len(lines) == workers * count
    for worker in range(workers):
        assert [line for line in lines if line.startswith(f"{worker}:")] == [f"{worker}:{i}" for i in range(count)]


def assert_one_winner_per_version(value: str | None, *, workers: int, count: int) -> None:
    """Every worker's lines are there once, in order, and no two appended at the same version."""
    lines = (value or "").splitlines()
    assert_all_lines("".join(line.rsplit(":", 1)[0] + "\n" for line in lines), workers=workers, count=count)
    versions = [line.split(":", 2)[2] for line in lines]
    assert len(set(versions)) == len(versions)


def child_exit_code(pid: int, hung: str, timeout: float = 10.0) -> int:
    """The exit code of forked child `pid`; the test fails with `hung` if it does not end in time."""
    deadline = time.monotonic() + timeout
    while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    if done[0] == 0:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        pytest.fail(hung)
    return os.waitstatus_to_exitcode(done[1])


def run_async(store: Store, body: Callable[[Store], Awaitable[None]]) -> None:
    """Run `body(store)` in a new event loop, and close the store's async side in that loop."""

    async def main() -> None:
        try:
            await body(store)
        finally:
            await store.aclose()

    asyncio.run(main())
