"""Writers of a thread take turns, and pending writes linger only when a write follows soon."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from telar_checkpoint.saver import WRITES_LINGER
from telar_checkpoint.writer_locks import Lingers, WriterLocks


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_pending_writes_linger_only_once_writes_followed_them_soon() -> None:
    clock = Clock()
    lingers = Lingers(0.002, clock=clock)
    assert lingers.wrote("t", writes=True) == 0.0  # nothing learned yet: no waiting
    for _ in range(10):  # LangGraph's pattern: a put 0.5 ms after each put_writes
        clock.now += 0.0005
        assert lingers.wrote("t", writes=False) == 0.0  # a put never lingers
        clock.now += 0.0003
        linger = lingers.wrote("t", writes=True)
    assert 0.0005 < linger <= 0.002
    for _ in range(10):  # put_writes that nothing follows soon (50 ms later)
        clock.now += 0.05
        assert lingers.wrote("t", writes=False) == 0.0
        clock.now += 0.0003
        linger = lingers.wrote("t", writes=True)
    assert linger == 0.0


def test_futile_lingers_back_off() -> None:
    """A caller that writes one thing after another cannot end a linger: after a few
    futile ones, most put_writes no longer linger."""
    clock = Clock()
    lingers = Lingers(0.002, clock=clock)
    waited = []
    for _ in range(200):
        linger = lingers.wrote("t", writes=True)
        waited.append(linger)
        clock.now += linger + 0.0001  # the next write comes only once the linger is over
        lingers.wrote("t", writes=False)
        clock.now += 0.0001
    assert sum(1 for w in waited[50:] if w) <= 5


def test_writers_of_a_thread_take_turns_in_threads_and_coroutines() -> None:
    locks = WriterLocks()
    assert locks.sync("a") is locks.sync("a")
    inside, most = [0], [0]

    def work() -> None:
        for _ in range(200):
            with locks.sync("a").lock:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
                inside[0] -= 1

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most[0] == 1

    async def main() -> int:
        async def one() -> None:
            async with locks.async_("a").lock:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
                await asyncio.sleep(0)
                inside[0] -= 1

        await asyncio.gather(*(one() for _ in range(20)))
        return most[0]

    most[0] = 0
    assert asyncio.run(main()) == 1


def test_pending_writes_linger_only_on_stores_where_carrying_them_pays(tmp_path: Path) -> None:
    """Measured (see `Store.carry_writes`, benchmarks/results/ab.md): lingering pays on the stores
    whose writes wait for a disk or a server; on the memory store a put_writes is written at once,
    whatever the gaps."""
    from telar_checkpoint import FileStore, MemoryStore, TelarSaver
    from telar_checkpoint.stores.postgres import PostgresStore
    from telar_checkpoint.stores.redis import RedisStore
    from telar_checkpoint.stores.sqlite import SQLiteStore

    clock = Clock()
    lingers = Lingers(0.0, clock=clock)
    for _ in range(10):
        clock.now += 0.0005
        lingers.wrote("t", writes=False)
        clock.now += 0.0003
        assert lingers.wrote("t", writes=True) == 0.0
    assert TelarSaver(MemoryStore())._writer.lingers.limit == 0.0
    assert TelarSaver(FileStore(tmp_path))._writer.lingers.limit == WRITES_LINGER
    assert TelarSaver(SQLiteStore(tmp_path / "x.db"))._writer.lingers.limit == WRITES_LINGER
    assert PostgresStore.carry_writes and RedisStore.carry_writes
