"""Run the benchmarks of issue 5 and write benchmarks/results/latest.{json,md}.

    python -m benchmarks.run            # the full run (about 10-15 minutes)
    python -m benchmarks.run --quick    # a smoke run, under 2 minutes
    python -m benchmarks.run --quick --only InMemorySaver,Telar/file

Every contender runs in this one process, interleaved round by round, and the
report gives ratios between contenders of the same run. PostgreSQL and Redis are
taken from TELAR_BENCH_POSTGRES / TELAR_BENCH_REDIS (default: the local servers);
a contender whose server is unreachable is skipped and the report says so.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import shlex
import signal
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from benchmarks import contenders as contenders_module
from benchmarks import report, workloads
from benchmarks.contenders import ALL, FLOOR, Lab, open_contenders, server_problems
from benchmarks.workloads import Settings, log

FULL = Settings()
QUICK = Settings(
    turns=20, turn_budget_s=6.0, micro_rounds=20, long_chat_rounds=20, scale_levels=(10, 100, 1000), scale_repeats=3,
    workers=8, worker_turns=3, concurrency_rounds=1,
)  # fmt: skip
RESULTS = Path(__file__).parent / "results"
PACKAGES = (
    "telar-checkpoint", "langgraph", "langgraph-checkpoint", "langgraph-checkpoint-sqlite",
    "langgraph-checkpoint-postgres", "langgraph-checkpoint-plainredis", "langchain-core",
    "psycopg", "redis", "orjson",
)  # fmt: skip


def results_of(command: str, began: float, savers: list[str]) -> dict[str, Any]:
    """The head of a benchmark's results: its command, when it began, how long it took, and the
    machine (`machine`, with the servers of `savers`)."""
    lab = Lab.create()
    try:
        about = machine(savers, lab)
    finally:
        lab.cleanup()
    return {
        "command": command,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(began)),
        "seconds": time.time() - began,
        "machine": about,
    }


def write_results(out: Path, stem: str, results: dict[str, Any], table: str) -> None:
    """Write a benchmark's `results` (`stem`.json) and its `table` (`stem`.md) to `out`, and print the table."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps(results, indent=1) + "\n")
    (out / f"{stem}.md").write_text(table)
    print(table)
    log(f"wrote {out / stem}.md and .json ({results['seconds']:.0f} s)")


def machine(names: list[str], lab: Lab) -> dict[str, Any]:
    packages = {}
    for name in PACKAGES:
        try:
            packages[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            packages[name] = "not installed"
    root = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "telar_checkpoint"], cwd=root, capture_output=True, text=True).stdout
        commit += " (telar_checkpoint/ has uncommitted changes)" if dirty.strip() else ""
    except OSError:
        commit = "unknown"
    return {
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "commit": commit,
        "packages": packages,
        "servers": _servers(names, lab),
    }


def _servers(names: list[str], lab: Lab) -> dict[str, str]:
    found = {}
    if contenders_module.NEEDS_POSTGRES & set(names):
        import psycopg

        with psycopg.connect(lab.postgres_url) as conn:
            found["postgres"] = str(conn.execute("SHOW server_version").fetchone()[0])  # type: ignore[index]
    if contenders_module.NEEDS_REDIS & set(names):
        import redis

        client = redis.Redis.from_url(lab.redis_url)
        found["redis"] = str(client.info("server")["redis_version"])
        client.close()
    return found


def _postgres_blockers(url: str) -> list[str]:
    """A note when other sessions hold old snapshots, which keep VACUUM from reclaiming dead rows."""
    import psycopg

    query = (
        "SELECT count(*), coalesce(max(extract(epoch FROM now() - xact_start)), 0) FROM pg_stat_activity "
        "WHERE pid <> pg_backend_pid() AND backend_xmin IS NOT NULL AND now() - xact_start > interval '1 minute'"
    )
    with psycopg.connect(url) as conn:
        count, oldest = conn.execute(query).fetchone()  # type: ignore[misc]
    if not count:
        return []
    return [
        f"PostgreSQL: {count} other session(s) held a transaction open (the oldest for {oldest / 60:.0f} min), "
        "so neither autovacuum nor VACUUM FULL could reclaim dead row versions during this run: the Postgres "
        "sizes include every superseded version of each row."
    ]


