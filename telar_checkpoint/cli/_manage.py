"""The commands that change or create: trim, upgrade, reindex, delete, expire, repair, demo."""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass

from telar_checkpoint.cli._commands import command_ttl, opened
from telar_checkpoint.cli._exits import EXIT_CORRUPT, EXIT_FAILED
from telar_checkpoint.cli._output import ProgressBar, confirm, plural, table, to_json
from telar_checkpoint.codec import CheckpointCodec
from telar_checkpoint.errors import StoredDataError, UsageError
from telar_checkpoint.history import History
from telar_checkpoint.inspection import read_thread
from telar_checkpoint.lifetime import SweepReport
from telar_checkpoint.saver import TelarSaver
from telar_checkpoint.server import TTL_VARIABLE
from telar_checkpoint.stores.base import Store
from telar_checkpoint.stores.common import stored_size


@dataclass(slots=True)
class TrimPlan:
    thread_id: str
    before: int  # checkpoints now
    after: int  # checkpoints left after the trim
    torn: bool  # an unterminated last line the rewrite drops


def plan_trim(
    store: Store, thread_ids: list[str], keep: int, progress: ProgressBar
) -> tuple[list[TrimPlan], list[StoredDataError]]:
    """What `trim` would change (threads with nothing to cut are left out), and the corrupt threads."""
    codec = CheckpointCodec()
    plans, corrupt = [], []
    for done, thread_id in enumerate(thread_ids, 1):
        text = store.read(thread_id)
        progress(done, len(thread_ids), thread_id)
        if text is None:
            continue
        try:
            before = History.parse(thread_id, text)
            trimmed = codec.trim(text, keep)
        except StoredDataError as exc:
            corrupt.append(exc)
            continue
        if trimmed != text:
            after = History.parse(thread_id, trimmed)
            plans.append(TrimPlan(thread_id, len(before.entries), len(after.entries), before.torn is not None))
    return plans, corrupt


def cmd_trim(args: types.SimpleNamespace) -> int:
    codec = CheckpointCodec()
    with opened(args.url) as store:
        if args.thread:
            read_thread(store, args.thread)  # a missing thread is an error, not "nothing to trim"
        thread_ids = [args.thread] if args.thread else store.thread_keys()
        bar = ProgressBar("reading threads", args.progress)
        try:
            plans, corrupt = plan_trim(store, thread_ids, args.keep, bar)
        finally:
            bar.close()
        if args.thread and corrupt:
            raise corrupt[0]
        removed = sum(p.before - p.after for p in plans)
        if not args.json:
            if plans:
                print(table(["THREAD", "CHECKPOINTS", "AFTER TRIM", "NOTE"],
                            [[p.thread_id, p.before, p.after, "drops torn last line" if p.torn else ""] for p in plans],
                            right=(1, 2), optional=(3,)))
            else:
                print(f"nothing to trim: every thread has at most {plural(args.keep, 'checkpoint')} to keep")
            for exc in corrupt:
                print(f"skipped corrupt {exc}", file=sys.stderr)
        if plans and not confirm(
            f"Trim {plural(len(plans), 'thread')}, removing {plural(removed, 'checkpoint')}?", args.yes
        ):
            print("aborted; nothing was changed", file=sys.stderr)
            return EXIT_FAILED
        saver = TelarSaver(store)
        for plan in plans:
            saver.rewrite(plan.thread_id, lambda old: codec.trim(old, args.keep))
    if args.json:
        print(to_json({"trimmed": plans, "removed": removed, "corrupt": [str(exc) for exc in corrupt]}))
    elif plans:
        print(f"trimmed {plural(len(plans), 'thread')}: {plural(removed, 'checkpoint')} removed")
    return EXIT_CORRUPT if corrupt else 0


def cmd_upgrade(args: types.SimpleNamespace) -> int:
    from telar_checkpoint.upgrading import upgrade_format

    with opened(args.url) as store:
        bar = ProgressBar("checking threads" if args.dry_run else "upgrading threads", args.progress)
        try:
            report = upgrade_format(store, dry_run=args.dry_run, progress=bar)
        finally:
            bar.close()
    lines = sum(report.upgraded.values())
    if args.json:
        print(to_json({"dry_run": args.dry_run, "upgraded": report.upgraded, "lines": lines, "current": len(report.current),
                       "corrupt": [str(exc) for exc in report.corrupt]}))
        return EXIT_CORRUPT if report.corrupt else 0
    for thread_id, count in report.upgraded.items():
        print(f"{'would rewrite' if args.dry_run else 'rewrote'} {thread_id}: "
              f"{plural(count, 'line')} of a development build")
    for exc in report.corrupt:
        print(f"skipped corrupt {exc}", file=sys.stderr)
    done = "would rewrite" if args.dry_run else "rewrote"
    print(f"{done} {plural(len(report.upgraded), 'thread')} in format versions 1 and 2 "
          f"({plural(lines, 'line')} of a development build); "
          f"{plural(len(report.current), 'thread')} already in versions 1 and 2"
          + (f"; {plural(len(report.corrupt), 'corrupt thread')} skipped (see `verify`)" if report.corrupt else ""))
    return EXIT_CORRUPT if report.corrupt else 0


