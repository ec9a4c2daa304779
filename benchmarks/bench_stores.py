"""Store-level scaling: one saver step (version + append_if, or update where a store has no
versions) and one read, on a 10-line vs a 5000-line value, per store.

    python -m benchmarks.bench_stores [--lines 10,5000] [--rounds 200] [--only sqlite,postgres]

Prints median µs per operation and the ratio long/short. The servers come from
TELAR_BENCH_POSTGRES / TELAR_BENCH_REDIS (defaults: the test servers); each run uses a
schema / key prefix of its own and removes it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from telar_checkpoint.stores import FileStore, Store

POSTGRES = os.environ.get("TELAR_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
REDIS = os.environ.get("TELAR_BENCH_REDIS", "redis://127.0.0.1:6379/0")
LINE = '{"kind":"checkpoint","id":"%08d","values":{"msgs":"' + "x" * 900 + '"}}\n'


def open_store(kind: str, root: Path, tag: str) -> tuple[Store, Callable[[], None]]:
    if kind == "file":
        return FileStore(root / "files"), lambda: None
    if kind == "sqlite":
        from telar_checkpoint.stores.sqlite import SQLiteStore

        return SQLiteStore(root / "db.sqlite"), lambda: None
    if kind == "postgres":
        import psycopg

        from telar_checkpoint.stores.postgres import PostgresStore

        def drop() -> None:
            with psycopg.connect(POSTGRES, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{tag}" CASCADE')

        return PostgresStore(POSTGRES, schema=tag), drop
    import redis

    from telar_checkpoint.stores.redis import RedisStore

    def wipe() -> None:
        client = redis.Redis.from_url(REDIS)
        for key in client.scan_iter(match=f"{tag}:*", count=1000):
            client.delete(key)
        client.close()

    return RedisStore(REDIS, prefix=f"{tag}:"), wipe


def step(store: Store, key: str, line: str) -> None:
    """What the saver does for one put when its cached history is current."""
    if store.keeps_versions:
        version = store.version(key)
        if store.append_if(key, line, version) is None:
            raise RuntimeError("append_if refused a current version")
    else:
        store.update(key, lambda old: (old or "") + line)


def median_us(call: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", default="10,5000")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--only", default="file,sqlite,postgres,redis")
    args = parser.parse_args()
    sizes = [int(n) for n in args.lines.split(",")]
    print(f"{'store':<9} {'op':<22} " + " ".join(f"{n:>10}" for n in sizes) + f" {'ratio':>7}")
    for kind in args.only.split(","):
        tag = f"bench_stores_{uuid.uuid4().hex[:8]}"
        with tempfile.TemporaryDirectory() as tmp:
            store, cleanup = open_store(kind, Path(tmp), tag)
            try:
                results: dict[str, list[float]] = {"step": [], "read": []}
                for n in sizes:
                    key = f"t{n}"
                    store.write(key, "".join(LINE % i for i in range(n)))
                    store.read(key)
                    results["step"].append(median_us(lambda: step(store, key, LINE % 0), args.rounds))
                    results["read"].append(median_us(lambda: store.read(key), max(20, args.rounds // 5)))
                name = "version+append_if" if store.keeps_versions else "update (no versions)"
                for op, label in (("step", name), ("read", "read")):
                    row = results[op]
                    print(f"{kind:<9} {label:<22} " + " ".join(f"{t:>10.0f}" for t in row) + f" {row[-1] / row[0]:>7.2f}")
            finally:
                store.close()
                cleanup()


if __name__ == "__main__":
    main()
