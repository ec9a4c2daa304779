"""The commands that move threads: export, import and migrate, over `telar_checkpoint.migration`."""

from __future__ import annotations

import sys
import types

from telar_checkpoint.cli._commands import dry_target, opened
from telar_checkpoint.cli._exits import EXIT_FAILED, EXIT_NOT_FOUND
from telar_checkpoint.cli._output import ProgressBar, to_json
from telar_checkpoint.errors import StoredDataError, UsageError
from telar_checkpoint.inspection import read_thread
from telar_checkpoint.migration import MigrationReport, export_thread, import_thread, migrate, open_source
from telar_checkpoint.repairing import write_file
from telar_checkpoint.saver import TelarSaver
from telar_checkpoint.stores.file_access import files_mode
from telar_checkpoint.stores.url import store_kind


def cmd_export(args: types.SimpleNamespace) -> int:
    with opened(args.url) as store:
        read_thread(store, args.thread)  # a missing thread: exit code 3
        text = export_thread(TelarSaver(store), args.thread, raw=args.raw)
        mode = files_mode(store, args.thread)
    if args.output:
        try:
            write_file(args.output, text, mode)  # a new file gets the thread files' permissions
        except OSError as exc:
            raise UsageError(f"cannot write {args.output}: {exc.strerror}") from None
        lines = text.count("\n") + (not text.endswith("\n") and bool(text))
        print(f"exported thread {args.thread!r} to {args.output} ({lines} lines)", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def cmd_import(args: types.SimpleNamespace) -> int:
    try:
        if args.file == "-":
            text = sys.stdin.read()
        else:
            with open(args.file, encoding="utf-8", errors="surrogateescape", newline="") as f:
                text = f.read()
    except OSError as exc:
        raise UsageError(f"cannot read {args.file}: {exc.strerror}") from None
    with opened(args.url, create=True) as store:
        report = import_thread(TelarSaver(store), args.thread, text, replace=args.replace)
    return _print_report(report, args.json)


def cmd_migrate(args: types.SimpleNamespace) -> int:
    from telar_checkpoint.schema import load_schema

    schema = load_schema(args.schema) if args.schema is not None else None
    bar = ProgressBar("migrating", args.progress)
    with open_source(args.source) as source, (dry_target(args.target) if args.dry_run else opened(args.target, create=True)) as store:
        # A target that cannot be reached or opened is one error (exit code 5), not a failure
        # per thread: the migration reads it for each thread anyway, --dry-run too.
        try:
            store.read(args.threads[0] if args.threads else "telar-checkpoint")
        except StoredDataError:
            pass  # that thread's own state: the migration reports it
        try:
            report = migrate(source, TelarSaver(store), thread_ids=list(args.threads) or None, dry_run=args.dry_run, progress=bar,
                             schema=schema)
        finally:
            bar.close()
    if args.dry_run:  # a dry run of a store not made yet ran on a memory store in its place: name the real one
        report.target = f"TelarSaver ({store_kind(args.target)} store)"
    return _print_report(report, args.json)


def _print_report(report: MigrationReport, as_json: bool) -> int:
    if as_json:
        print(to_json({"ok": report.ok, **{k: getattr(report, k) for k in report.__slots__}}))
    else:
        print(report.format())
    if report.source_empty:
        return EXIT_NOT_FOUND
    return 0 if report.ok else EXIT_FAILED