def cmd_reindex(args: types.SimpleNamespace) -> int:
    with opened(args.url) as store:
        if not store.keeps_index:
            raise UsageError(f"the {store.kind} store keeps no index")
        count = TelarSaver(store).rebuild_index()
    if args.json:
        print(to_json({"reindexed": count}))
    else:
        print(f"indexed {plural(count, 'thread')}")
    return 0


def cmd_delete(args: types.SimpleNamespace) -> int:
    with opened(args.url) as store:
        text = read_thread(store, args.thread)
        try:
            what = f"{plural(len(History.parse(args.thread, text).entries), 'checkpoint')}, "
        except StoredDataError:
            what = "corrupt, "
        what += f"{stored_size(text)} bytes"
        if not confirm(f"Delete thread {args.thread!r} ({what})?", args.yes):
            print("aborted; nothing was changed", file=sys.stderr)
            return EXIT_FAILED
        TelarSaver(store).delete_thread(args.thread)  # a run still writing to it is refused
    if args.json:
        print(to_json({"deleted": args.thread}))
    else:
        print(f"deleted thread {args.thread!r} ({what})")
    return 0


EXPIRE_PART = 100  # threads `expire` handles between two updates of its progress bar


def cmd_expire(args: types.SimpleNamespace) -> int:
    ttl = command_ttl(args, args.strategy)
    if ttl is None or ttl.default_ttl is None:
        raise UsageError(f"expire needs a time-to-live: --ttl MINUTES, or ${TTL_VARIABLE} as JSON ('{{\"default_ttl\": 43200}}')")
    with opened(args.url) as store:
        saver = TelarSaver(store, ttl=ttl)
        if args.dry_run:
            report = saver.sweep(dry_run=True)
        else:
            total = len(store.expired(saver.clock(), 1 << 62))
            bar = ProgressBar("expiring threads", args.progress)
            report = SweepReport()
            try:
                while True:
                    part = saver.sweep(limit=EXPIRE_PART)
                    report.add(part)
                    bar(min(report.examined, total), total)
                    if part.skipped or part.examined < EXPIRE_PART:
                        break
            finally:
                bar.close()
    if args.json:
        print(to_json(report.as_json()))
    else:
        would = "would be " if args.dry_run else ""
        print(f"{plural(len(report.deleted), 'expired thread')} {would}deleted, {len(report.trimmed)} {would}trimmed to "
              f"their latest checkpoint, {plural(report.records_removed, 'deletion record')} {would}removed: "
              f"{report.bytes_freed} bytes {'to free' if args.dry_run else 'freed'}")
    for thread_id, error in report.failed:
        print(f"skipped thread {thread_id!r}: {error}", file=sys.stderr)
    if report.skipped:
        print("another sweep of this store is running (it holds the sweep lease); nothing was done", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_CORRUPT if report.failed else 0


def cmd_demo(args: types.SimpleNamespace) -> int:
    import tempfile

    from telar_checkpoint.cli._commands import history_table
    from telar_checkpoint.cli._output import compact
    from telar_checkpoint.demo import THREAD, run_demo
    from telar_checkpoint.inspection import thread_history

    directory = args.directory or tempfile.mkdtemp(prefix="telar-demo-")
    run = run_demo(directory)
    print(f"telar-checkpoint demo: a graph that asks for approval, stored in {directory}\n")
    print('1. First saver: the run pauses at interrupt() in node "ask".')
    print(f"   It asks: {compact(run.question)}")
    print(f"   Stored: {run.path}")
    print("2. A new saver on the same files finds the pause:")
    print(f"   next: {', '.join(run.paused_next)}; log so far: {compact(run.paused_log)}")
    print('3. It resumes the run with Command(resume="yes"):')
    print(f"   log: {compact(run.log)}")
    print(f"\nThe history (telar-checkpoint history {directory} {THREAD}):\n")
    print(history_table(thread_history(THREAD, run.text)))
    return 0



def cmd_repair(args: types.SimpleNamespace) -> int:
    from urllib.parse import quote

    from telar_checkpoint.repairing import plan_repair, repair

    with opened(args.url) as store:
        plan = plan_repair(args.thread, read_thread(store, args.thread))
        if not plan.needed:
            if args.json:
                print(to_json({"repaired": False, "dropped": [], "backup": None}))
            else:
                print(f"thread {args.thread!r} reads whole: nothing to repair")
            return 0
        if not args.json:
            lines = plan.original.count("\n") + (not plan.original.endswith("\n"))
            print(f"thread {args.thread!r}: {plural(lines, 'line')}, the repair drops {len(plan.dropped)}:")
            for drop in plan.dropped:
                print(f"  line {drop.line}: {drop.reason}")
        if not confirm(f"Repair thread {args.thread!r}, dropping {plural(len(plan.dropped), 'line')}?", args.yes):
            print("aborted; nothing was changed", file=sys.stderr)
            return EXIT_FAILED
        backup = args.backup
        if backup is None and store.kind != "file":
            backup = f"{quote(args.thread, safe='')}.bak.jsonl"  # in the current directory
        done = repair(store, args.thread, backup=backup)
    if args.json:
        print(to_json({"repaired": True, "dropped": done.dropped, "backup": done.backup}))
    else:
        print(f"repaired thread {args.thread!r}: {plural(len(done.dropped), 'line')} dropped; "
              f"the original is in {done.backup}")
    return 0
