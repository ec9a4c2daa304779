"""One file store read and written from many threads at once, as LangGraph's executor threads and
`asyncio.to_thread` (every async read) do: no call fails, and every read returns a text that a
writer wrote for that thread (the one text written, for a thread nobody writes).

With the GIL, a thread is switched out only at a few points of the bytecode, so a race between
two lines of the store's code may show once in a million calls. Here every line of the file
store's modules is a switch point (a tracer yields the GIL there), as any point is on a
free-threaded build: a store that kept a cache of its texts without a lock fails at once
(KeyError, evicting a text another thread had just dropped). So the file store keeps no texts;
the saver's caches of parsed histories (`writing.py`) are the one cache.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from telar_checkpoint import FileStore
from telar_checkpoint.stores import file as file_store

KEYS = [f"thread-{n}" for n in range(64)]  # more than a cache of a few dozen texts would keep
WRITTEN_KEYS = KEYS[:4]  # the threads the writers change (half the reads), the others are only read
SECONDS = 1.5  # each worker stops after this long, or after `ROUNDS` calls
ROUNDS = 20_000
STORE_DIR = os.path.dirname(file_store.__file__)


def _in_the_file_store(frame: FrameType) -> bool:
    """Whether `frame` runs code of the file store's modules (stores/file.py, file_*.py)."""
    path = frame.f_code.co_filename
    return os.path.dirname(path) == STORE_DIR and os.path.basename(path).startswith("file")


def _yield_at_each_line(frame: FrameType, event: str, arg: Any) -> Any:
    if event == "line":
        time.sleep(0)  # lets another thread take the GIL
    return _yield_at_each_line


def _tracer(frame: FrameType, event: str, arg: Any) -> Any:
    return _yield_at_each_line if _in_the_file_store(frame) else None


@pytest.fixture
def switches_anywhere() -> Iterator[None]:
    """For the threads started in the test: a switch between threads at every line of the file
    store's code, and as often as the interpreter allows elsewhere."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    threading.settrace(_tracer)
    try:
        yield
    finally:
        threading.settrace(None)  # type: ignore[arg-type]
        sys.setswitchinterval(before)


class Written:
    """Every text a writer made for each thread (before it was written, so a reader may see it)."""

    def __init__(self, first: dict[str, str]) -> None:
        self.texts = {key: {text} for key, text in first.items()}
        self.wrong: list[tuple[str, str | None]] = []
        self.lock = threading.Lock()

    def made(self, key: str, text: str) -> str:
        with self.lock:
            self.texts[key].add(text)
        return text

    def check(self, key: str, text: str | None) -> None:
        with self.lock:
            if text not in self.texts[key]:
                self.wrong.append((key, text))


def test_many_threads_reading_and_writing_one_file_store_get_what_was_written(
    tmp_path: Path, switches_anywhere: None
) -> None:
    store = FileStore(tmp_path / "store", fsync=False)
    first = {key: f"{key}: line 0\n" for key in KEYS}
    for key, text in first.items():
        store.write(key, text)
    written = Written(first)
    deadline = [0.0]

    def rounds() -> Iterator[int]:
        for n in range(ROUNDS):
            if time.monotonic() > deadline[0]:
                return
            yield n

    def some_key(rng: random.Random) -> str:
        return rng.choice(WRITTEN_KEYS if rng.random() < 0.5 else KEYS)

    def reader(rng: random.Random) -> None:
        for _ in rounds():
            key = some_key(rng)
            written.check(key, store.read(key))

    def versions(rng: random.Random) -> None:
        for _ in rounds():
            key = some_key(rng)
            assert store.version(key) is not None
            written.check(key, store.read(key))

    def async_reader(rng: random.Random) -> None:  # `aread` is `read` in the loop's executor threads
        async def reads() -> None:
            for _ in rounds():
                keys = [some_key(rng) for _ in range(4)]
                for key, text in zip(keys, await asyncio.gather(*(store.aread(key) for key in keys))):
                    written.check(key, text)

        asyncio.run(reads())

    def updater(rng: random.Random) -> None:
        for n in rounds():
            key, line = rng.choice(WRITTEN_KEYS), f"{rng.random()} {n}\n"
            if n % 10 == 9:  # now and then a rewrite, not an append
                store.update(key, lambda old: written.made(key, f"{key}: rewritten {line}"))
            else:
                store.update(key, lambda old: written.made(key, f"{old}{key}: line {line}"))

    def deferred_appender(rng: random.Random) -> None:
        for n in rounds():
            key = rng.choice(WRITTEN_KEYS)
            suffix = f"{key}: deferred {rng.random()} {n}\n"
            text, version = store.update_versioned(key, lambda old: old)  # a text and its version
            assert text is not None
            written.made(key, text + suffix)
            if store.append_if_deferred(key, suffix, version) is not None:
                store.flush(key)

    errors: list[BaseException] = []
    bodies: list[Callable[[random.Random], None]] = [reader] * 6 + [versions] * 2 + [async_reader] * 2
    bodies += [updater] * 3 + [deferred_appender] * 3
    start = threading.Barrier(len(bodies) + 1)  # the workers start together, with the clock

    def worker(body: Callable[[random.Random], None], seed: int) -> None:
        try:
            start.wait()
            body(random.Random(seed))
        except BaseException as exc:  # handed to the test
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(body, seed), daemon=True) for seed, body in enumerate(bodies)]
    for thread in threads:
        thread.start()
    deadline[0] = time.monotonic() + SECONDS
    start.wait()
    for thread in threads:
        thread.join(SECONDS + 30.0)
    assert not any(thread.is_alive() for thread in threads), "a worker hung"
    if errors:
        raise AssertionError(f"{len(errors)} of {len(threads)} workers failed, the first with {errors[0]!r}") from errors[0]
    assert not written.wrong, f"{len(written.wrong)} reads returned a text nobody wrote, e.g. {written.wrong[0]!r}"
    store.close()
    reopened = FileStore(tmp_path / "store", fsync=False)
    for key in KEYS[len(WRITTEN_KEYS) :]:
        assert reopened.read(key) == first[key]
    for key in WRITTEN_KEYS:
        assert reopened.read(key) in written.texts[key]
    reopened.close()
