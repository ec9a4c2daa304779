"""The turns of one saver's writers: one writer of a thread at a time, in threads and coroutines."""

from __future__ import annotations

import asyncio
import threading

from telar_checkpoint.writing import Turns


def test_writers_of_a_thread_take_turns_in_threads_and_coroutines() -> None:
    locks = Turns()
    assert locks.sync("a") is locks.sync("a")
    inside, most = [0], [0]

    def work() -> None:
        for _ in range(200):
            with locks.sync("a"):
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
            async with locks.async_("a"):
                inside[0] += 1
                most[0] = max(most[0], inside[0])
                await asyncio.sleep(0)
                inside[0] -= 1

        await asyncio.gather(*(one() for _ in range(20)))
        return most[0]

    most[0] = 0
    assert asyncio.run(main()) == 1
