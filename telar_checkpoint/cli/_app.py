"""The commands, their arguments and help, declared with click (each handler lives in its own module)."""

from __future__ import annotations

import os
import types
from collections.abc import Callable, Sequence
from typing import Any

import click

from telar_checkpoint.cli._exits import PROG

URL_ENV = "TELAR_CHECKPOINT_URL"
URL_HELP = (
    "the store: a directory (or file:///dir), sqlite:///file.db, postgresql://..., redis://... "
    f"(default: ${URL_ENV}, when set)"
)
THREAD_HELP = "a thread id, the thread_id of the graph's config (`telar-checkpoint threads URL` lists them)"

Handler = Callable[[types.SimpleNamespace], int]


class _Positive(click.ParamType):
    name = "N"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        try:
            number = int(value)
        except ValueError:
            self.fail(f"not a number: {value!r}", param, ctx)
        if number < 1:
            self.fail(f"must be at least 1, not {number}", param, ctx)
        return number


class _Argument(click.Argument):
    """A positional argument with a line of help (click's own take one only from 8.5); the usage
    line shows one that may be left out in brackets (``URL [THREAD]``)."""

    def __init__(self, name: str, metavar: str, help: str, *, required: bool = True, type: Any = None) -> None:
        super().__init__([name], metavar=metavar if required else f"[{metavar}]", required=required, type=type)
        self.label = metavar
        self.help = help


def _arguments_help(params: Sequence[click.Parameter], formatter: click.HelpFormatter) -> None:
    rows = [(p.label, p.help or "") for p in params if isinstance(p, _Argument)]
    if rows:
        with formatter.section("Arguments"):
            formatter.write_dl(rows)


class _PlainEpilog:
    """The epilog (an example) printed as written, not re-wrapped or indented."""

    epilog: str | None

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        if self.epilog:
            formatter.write_paragraph()
            formatter.write(self.epilog + "\n")