def run(settings: Settings, names: list[str], out_dir: Path | None = RESULTS, data_dir: str | None = None,
        command: str = "") -> dict[str, Any]:  # fmt: skip
    """Run every workload on the contenders `names`; write the results to `out_dir` (None: don't)."""
    began = time.time()
    lab = Lab.create(data_dir)
    notes = []
    skipped = server_problems(names, lab)
    for name, why in skipped.items():
        notes.append(f"{name} skipped: {why}")
        log(f"{name} skipped: {why}")
    names = [n for n in names if n not in skipped]
    results: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": command,
        "machine": machine(names, lab),
        "settings": settings.as_dict(),
        "contenders": names,
        "skipped": skipped,
    }
    opened = open_contenders(names, lab)
    try:
        log(f"1. agent loop: {settings.turns} turns x {len(opened)} savers + no checkpointer")
        results["agent_loop"] = workloads.agent_loop(opened, settings)
        log("4. storage")
        results["storage"] = workloads.storage(opened)
        log(f"2. micro: {settings.micro_rounds} rounds")
        results["micro"] = workloads.micro(opened, settings)
        log(f"2b. long chat: {settings.long_chat_rounds} puts at {settings.long_chat_messages} messages and up")
        results["long_chat"] = workloads.long_chat(opened, settings)
        log(f"3. scaling: {settings.scale_levels}")
        results["scaling"] = workloads.scaling(opened, settings)
        log(f"5. concurrency: {settings.workers} workers x {settings.worker_turns} turns")
        results["concurrency"] = workloads.concurrency(opened, settings)
    finally:
        for c in opened:
            c.close()
        lab.cleanup()
    stopped = [n for n, r in results["agent_loop"].items() if n != "baseline" and r["stopped_early"]]
    if stopped:
        notes.append(
            f"agent loop: {', '.join(stopped)} stopped before {settings.turns} turns (their invokes took over "
            f"{settings.turn_budget_s:.0f} s); their medians cover fewer, earlier (cheaper) turns, "
            "and targets compare only the turns both sides ran."
        )
    if contenders_module.NEEDS_POSTGRES & set(names):
        notes.extend(_postgres_blockers(lab.postgres_url))
    results["notes"] = notes
    results["seconds"] = time.time() - began
    results["targets"] = [t.as_dict() for t in report.targets(results)]
    ratio, detail = report.floor(results)
    results["floor"] = {"saver": FLOOR, "vs": "InMemorySaver", "ratio": ratio, "detail": detail}
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "latest.json").write_text(json.dumps(results, indent=1) + "\n")
        (out_dir / "latest.md").write_text(report.markdown(results))
        log(f"wrote {out_dir / 'latest.json'} and {out_dir / 'latest.md'}")
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run in under 2 minutes")
    parser.add_argument("--only", help=f"comma-separated contenders (default: all of {', '.join(ALL)}); {FLOOR} is always added")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where latest.json and latest.md go")
    parser.add_argument("--data-dir", help="where files and SQLite databases go (default: the system temp dir)")
    for field in dataclasses.fields(Settings):
        flag = "--" + field.name.replace("_", "-")
        kind = float if field.type == "float" else str if field.type == "str" else int
        if field.name == "scale_levels":
            parser.add_argument(flag, help="comma-separated thread lengths")
        else:
            parser.add_argument(flag, type=kind, help=f"override (full: {getattr(FULL, field.name)})")
    args = parser.parse_args(argv)
    settings = QUICK if args.quick else FULL
    for field in dataclasses.fields(Settings):
        value = getattr(args, field.name)
        if value is not None:
            if field.name == "scale_levels":
                value = tuple(int(v) for v in value.split(","))
            settings = dataclasses.replace(settings, **{field.name: value})
    names = args.only.split(",") if args.only else list(ALL)
    if FLOOR not in names:  # LangGraph's own floor is shown in every run (it costs little: no serialization)
        names.insert(names.index("InMemorySaver") + 1 if "InMemorySaver" in names else 0, FLOOR)
    unknown = [n for n in names if n not in ALL]
    if unknown:
        parser.error(f"unknown contenders {unknown}; choose from {', '.join(ALL)}")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so `finally` removes schemas and keys
    command = shlex.join(["python", "-m", "benchmarks.run", *(sys.argv[1:] if argv is None else argv)])
    results = run(settings, names, args.out, args.data_dir, command)
    print(report.markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
