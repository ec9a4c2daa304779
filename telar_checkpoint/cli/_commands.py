"""The commands that look: threads, history, show, diff, verify. Each prints and returns an exit code."""

from __future__ import annotations

import contextlib
import dataclasses
import types
from collections.abc import Iterator

from telar_checkpoint.cli._exits import EXIT_FAILED
from telar_checkpoint.cli._output import ProgressBar, compact, plural, styled, table, to_json, when
from telar_checkpoint.errors import ForeignStoreError, NoStoreError, StoreError, UsageError
from telar_checkpoint.inspection import (
    ThreadListing,
    diff_checkpoints,
    list_threads,
    read_thread,
    show_checkpoint,
    summarize_thread,
    thread_history,
)
from telar_checkpoint.lifetime import TTL, ttl_settings
from telar_checkpoint.saver import TelarSaver
from telar_checkpoint.server import ttl_from_environment
from telar_checkpoint.stores.base import Store
from telar_checkpoint.stores.memory import MemoryStore
from telar_checkpoint.stores.opening import open_store
from telar_checkpoint.stores.url import local_path
from telar_checkpoint.verify import verify_store

_STATUS_COLOURS = {"FAILED": "red", "warn": "yellow", "ok": "green"}


@contextlib.contextmanager
def opened(url: str, *, create: bool = False) -> Iterator[Store]:
    """The store `url` names, closed after use. Unless `create`, nothing is created or changed:
    a mistyped path or another tool's database is an error, not a new empty store. With `create`,
    the store is set up at once, so that a server that cannot be reached, or another tool's
    data, is one error before anything is read."""
    store = open_store(url, create=create).store
    try:
        if create:
            store.setup()
        yield store
    finally:
        store.close()


@contextlib.contextmanager
def dry_target(url: str) -> Iterator[Store]:
    """A dry run's target, which it must not create: the store there, opened without creating
    anything, or an empty memory store when there is none yet (another tool's data is refused)."""
    try:
        store = open_store(url, create=False).store
    except ForeignStoreError:
        raise
    except NoStoreError:
        path = local_path(url)
        if path is not None and any(p.exists() and not p.is_dir() for p in path.parents):
            raise StoreError(f"cannot create a store at {path}: a part of its path is a file, not a directory") from None
        store = MemoryStore()
    try:
        yield store
    finally:
        store.close()


def cmd_threads(args: types.SimpleNamespace) -> int:
    with opened(args.url) as store:
        ttl = command_ttl(args)
        expired = TelarSaver(store, ttl=ttl).is_expired if ttl is not None else None
        bar = ProgressBar("reading threads", args.progress)
        try:
            listing = list_threads(store, progress=bar, expired=expired)
        finally:
            bar.close()
        if args.expired:  # the expired threads in the table, and nothing else
            if expired is None:
                raise UsageError("--expired needs a time-to-live: --ttl MINUTES, or $TELAR_CHECKPOINT_TTL")
            listing = ThreadListing(threads=[summarize_thread(t, text) for t in listing.expired if (text := store.read(t))])
    if args.json:
        print(to_json(listing))
        return 0
    rows = [
        [t.thread_id, t.checkpoints, t.latest_step, when(t.updated), t.size, "torn last line" if t.torn else ""]
        for t in listing.threads
    ]
    headers = ["THREAD", "CHECKPOINTS", "LATEST STEP", "UPDATED (UTC)", "BYTES", "NOTE"]
    if rows:
        print(table(headers, rows, right=(1, 2, 4), optional=(5,)))
    total = sum(t.size for t in listing.threads)
    print(f"{plural(len(listing.threads), 'thread')}, {total} bytes")
    if listing.corrupt:
        print(f"\nCorrupt threads ({len(listing.corrupt)}; `telar-checkpoint verify` says more):")
        for bad in listing.corrupt:
            print(f"  {bad.thread_id}: {bad.error}")
    if listing.deleted:
        print(f"\n{plural(len(listing.deleted), 'deleted thread')} recorded, so a run still writing to one is refused")
    if listing.expired:
        print(f"\n{plural(len(listing.expired), 'expired thread')} not shown (idle longer than the time-to-live): "
              "--expired lists them, `telar-checkpoint expire` reclaims their space")
    if listing.foreign:
        print(f"\nForeign entries ({len(listing.foreign)}; not histories of ours, never touched):")
        for name in listing.foreign:
            print(f"  {name}")
    return 0


def command_ttl(args: types.SimpleNamespace, strategy: str | None = None) -> TTL | None:
    """The time-to-live a command applies: --ttl (and `strategy`), else $TELAR_CHECKPOINT_TTL (the
    JSON of langgraph.json's `checkpointer.ttl`); None when neither gives one. A command neither
    sweeps in the background nor restarts a thread's clock when it reads it."""
    settings = {"default_ttl": args.ttl} if args.ttl is not None else ttl_from_environment()
    if settings is None:
        return None
    if strategy:
        settings = {**settings, "strategy": strategy}
    return dataclasses.replace(ttl_settings(settings), sweep_interval_minutes=None, refresh_on_read=False)


