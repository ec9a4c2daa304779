"""`telar-checkpoint`: look at, check and tidy stored threads from the command line.

A thin layer over the library (`telar_checkpoint.inspection`, `telar_checkpoint.verify`,
`telar_checkpoint.repairing`, `telar_checkpoint.migration` and the stores): click parses
the arguments, rich draws tables and progress bars that follow the terminal (or JSON
with ``--json``), and our errors become one-line messages and exit codes:

====  ======================================================
0     done; for verify: every thread is sound
1     verify found errors; a question answered no; other failures
2     a bad URL or bad usage
3     no such thread or checkpoint; a migration source without threads
4     corrupt stored data
5     the store could not be reached or refused the operation
====  ======================================================

click and rich come with the ``cli`` extra (``pip install 'telar-checkpoint[cli]'``);
without them the command says so.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from telar_checkpoint.cli._exits import (
    EXIT_CORRUPT,
    EXIT_FAILED,
    EXIT_NOT_FOUND,
    EXIT_STORE,
    EXIT_USAGE,
    PROG,
    exit_code,
)
from telar_checkpoint.errors import TelarError


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("telar-checkpoint")
    except PackageNotFoundError:  # run from a checkout that was not installed
        return "unknown (not installed)"


def build_app() -> Any:
    """The click command group (needs the ``cli`` extra)."""
    from telar_checkpoint.cli._app import build_app as build

    return build(_version())


def _error(message: str) -> None:
    text = " ".join(line.strip() for line in message.splitlines())  # a driver's message may span lines
    print(f"{PROG}: error: {text}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with `argv` (default: sys.argv[1:]); returns the exit code."""
    try:
        import click
        import rich  # noqa: F401  (checked here, imported where it draws)
    except ImportError as exc:
        _error(f"the command line needs the {exc.name} package: pip install 'telar-checkpoint[cli]'")
        return EXIT_USAGE
    app = build_app()
    try:
        return int(app.main(args=list(sys.argv[1:] if argv is None else argv), prog_name=PROG,
                            standalone_mode=False) or 0)
    except click.ClickException as exc:  # bad usage: click's message, with the usage line
        exc.show()
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.Abort:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except TelarError as exc:
        _error(str(exc))
        return exit_code(exc)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `telar-checkpoint history ... | head`
        sys.stderr.close()
        return 0


__all__ = [
    "EXIT_CORRUPT",
    "EXIT_FAILED",
    "EXIT_NOT_FOUND",
    "EXIT_STORE",
    "EXIT_USAGE",
    "build_app",
    "exit_code",
    "main",
]
