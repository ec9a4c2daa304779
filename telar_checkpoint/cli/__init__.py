"""`telar-checkpoint`: look at, check and tidy stored threads from the command line.

A thin layer over the library (`telar_checkpoint.inspection`, `telar_checkpoint.verify`,
the codec and the stores): it parses arguments, prints tables (or JSON with
``--json``) and turns our errors into one-line messages and exit codes:

====  ======================================================
0     done; for verify: every thread is sound
1     verify found errors; a question answered no; other failures
2     a bad URL or bad usage
3     no such thread or checkpoint; a migration source without threads
4     corrupt stored data
5     the store could not be reached or refused the operation
====  ======================================================
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from telar_checkpoint.errors import SerializationError, StoreError, StoredDataError, TelarError, UsageError

EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_CORRUPT = 4
EXIT_STORE = 5

PROG = "telar-checkpoint"
URL_ENV = "TELAR_CHECKPOINT_URL"
URL_HELP = (
    "the store: a directory (or file:///dir), sqlite:///file.db, postgresql://..., redis://... "
    f"(default: ${URL_ENV}, when set)"
)
THREAD_HELP = "a thread id, the thread_id of the graph's config (`telar-checkpoint threads URL` lists them)"

Command = Callable[[argparse.Namespace], int]


def exit_code(exc: TelarError) -> int:
    """The exit code for one of our errors."""
    if isinstance(exc, UsageError):
        return EXIT_USAGE
    if isinstance(exc, LookupError):  # a missing thread or checkpoint, or one that was dropped
        return EXIT_NOT_FOUND
    if isinstance(exc, (StoredDataError, SerializationError)):
        return EXIT_CORRUPT
    if isinstance(exc, StoreError):
        return EXIT_STORE
    return 1


def _add(
    commands: argparse._SubParsersAction,
    name: str,
    summary: str,
    example: str,
    handler: Command,
    *,
    url: bool = True,
    json: bool = True,
) -> argparse.ArgumentParser:
    parser = commands.add_parser(
        name,
        help=summary,
        description=summary,
        epilog=f"example:\n  {example}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(handler=handler)
    if url:  # optional when $TELAR_CHECKPOINT_URL names the store
        parser.add_argument("url", metavar="URL", help=URL_HELP, nargs="?" if os.environ.get(URL_ENV) else None)
    if json:
        parser.add_argument("--json", action="store_true", help="print JSON for scripts instead of a table")
    return parser


def _progress(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--progress", action="store_true", help="draw a progress bar on stderr even when it is not a terminal")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    from telar_checkpoint.cli import _commands as look
    from telar_checkpoint.cli import _manage as manage

    from importlib.metadata import PackageNotFoundError, version

    try:
        installed = version("telar-checkpoint")
    except PackageNotFoundError:  # run from a checkout that was not installed
        installed = "unknown (not installed)"
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Look at, check and tidy the threads a TelarSaver stored.",
        epilog="example:\n  telar-checkpoint threads ./.telar-checkpoint\n\n"
        "Run `telar-checkpoint COMMAND --help` for the options and an example of each command.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {installed}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = _add(commands, "threads", "list the threads: checkpoints, latest step, last update, size",
             "telar-checkpoint threads ./.telar-checkpoint", look.cmd_threads)
    _progress(p)

    p = _add(commands, "history", "list a thread's checkpoints, oldest first",
             "telar-checkpoint history ./.telar-checkpoint my-thread --ns ''", look.cmd_history)
    p.add_argument("thread", metavar="THREAD", help=THREAD_HELP)
    p.add_argument("--ns", metavar="NS", help="only this namespace ('' for the root graph; default: all)")

    p = _add(commands, "show", "show one checkpoint: state, metadata and pending writes",
             "telar-checkpoint show ./.telar-checkpoint my-thread 1ef4f797-8335-6428-8001-8a1503f9b875",
             look.cmd_show)
    p.add_argument("thread", metavar="THREAD", help=THREAD_HELP)
    p.add_argument("checkpoint", metavar="CHECKPOINT", nargs="?", help="a checkpoint id (default: the latest)")
    p.add_argument("--ns", metavar="NS", help="the namespace of CHECKPOINT (default: root for the latest, else any)")

    p = _add(commands, "diff", "what changed in the state between two checkpoints",
             "telar-checkpoint diff ./.telar-checkpoint my-thread 1ef4f797-8335-6428-8001-8a1503f9b875 "
             "1ef4f797-8340-6a1c-8002-b5e2a1c37c1e", look.cmd_diff)
    p.add_argument("thread", metavar="THREAD", help=THREAD_HELP)
    p.add_argument("a", metavar="A", help="the checkpoint id before")
    p.add_argument("b", metavar="B", help="the checkpoint id after")
    p.add_argument("--ns", metavar="NS", help="the namespace of A and B (default: any)")

    p = _add(commands, "verify", "check every stored line; exit code 0 only when all is sound",
             "telar-checkpoint verify sqlite:///checkpoints.db", look.cmd_verify)
    p.add_argument("thread", metavar="THREAD", nargs="?", help="only this thread (default: all, and foreign entries)")
    p.add_argument("--strict", action="store_true", help="fail on warnings too (torn lines, pending writes, foreign entries)")
    p.add_argument("--quiet", "-q", action="store_true", help="print only the threads with findings, and the summary")
    _progress(p)

    p = _add(commands, "trim", "keep only the last N checkpoints of one thread or of all",
             "telar-checkpoint trim ./.telar-checkpoint --keep 20 my-thread", manage.cmd_trim)
    p.add_argument("thread", metavar="THREAD", nargs="?", help="only this thread (default: all)")
    p.add_argument("--keep", metavar="N", type=_positive, required=True, help="checkpoints to keep (at least 1)")
    p.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    _progress(p)

    p = _add(commands, "delete", "delete a thread and all its checkpoints",
             "telar-checkpoint delete ./.telar-checkpoint my-thread --yes", manage.cmd_delete)
    p.add_argument("thread", metavar="THREAD", help=THREAD_HELP)
    p.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")

    p = _add(commands, "repair", "keep every line of a damaged thread that reads; drop the rest (the original is kept)",
             "telar-checkpoint repair ./.telar-checkpoint my-thread", manage.cmd_repair)
    p.add_argument("thread", metavar="THREAD", help=THREAD_HELP)
    p.add_argument("--backup", metavar="FILE", help="where to keep the original text (default: THREAD_FILE.bak beside "
                   "a file store's thread, else ./THREAD.bak.jsonl)")
    p.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")

    p = _add(commands, "demo", "run a LangGraph graph that pauses at interrupt() and resumes in a new saver",
             "telar-checkpoint demo ./demo-checkpoints", manage.cmd_demo, url=False, json=False)
    p.add_argument("directory", metavar="DIR", nargs="?", help="where to store the files (default: a new temporary directory)")

    _add_migration_commands(commands)
    return parser


def _add_migration_commands(commands: argparse._SubParsersAction) -> None:
    from telar_checkpoint.cli import _migrate as moves

    p = _add(commands, "export", "write one thread as a .jsonl file (its stored lines)",
             "telar-checkpoint export ./.telar-checkpoint my-thread -o my-thread.jsonl", moves.cmd_export, json=False)
    p.add_argument("thread", metavar="THREAD", help=THREAD_HELP)
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    p.add_argument("--raw", action="store_true", help="the text exactly as stored, whatever its state (a damaged thread too)")

    p = _add(commands, "import", "store a .jsonl file (from export) as a thread, after checking it reads back",
             "telar-checkpoint import sqlite:///checkpoints.db my-thread my-thread.jsonl", moves.cmd_import)
    p.add_argument("thread", metavar="THREAD", help=THREAD_HELP)
    p.add_argument("file", metavar="FILE", help="the .jsonl file ('-' for stdin)")
    p.add_argument("--replace", action="store_true", help="overwrite a thread that holds a different history")

    p = _add(commands, "migrate", "copy threads from a LangGraph saver or a store of ours into a store of ours",
             "telar-checkpoint migrate --from langgraph+sqlite:///checkpoints.sqlite --to file:///srv/checkpoints",
             moves.cmd_migrate, url=False)
    p.add_argument("--from", dest="source", metavar="URL", required=True,
                   help="langgraph+sqlite:///file.db (SqliteSaver), langgraph+postgresql://... (PostgresSaver) "
                   "or a store URL of ours")
    p.add_argument("--to", dest="target", metavar="URL", required=True, help=URL_HELP)
    p.add_argument("--thread", dest="threads", metavar="ID", action="append", help="only this thread (repeatable)")
    p.add_argument("--dry-run", action="store_true", help="read and check everything, write nothing")
    _progress(p)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with `argv` (default: sys.argv[1:]); returns the exit code."""
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
        # argparse (before 3.13) gives an optional positional nothing when an option comes
        # first: `trim URL --keep 2 THREAD`. Take the THREAD it left over.
        if len(extra) == 1 and not extra[0].startswith("-") and getattr(args, "thread", "") is None:
            args.thread, extra = extra[0], []
        if extra:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        if getattr(args, "url", "") is None:  # optional only when the variable is set
            args.url = os.environ[URL_ENV]
    except SystemExit as exc:  # --help, or a usage error argparse already printed
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    try:
        return args.handler(args)
    except TelarError as exc:
        message = " ".join(line.strip() for line in str(exc).splitlines())  # a driver's message may span lines
        print(f"{PROG}: error: {message}", file=sys.stderr)
        return exit_code(exc)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `telar-checkpoint history ... | head`
        sys.stderr.close()
        return 0


__all__ = ["build_parser", "exit_code", "main"]