def cmd_history(args: types.SimpleNamespace) -> int:
    with opened(args.url) as store:
        text = read_thread(store, args.thread)
    infos = thread_history(args.thread, text, ns=args.ns)
    if not infos and args.ns:  # `--ns child` where the namespaces are `child:<task id>`
        infos = [i for i in thread_history(args.thread, text) if i.ns.split(":", 1)[0] == args.ns]
    if args.json:
        print(to_json(infos))
        return 0
    print(history_table(infos))
    return 0


def history_table(infos: list) -> str:
    """The `history` table: one checkpoint a row, oldest first."""
    rows = [
        [i.id, i.ns or "", i.step, i.source, when(i.ts), i.format, ", ".join(i.next),
         " ".join(compact(v) for v in i.interrupts)]
        for i in infos
    ]
    headers = ["CHECKPOINT", "NAMESPACE", "STEP", "SOURCE", "TIME (UTC)", "V", "NEXT", "INTERRUPTS"]
    return table(headers, rows, right=(2, 5), optional=(1,)) + f"\n{plural(len(infos), 'checkpoint')}"


def cmd_show(args: types.SimpleNamespace) -> int:
    with opened(args.url) as store:
        text = read_thread(store, args.thread)
    view = show_checkpoint(args.thread, text, args.checkpoint, ns=args.ns)
    if args.json:
        print(to_json(view))
        return 0
    info = view.info
    print(f"checkpoint  {info.id}")
    if info.ns:
        print(f"namespace   {info.ns}")
    print(f"step        {info.step} ({info.source}), format {info.format}, {when(info.ts)} UTC")
    print(f"schema      version {view.schema} (the thread's state schema)")
    print(f"parent      {info.parent or '-'}")
    print(f"next        {', '.join(info.next) or '-'}")
    if info.interrupts:
        print(f"interrupts  {' '.join(compact(v) for v in info.interrupts)}")
    print("\nstate:")
    print(_indent(to_json(view.values)))
    print("\nmetadata:")
    print(_indent(to_json(view.metadata)))
    print(f"\npending writes ({len(view.writes)}):")
    for w in view.writes:
        node = w["path"].rsplit(", ", 1)[-1] if w["path"] else "-"
        print(f"  {node} [task {w['task'][:8]}] {w['channel']} = {compact(w['value'])}")
    return 0


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())


def cmd_diff(args: types.SimpleNamespace) -> int:
    with opened(args.url) as store:
        text = read_thread(store, args.thread)
    changes = diff_checkpoints(args.thread, text, args.a, args.b, ns=args.ns)
    if args.json:
        print(to_json(changes))
        return 0
    if not changes:
        print("no change in the state")
    for c in changes:
        if c.kind == "added":
            print(f"+ {c.channel} = {compact(c.after)}")
        elif c.kind == "removed":
            print(f"- {c.channel} (was {compact(c.before)})")
        elif c.kind == "appended":
            print(f"~ {c.channel} appended {compact(c.appended)}")
        else:
            print(f"~ {c.channel}: {compact(c.before)} -> {compact(c.after)}")
    return 0


def cmd_verify(args: types.SimpleNamespace) -> int:
    with opened(args.url) as store:
        bar = ProgressBar("verifying", args.progress)
        try:
            report = verify_store(store, [args.thread] if args.thread else None, progress=bar)
        finally:
            bar.close()
    failed = not report.ok or (args.strict and bool(report.problems))
    if args.json:
        threads = {
            thread_id: [
                {"line": p.line, "severity": p.severity, "code": p.code, "message": p.message} for p in problems
            ]
            for thread_id, problems in report.threads.items()
        }
        print(to_json({"ok": not failed, "threads": threads, "foreign": report.foreign, "stale": report.stale}))
        return EXIT_FAILED if failed else 0
    counts = {"ok": 0, "warnings": 0, "errors": 0}
    for thread_id, problems in report.threads.items():
        errors = sum(p.severity == "error" for p in problems)
        status = "FAILED" if errors else "warn" if problems else "ok"
        counts["errors" if errors else "warnings" if problems else "ok"] += 1
        if args.quiet and not problems:
            continue
        print(f"{styled(status, _STATUS_COLOURS[status])}{' ' * (7 - len(status))} {thread_id}")
        for p in problems:
            print(f"  {p}")
    for name in report.foreign:
        print(f"foreign {name}: not a history of ours (never touched)")
    for name in report.stale:
        print(f"stale   {name}: a temporary file a killed rewrite left (the next rewrite removes it)")
    summary = (
        f"\n{plural(len(report.threads), 'thread')}: {counts['ok']} ok, "
        f"{counts['warnings']} with warnings only, {counts['errors']} failed"
    )
    if report.foreign:
        summary += f"; {plural(len(report.foreign), 'foreign entry').replace('entrys', 'entries')}"
    if failed and report.ok:  # only --strict failed it: say on what
        codes = sorted({p.code for p in report.problems})
        summary += f" -- FAILED (--strict: warnings {', '.join(codes)})"
    else:
        summary += " -- FAILED" if failed else " -- sound"
    print(summary.lstrip("\n") if args.quiet and not any(report.threads.values()) and not report.foreign else summary)
    return EXIT_FAILED if failed else 0