class _Command(_PlainEpilog, click.Command):
    """A command whose URL may come from $TELAR_CHECKPOINT_URL: when it is set and a required
    argument is missing, the arguments given are the ones after URL."""

    def format_arguments(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """click 8.5 lists documented arguments itself; ours does, for every click from 8.1."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        _arguments_help(self.params, formatter)
        super().format_options(ctx, formatter)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        url = os.environ.get(URL_ENV)
        if url and not ctx.resilient_parsing and any(p.name == "url" for p in self.params) and self._short_of_one(args):
            args = [url, *args]
        return super().parse_args(ctx, args)

    def _short_of_one(self, args: list[str]) -> bool:
        """True when the arguments leave a required positional argument empty."""
        probe = self.make_context(self.name, list(args), resilient_parsing=True)
        return any(
            isinstance(p, click.Argument) and p.required and probe.params.get(p.name) is None
            for p in self.params
        )


class _ActionCommand(_Command):
    """A command whose first argument is an action (`schema status URL`): the URL from
    $TELAR_CHECKPOINT_URL goes after it."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        url = os.environ.get(URL_ENV)
        if url and not ctx.resilient_parsing and args and not args[0].startswith("-") and self._short_of_one(args):
            args = [args[0], url, *args[1:]]
        return click.Command.parse_args(self, ctx, args)


def _run(handler: Handler) -> Callable[..., int]:
    def callback(**params: Any) -> int:
        return handler(types.SimpleNamespace(**params))

    return callback


def _command(
    group: click.Group,
    name: str,
    summary: str,
    example: str,
    handler: Handler,
    params: Sequence[click.Parameter] = (),
    *,
    url: bool = True,
    json: bool = True,
    progress: bool = False,
    cls: type[_Command] = _Command,
) -> None:
    """Add `name` to `group`: URL first (unless not `url`), then `params`, then --json and --progress."""
    declared: list[click.Parameter] = []
    if url:
        declared.append(_Argument("url", "URL", URL_HELP))
    declared += params
    if json:
        declared.append(click.Option(["--json"], is_flag=True, help="print JSON for scripts instead of a table"))
    if progress:
        declared.append(click.Option(["--progress"], is_flag=True,
                                     help="draw a progress bar on stderr even when it is not a terminal"))
    group.add_command(cls(
        name, callback=_run(handler), params=declared, help=summary, short_help=summary,
        epilog=f"example:\n  {example}", context_settings={"help_option_names": ["-h", "--help"]},
    ))  # fmt: skip


def _thread(*, optional: str | None = None) -> click.Argument:
    """THREAD; with `optional`, it may be left out, and `optional` says what that means."""
    return _Argument("thread", "THREAD", optional or THREAD_HELP, required=optional is None)


def _yes() -> click.Option:
    return click.Option(["--yes", "-y"], is_flag=True, help="do not ask for confirmation")


def _ns(text: str) -> click.Option:
    return click.Option(["--ns"], metavar="NS", default=None, help=text)


class _Group(_PlainEpilog, click.Group):
    """The command group, its example printed as written."""


def build_app(version: str) -> click.Group:
    """The `telar-checkpoint` command group."""
    from telar_checkpoint.cli import _commands as look
    from telar_checkpoint.cli import _manage as manage
    from telar_checkpoint.cli import _migrate as moves
    from telar_checkpoint.cli import _schema as schema
    from telar_checkpoint.cli import _ui as ui

    app = _Group(
        PROG,
        help="Look at, check and tidy the threads a TelarSaver stored.",
        epilog="example:\n  telar-checkpoint threads ./.telar-checkpoint\n\n"
        "Run `telar-checkpoint COMMAND --help` for the options and an example of each command.",
        context_settings={"help_option_names": ["-h", "--help"]},
        params=[click.Option(["--version"], is_flag=True, expose_value=False, is_eager=True,
                             callback=_print_version(version), help="print the version and exit")],
    )
    _command(app, "threads", "list the threads: checkpoints, latest step, last update, size",
            "telar-checkpoint threads ./.telar-checkpoint", look.cmd_threads,
            [_ttl_option("hide the threads idle longer than MINUTES"),
             click.Option(["--expired"], is_flag=True, help="list only the threads that expired (with a time-to-live)")],
            progress=True)
    _command(app, "history", "list a thread's checkpoints, oldest first",
            "telar-checkpoint history ./.telar-checkpoint my-thread --ns ''", look.cmd_history,
            [_thread(), _ns("only this namespace ('' for the root graph, NODE for NODE:<task> subgraphs; default: all)")])
    _command(app, "show", "show one checkpoint: state, metadata and pending writes",
            "telar-checkpoint show ./.telar-checkpoint my-thread 1ef4f797-8335-6428-8001-8a1503f9b875", look.cmd_show,
            [_thread(), _Argument("checkpoint", "CHECKPOINT", "a checkpoint id (default: the latest)", required=False),
             _ns("the namespace of CHECKPOINT (default: root for the latest, else any)")])
    _command(app, "diff", "what changed in the state between two checkpoints",
            "telar-checkpoint diff ./.telar-checkpoint my-thread 1ef4f797-8335-6428-8001-8a1503f9b875 "
            "1ef4f797-8340-6a1c-8002-b5e2a1c37c1e", look.cmd_diff,
            [_thread(), _Argument("a", "A", "the checkpoint id before"), _Argument("b", "B", "the checkpoint id after"),
             _ns("the namespace of A and B (default: any)")])
    _command(app, "verify", "check every stored line; exit code 0 only when all is sound",
            "telar-checkpoint verify sqlite:///checkpoints.db", look.cmd_verify,
            [_thread(optional="only this thread (default: all, and foreign entries)"),
             click.Option(["--strict"], is_flag=True,
                          help="fail on warnings too (torn lines, pending writes, foreign entries)"),
             click.Option(["--quiet", "-q"], is_flag=True,
                          help="print only the threads with findings, and the summary")], progress=True)
    _command(app, "ui", "serve a read-only web page of the threads: timelines, state changes, conversations, pauses",
            "telar-checkpoint ui ./.telar-checkpoint --open", ui.cmd_ui,
            [click.Option(["--host"], metavar="HOST", default="127.0.0.1", show_default=True,
                          help="the address to listen on; any but a loopback one asks for a token it prints"),
             click.Option(["--port"], metavar="PORT", type=click.IntRange(0, 65535), default=8765, show_default=True,
                          help="the port to listen on"),
             click.Option(["--open"], is_flag=True, help="open the page in the default browser")], json=False)
    _command(app, "trim", "keep only the last N checkpoints of one thread or of all",
            "telar-checkpoint trim ./.telar-checkpoint --keep 20 my-thread", manage.cmd_trim,
            [_thread(optional="only this thread (default: all)"),
             click.Option(["--keep"], metavar="N", type=_Positive(), required=True,
                          help="checkpoints to keep (at least 1)"), _yes()], progress=True)
    _command(app, "upgrade", "rewrite the threads a development build stored (format version 3) in versions 1 and 2",
            "telar-checkpoint upgrade ./.telar-checkpoint --dry-run", manage.cmd_upgrade,
            [click.Option(["--dry-run"], is_flag=True, help="count the threads to rewrite, write nothing")],
            progress=True)
    _command(app, "reindex", "rebuild the index that list(None) and delete_for_runs look threads up in",
            "telar-checkpoint reindex ./.telar-checkpoint", manage.cmd_reindex)
    _command(app, "delete", "delete a thread and all its checkpoints",
            "telar-checkpoint delete ./.telar-checkpoint my-thread --yes", manage.cmd_delete, [_thread(), _yes()])
    _command(app, "expire", "delete (or trim to their latest checkpoint) the threads idle longer than a time-to-live",
            "telar-checkpoint expire sqlite:///checkpoints.db --ttl 43200 --dry-run", manage.cmd_expire,
            [_ttl_option("how long a thread may be idle"),
             click.Option(["--strategy"], metavar="STRATEGY", type=click.Choice(["delete", "keep_latest"]), default=None,
                          help="delete (the default: an expired thread becomes its deletion record) or keep_latest"),
             click.Option(["--dry-run"], is_flag=True, help="report what would expire, change nothing")],
            progress=True)
    _command(app, "repair", "keep every line of a damaged thread that reads; drop the rest (the original is kept)",
            "telar-checkpoint repair ./.telar-checkpoint my-thread", manage.cmd_repair,
            [_thread(), click.Option(["--backup"], metavar="FILE", help="where to keep the original text (default: "
                                    "THREAD_FILE.bak beside a file store's thread, else ./THREAD.bak.jsonl)"), _yes()])
    _command(app, "demo", "run a LangGraph graph that pauses at interrupt() and resumes in a new saver",
            "telar-checkpoint demo ./demo-checkpoints", manage.cmd_demo,
            [_Argument("directory", "DIR", "where to store the files (default: a new temporary directory)",
                       required=False)], url=False, json=False)
    _command(app, "export", "write one thread as a .jsonl file (its stored lines)",
            "telar-checkpoint export ./.telar-checkpoint my-thread -o my-thread.jsonl", moves.cmd_export,
            [_thread(), click.Option(["-o", "--output"], metavar="FILE", help="write to FILE instead of stdout"),
             click.Option(["--raw"], is_flag=True,
                          help="the text exactly as stored, whatever its state (a damaged thread too)")], json=False)
    _command(app, "import", "store a .jsonl file (from export) as a thread, after checking it reads back",
            "telar-checkpoint import sqlite:///checkpoints.db my-thread my-thread.jsonl", moves.cmd_import,
            [_thread(), _Argument("file", "FILE", "the .jsonl file ('-' for stdin)"),
             click.Option(["--replace"], is_flag=True, help="overwrite a thread that holds a different history")])
    _command(app, "migrate", "copy threads from a LangGraph saver or a store of ours into a store of ours",
            "telar-checkpoint migrate --from langgraph+sqlite:///checkpoints.sqlite --to file:///srv/checkpoints",
            moves.cmd_migrate,
            [click.Option(["--from", "source"], metavar="URL", required=True,
                          help="langgraph+sqlite:///file.db (SqliteSaver), langgraph+postgresql://... "
                          "(PostgresSaver) or a store URL of ours"),
             click.Option(["--to", "target"], metavar="URL", required=True, help=URL_HELP),
             click.Option(["--thread", "threads"], metavar="ID", multiple=True,
                          help="only this thread (repeatable)"),
             click.Option(["--dry-run"], is_flag=True, help="read and check everything, write nothing"),
             _schema_option("also bring each thread to this state schema's version, in the same write")],
            url=False, progress=True)
    _command(app, "schema", "state schema versions: count the threads at each (status), or bring them all to the schema's (upgrade)",
            "telar-checkpoint schema upgrade ./.telar-checkpoint --schema myapp.schema:SCHEMA --dry-run", schema.cmd_schema,
            [_Argument("action", "ACTION", "status: count the threads by version; upgrade: rewrite every older thread",
                       type=click.Choice(["status", "upgrade"])),
             _Argument("url", "URL", URL_HELP),
             _schema_option("the state schema, a telar_checkpoint.schema.Schema", required=True),
             click.Option(["--dry-run"], is_flag=True,
                          help="upgrade: show one thread before and after, and the counts; write nothing"),
             click.Option(["--backup"], metavar="DIR", help="upgrade: write each thread's stored text to DIR "
                          "(THREAD.vN.jsonl) before changing it")],
            url=False, progress=True, cls=_ActionCommand)
    return app


def _ttl_option(text: str) -> click.Option:
    return click.Option(["--ttl"], metavar="MINUTES", type=click.FloatRange(min=0, min_open=True), default=None,
                        help=f"{text} (default: default_ttl of $TELAR_CHECKPOINT_TTL, when set)")


def _schema_option(text: str, *, required: bool = False) -> click.Option:
    return click.Option(["--schema"], metavar="SCHEMA", required=required,
                        help=f"{text}: module:NAME, imported from the current directory or sys.path "
                        "(e.g. myapp.schema:SCHEMA)")


def _print_version(version: str) -> Callable[[click.Context, click.Parameter, bool], None]:
    def callback(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
        if value and not ctx.resilient_parsing:
            click.echo(f"{PROG} {version}")
            ctx.exit(0)

    return callback
