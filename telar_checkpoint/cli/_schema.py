"""`schema status` and `schema upgrade`: threads by state schema version, and bringing them to it
(over `telar_checkpoint.schema` and `telar_checkpoint.schema_upgrade`)."""

from __future__ import annotations

import sys
import types
from typing import Any

from telar_checkpoint.cli._commands import opened
from telar_checkpoint.cli._exits import EXIT_CORRUPT, EXIT_FAILED
from telar_checkpoint.cli._output import ProgressBar, compact, plural, table, to_json
from telar_checkpoint.codec import CheckpointCodec
from telar_checkpoint.errors import UsageError
from telar_checkpoint.history import History
from telar_checkpoint.inspection import next_nodes, state_values
from telar_checkpoint.schema import Schema, load_schema
from telar_checkpoint.schema_upgrade import status, upgrade


def cmd_schema(args: types.SimpleNamespace) -> int:
    schema = load_schema(args.schema)
    if args.action == "status":
        if args.dry_run or args.backup is not None:
            raise UsageError("--dry-run and --backup are options of `schema upgrade`, not of `schema status`")
        return _status(args, schema)
    return _upgrade(args, schema)


def _status(args: types.SimpleNamespace, schema: Schema) -> int:
    with opened(args.url) as store:
        bar = ProgressBar("reading threads", force=args.progress)
        try:
            found = status(store, schema, progress=bar)
        finally:
            bar.close()
    newer = found.newer
    if args.json:
        print(to_json({"schema": schema.version, "versions": {str(v): n for v, n in found.counts.items()},
                       "to_upgrade": found.older, "newer": newer, "corrupt": [str(exc) for exc in found.corrupt]}))
        return EXIT_CORRUPT if found.corrupt else 0
    if found.versions:
        notes = {v: ("current" if v == schema.version else "older: `schema upgrade` rewrites them" if v < schema.version
                     else "NEWER than the schema: refused") for v in found.versions}
        print(table(["VERSION", "THREADS", "NOTE"], [[v, n, notes[v]] for v, n in found.counts.items()], right=(0, 1)))
    for exc in found.corrupt:
        print(f"skipped corrupt {exc}", file=sys.stderr)
    total = sum(found.counts.values())
    summary = (f"{plural(total, 'thread')}: {found.counts.get(schema.version, 0)} at the schema's version "
               f"{schema.version}, {found.older} older to upgrade")
    if newer:
        summary += f", {len(newer)} newer ({', '.join(map(repr, newer[:5]))}{', ...' if len(newer) > 5 else ''})"
    if found.corrupt:
        summary += f"; {plural(len(found.corrupt), 'corrupt thread')} skipped (see `verify`)"
    print(summary)
    return EXIT_CORRUPT if found.corrupt else 0


def _upgrade(args: types.SimpleNamespace, schema: Schema) -> int:
    with opened(args.url) as store:
        bar = ProgressBar("checking threads" if args.dry_run else "upgrading threads", force=args.progress)
        try:
            report = upgrade(store, schema, dry_run=args.dry_run, progress=bar, backup=args.backup)
        finally:
            bar.close()
    failed = {thread: f"{type(exc).__name__}: {exc}" for thread, exc in report.failed.items()}
    if args.json:
        print(to_json({"dry_run": args.dry_run, "schema": schema.version, "upgraded": report.upgraded,
                       "current": len(report.current), "failed": failed, "backups": report.backups,
                       "example": _example(report.example) if args.dry_run else None}))
        return EXIT_FAILED if report.failed else 0
    if args.dry_run and report.example is not None:
        print(_show_example(report.example, schema))
    for thread_id, error in failed.items():
        print(f"FAILED {thread_id!r}: {error}", file=sys.stderr)
    froms: dict[int, int] = {}
    for version in report.upgraded.values():
        froms[version] = froms.get(version, 0) + 1
    verb = "would upgrade" if args.dry_run else "upgraded"
    summary = f"{verb} {plural(len(report.upgraded), 'thread')} to state schema version {schema.version}"
    if froms:
        summary += " (" + ", ".join(f"from version {v}: {n}" for v, n in sorted(froms.items())) + ")"
    summary += f"; {plural(len(report.current), 'thread')} already at version {schema.version}"
    summary += f"; {len(report.failed)} {'would fail' if args.dry_run else 'failed, left as stored'}"
    if report.backups:
        summary += f"; the texts before are in {args.backup}"
    print(summary)
    return EXIT_FAILED if report.failed else 0


def _latest(thread_id: str, text: str) -> dict[str, Any]:
    """The latest root checkpoint of a thread: its id, channel values (readable) and next nodes."""
    entry = History.parse(thread_id, text).latest("")
    if entry is None:
        return {"checkpoint": None, "values": {}, "next": []}
    return {"checkpoint": entry.line.id, "values": state_values(CheckpointCodec(), entry), "next": next_nodes(entry)}


def _example(example: tuple[str, str, str] | None) -> dict[str, Any] | None:
    if example is None:
        return None
    thread_id, before, after = example
    return {"thread": thread_id, "before": _latest(thread_id, before), "after": _latest(thread_id, after)}


def _show_example(example: tuple[str, str, str], schema: Schema) -> str:
    shown = _example(example)
    assert shown is not None
    before, after = shown["before"], shown["after"]
    channels = list(dict.fromkeys([*before["values"], *after["values"]]))
    rows = [[ch, compact(before["values"][ch]) if ch in before["values"] else "-",
             compact(after["values"][ch]) if ch in after["values"] else "-"] for ch in channels]
    rows.append(["(next)", ", ".join(before["next"]) or "-", ", ".join(after["next"]) or "-"])
    head = (f"thread {shown['thread']!r}, latest checkpoint {before['checkpoint']}, "
            f"before and after the upgrade to version {schema.version}:")
    return head + "\n" + table(["CHANNEL", "BEFORE", "AFTER"], rows) + "\n"
