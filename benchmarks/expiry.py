"""What a time-to-live costs: a put with one against a put without, and a sweep's time against
the number of threads stored.

    python -m benchmarks.expiry puts --runs 3     # µs per put, with and without ttl=, put by put
    python -m benchmarks.expiry sweep             # 10,000 expired threads among 10,000 and among 100,000

`puts`: a saver without a time-to-live and one with put 6,000 checkpoints each of a 10-message
chat on a thread of their own (the micro workload of `put_floor`), taking turns put by put in
one process (a run), which goes first alternating; the table gives each saver's median put.
`sweep`: a store holding N threads, 10,000 of them idle past the
time-to-live, swept once; its time should depend on the 10,000, not on N (the store's expiry
index), so the two times are within 1.5x of each other.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any

from benchmarks.checkpoints import Chain, sample_messages
from benchmarks.workloads import timed
from telar_checkpoint import TelarSaver
from telar_checkpoint.stores import open_store

TTL = {"default_ttl": 43200}
POSTGRES = "postgresql://127.0.0.1:5432/test"
REDIS = "redis://127.0.0.1:6379/0"


def store_for(kind: str, where: str) -> Any:
    """A new, empty store of `kind` (a server's in a schema or prefix of its own, `cleanup` removes it)."""
    tag = f"telar_bench_{uuid.uuid4().hex[:12]}"
    if kind == "postgres":
        from telar_checkpoint.stores.postgres import PostgresStore

        return PostgresStore(POSTGRES, schema=tag)
    if kind == "redis":
        from telar_checkpoint.stores.redis import RedisStore

        return RedisStore(REDIS, prefix=f"{tag}:")
    return open_store({"memory": "memory://", "file": where, "sqlite": f"sqlite:///{where}/c.db"}[kind]).store


def cleanup(store: Any) -> None:
    """Remove what a server's store holds (its schema, its keys)."""
    if store.kind == "postgres":
        import psycopg

        with psycopg.connect(POSTGRES, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{store.schema}" CASCADE')
    elif store.kind == "redis":
        import redis

        client = redis.Redis.from_url(REDIS)
        for key in client.scan_iter(match=f"{store.prefix}*", count=10_000):
            client.delete(key)
    store.close()


def interleaved_puts(kind: str, puts: int) -> tuple[float, float]:
    """The median put, in µs, of a saver without a time-to-live and of one with, on stores of
    `kind`, taking turns put by put (which goes first alternates), so the machine's drift falls
    on both alike."""
    with tempfile.TemporaryDirectory() as where:
        savers = [TelarSaver(store_for(kind, f"{where}/{i}"), ttl=TTL if i else None) for i in (0, 1)]
        chains = [Chain(saver, "expiry") for saver in savers]
        chat = sample_messages(10)
        for chain in chains:
            for step in range(3):
                chain.put({"messages": chat, "step": step})
        times: list[list[float]] = [[], []]
        try:
            for step in range(puts):
                for i in (0, 1) if step % 2 else (1, 0):
                    config, checkpoint, metadata, versions = chains[i].next({"messages": chat, "step": step})
                    stored, seconds = timed(lambda: savers[i].put(config, checkpoint, metadata, versions))  # noqa: B023
                    times[i].append(seconds * 1e6)
                    chains[i].done(stored, versions)
        finally:
            for saver in savers:
                cleanup(saver.store)
        return statistics.median(times[0]), statistics.median(times[1])


def one_thread(saver: TelarSaver, thread_id: str) -> None:
    chain = Chain(saver, thread_id)
    chain.put({"messages": sample_messages(2), "step": 0})


def sweep_time(kind: str, stored: int, expired: int) -> dict[str, Any]:
    """Seconds to sweep `expired` idle threads out of `stored` (the rest written half a time-to-live later)."""
    import langgraph.checkpoint.base.id as ids

    with tempfile.TemporaryDirectory() as where:
        store = store_for(kind, where)
        real = time.time()
        offset = [0.0]
        clock = lambda: real + offset[0]  # noqa: E731
        ids.time = type("T", (), {"time_ns": staticmethod(lambda: int(clock() * 1e9))})  # type: ignore[assignment]  # ids follow the clock
        saver = TelarSaver(store, ttl=TTL, clock=clock)
        for i in range(expired):
            one_thread(saver, f"old-{i:06}")
        offset[0] += 15 * 86400  # the others, half a time-to-live later
        for i in range(stored - expired):
            one_thread(saver, f"new-{i:06}")
        offset[0] += 15 * 86400 + 2 * 3600  # past the first ones' expiry (recorded to the hour: its grain)
        started = time.perf_counter()
        report = saver.sweep()
        seconds = time.perf_counter() - started
        assert len(report.deleted) == expired, (len(report.deleted), expired)
        cleanup(store)
        return {"stored": stored, "expired": expired, "seconds": seconds, "bytes_freed": report.bytes_freed}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["puts", "sweep"])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--puts", type=int, default=6000)
    parser.add_argument("--kind", default="memory", choices=["memory", "file", "sqlite", "postgres", "redis"])
    parser.add_argument("--expired", type=int, default=10_000)
    parser.add_argument("--stored", type=int, nargs="*", default=[10_000, 100_000])
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a store kind: one run's rounds, as JSON
    args = parser.parse_args(argv)
    if args.one:  # one process: the two savers put by put
        print(json.dumps(interleaved_puts(args.one, args.puts)))
        return
    if args.what == "sweep":
        print("| store | threads stored | expired | sweep s | per expired thread µs |")
        print("|---|---|---|---|---|")
        for stored in args.stored:
            found = sweep_time(args.kind, stored, args.expired)
            print(f"| {args.kind} | {stored:,} | {args.expired:,} | {found['seconds']:.2f} | "
                  f"{found['seconds'] / args.expired * 1e6:.0f} |", flush=True)
        return
    print("| store | run | without ttl µs | with ttl µs | with / without |")
    print("|---|---|---|---|---|")
    for run in range(1, args.runs + 1):  # a process each
        command = [sys.executable, "-m", "benchmarks.expiry", "puts", "--one", args.kind, "--puts", str(args.puts)]
        without, with_ttl = json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout)
        print(f"| {args.kind} | {run} | {without:.1f} | {with_ttl:.1f} | {with_ttl / without:.3f} |", flush=True)

if __name__ == "__main__":
    main()
