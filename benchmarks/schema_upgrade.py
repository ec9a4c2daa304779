"""How long `telar_checkpoint.schema_upgrade.upgrade` takes as a store grows: linear in its threads?

    python -m benchmarks.schema_upgrade                        # 1,000, 3,000 and 10,000 threads, file and SQLite
    python -m benchmarks.schema_upgrade --sizes 500,2000 --stores file --backup
    python -m benchmarks.schema_upgrade --stores memory,postgres,redis,redis-cluster
    python -m benchmarks.schema_upgrade --stores file --dir /dev/shm  # the file store on a tmpfs

Each store is filled with copies of one thread that graph version 1 of tests/schema_graphs.py
left paused in its interrupt (3 checkpoints, 7 pending writes, about 2.4 KB; written with fsync
off, which the timing does not include), then `upgrade(store, SCHEMA)` brings every thread to
version 2 with that module's schema (rename a channel, map it, drop one, rename the paused
node), one atomic rewrite per thread, through a store opened as the CLI opens it (fsync on).
Printed per size: seconds, microseconds per thread, and that figure against the smallest size's
(1.00 everywhere: linear). Not part of the test suite; `run_sizes` is what a smoke test calls.

The file system of `--dir` is printed: on ext4 without a journal (this machine's root file system)
the kernel, creating a file, skips one by one the free inodes of the group that were freed in the
last minute (six when their inode table is not yet written back), and every rewrite frees one
inode and makes one (the temporary file renamed over the old). So a rewrite costs from about 20
µs up to about 0.9 ms more (a whole group, 8,192 inodes) depending on how many files this run,
an earlier size or an earlier run deleted in those minutes, not on the store's size. Measured:
`perf` puts 10% of the CPU in `recently_deleted` under `openat(O_CREAT)`; on a fresh ext4 with
a journal, and one without, both linear at 1,000 to 10,000 threads (2026-12-02).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from telar_checkpoint import TelarSaver
from telar_checkpoint.stores import FileStore, MemoryStore, Store
from telar_checkpoint.stores.sqlite import SQLiteStore


def seed_text() -> str:
    """One thread of graph version 1, paused in node `ask`."""
    from tests.schema_graphs import graph_v1

    store = MemoryStore()
    graph_v1(TelarSaver(store)).invoke({"request": " a request "}, {"configurable": {"thread_id": "seed"}})
    text = store.read("seed")
    assert text is not None
    return text


def file_system(path: Path) -> str:
    """The file system that holds `path`, and whether an ext4 one has a journal (`jbd2`)."""
    try:
        best = ("", "?", "?")
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            fields = line.split()
            mount, rest = fields[4], fields[fields.index("-") + 1 :]
            if (str(path.resolve()) + "/").startswith(mount.rstrip("/") + "/") and len(mount) >= len(best[0]):
                best = (mount, rest[0], rest[1])
        mount, kind, source = best
        if kind != "ext4":
            return f"{kind} ({source} on {mount})"
        journal = any(name.startswith(Path(source).name + "-") for name in os.listdir("/proc/fs/jbd2"))
        return f"ext4 {'with' if journal else 'WITHOUT'} a journal ({source} on {mount})"
    except (OSError, ValueError, IndexError):
        return "unknown"


KINDS = ("memory", "file", "sqlite", "postgres", "redis", "redis-cluster")


def open_store(kind: str, where: Path, *, fsync: bool) -> Store:
    """The store of `kind` for the size measured in `where` (a server store: in a schema or under
    a key prefix named after it, made empty; the test servers of tests/stores.py)."""
    tag = f"telar_bench_{where.name.replace('-', '_')}_{os.getpid()}"
    if kind == "file":
        return FileStore(where / "threads", fsync=fsync)
    if kind == "sqlite":
        return SQLiteStore(where / "threads.db", fsync=fsync)
    if kind == "postgres":
        from telar_checkpoint.stores.postgres import PostgresStore
        from tests.stores import POSTGRES_URL

        return PostgresStore(POSTGRES_URL, schema=tag, application_name=tag)
    if kind in ("redis", "redis-cluster"):
        from telar_checkpoint.stores.redis import RedisStore
        from tests.servers import REDIS_CLUSTER_URL, REDIS_URL

        return RedisStore(REDIS_CLUSTER_URL if kind == "redis-cluster" else REDIS_URL, prefix=f"{tag}:", client_name=tag)
    raise ValueError(f"unknown store kind {kind!r} ({', '.join(KINDS)})")


def drop_store(kind: str, where: Path) -> None:
    """Remove what a server store of `kind` made for `where` (a file or SQLite store is in `where`)."""
    tag = f"telar_bench_{where.name.replace('-', '_')}_{os.getpid()}"
    if kind == "postgres":
        from tests.stores import postgres_admin

        postgres_admin(f'DROP SCHEMA IF EXISTS "{tag}" CASCADE')
    elif kind in ("redis", "redis-cluster"):
        from tests.stores import redis_delete_prefix

        redis_delete_prefix(f"{tag}:", cluster=kind == "redis-cluster")


def fill(kind: str, where: Path, threads: int, text: str) -> Store | None:
    """`threads` copies of `text`; the store itself for a memory store (nothing else holds it)."""
    store = MemoryStore() if kind == "memory" else open_store(kind, where, fsync=False)
    for i in range(threads):
        store.write(f"thread-{i:06d}", text)
    if kind == "memory":
        return store
    store.close()
    return None


def measure(kind: str, where: Path, threads: int, text: str, *, backup: bool = False) -> dict[str, Any]:
    from telar_checkpoint.schema_upgrade import upgrade
    from tests.schema_graphs import SCHEMA

    drop_store(kind, where)
    try:
        store = fill(kind, where, threads, text) or open_store(kind, where, fsync=True)
        try:
            start = time.perf_counter()
            report = upgrade(store, SCHEMA, backup=where / "backups" if backup else None)
            seconds = time.perf_counter() - start
        finally:
            store.close()
    finally:
        drop_store(kind, where)
    assert len(report.upgraded) == threads and not report.failed, (len(report.upgraded), report.failed)
    return {"store": kind, "threads": threads, "seconds": seconds, "us_per_thread": seconds / threads * 1e6}


def run_sizes(kinds: list[str], sizes: list[int], base: Path, *, backup: bool = False, echo: bool = True) -> list[dict[str, Any]]:
    text = seed_text()
    rows = []
    for kind in kinds:
        first = None
        for threads in sizes:
            where = base / f"{kind}-{threads}"
            where.mkdir(parents=True)
            row = measure(kind, where, threads, text, backup=backup)
            first = first or row["us_per_thread"]
            row["vs_smallest"] = row["us_per_thread"] / first
            rows.append(row)
            if echo:
                print(f"{kind:13} {threads:>7,} threads  {row['seconds']:8.2f} s  {row['us_per_thread']:8.0f} µs/thread  "
                      f"x{row['vs_smallest']:.2f} per thread vs {sizes[0]:,}", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,3000,10000", help="thread counts, comma-separated")
    parser.add_argument("--stores", default="file,sqlite", help=f"{', '.join(KINDS)} (comma-separated; the servers "
                        "are the test suite's, tests/stores.py)")
    parser.add_argument("--backup", action="store_true", help="also write each thread's old text to a backup directory")
    parser.add_argument("--dir", default=None, help="where to make the stores (default: a temporary directory)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    kinds = [k.strip() for k in args.stores.split(",")]
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} (1, 5, 15 min); "
          f"{os.cpu_count()} CPUs; thread text {len(seed_text().encode())} bytes", flush=True)
    with tempfile.TemporaryDirectory(prefix="schema-upgrade-", dir=args.dir) as base:
        print(f"file system: {file_system(Path(base))}", flush=True)
        run_sizes(kinds, sizes, Path(base), backup=args.backup)


if __name__ == "__main__":
    main()
