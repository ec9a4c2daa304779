"""docs/CLI.md matches the command line: every command click exposes is in its table and has a
section, every command it lists exists, each with the arguments and options it really takes, and
its demo output is what the demo prints."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from telar_checkpoint.cli import build_app
from tests.test_readme import blocks, demo_shape, transcript

CLI_MD = Path(__file__).resolve().parent.parent / "docs" / "CLI.md"
COMMON = {"--json", "--progress", "--help"}  # every command's; the page says which take them


def real_signature(command: click.Command) -> tuple[list[tuple[str, bool]], dict[str, tuple[str | None, bool, bool]]]:
    """(positional arguments as (label, optional), options as name -> (metavar, optional, repeatable))."""
    arguments = [(getattr(p, "label", p.name.upper()), not p.required) for p in command.params if isinstance(p, click.Argument)]
    options = {}
    for p in command.params:
        if isinstance(p, click.Option) and not COMMON & set(p.opts):
            metavar = None if p.is_flag else p.metavar
            for name in p.opts:
                options[name] = (metavar, not p.required, p.multiple)
    return arguments, options


def doc_signature(text: str) -> tuple[str, list[tuple[str, bool]], list[tuple[str, str | None, bool, bool]]]:
    """Parse `name ARG [OPT] --opt V [--opt V ...]`: (name, arguments, options as (name, metavar, optional, repeatable))."""
    name, _, rest = text.partition(" ")
    arguments, options = [], []
    for bracketed, plain in re.findall(r"\[([^\]]+)\]|(\S+(?: [A-Z]+)?)", rest):
        part, optional = (bracketed, True) if bracketed else (plain, False)
        words = part.split()
        if words[0].startswith("-"):
            repeatable = words[-1] == "..."
            words = [w for w in words if w != "..."]
            options.append((words[0], words[1] if len(words) > 1 else None, optional, repeatable))
        else:
            for word in words:
                arguments.append((word, optional))
    return name, arguments, options


def check(text: str, commands: dict[str, click.Command]) -> str:
    name, arguments, options = doc_signature(text)
    assert name in commands, f"docs/CLI.md lists `{name}`, which is not a command"
    real_arguments, real_options = real_signature(commands[name])
    assert arguments == real_arguments, f"`{text}`: arguments {arguments}, the command takes {real_arguments}"
    documented = set()
    for option, metavar, optional, repeatable in options:
        assert option in real_options, f"`{text}`: {name} has no option {option}"
        assert (metavar, optional, repeatable) == real_options[option], f"`{text}`: {option} is {real_options[option]}"
        documented |= {n for n, spec in real_options.items() if spec == real_options[option] and _same(commands[name], n, option)}
    assert documented == set(real_options), f"`{text}` leaves out {sorted(set(real_options) - documented)}"
    return name


def _same(command: click.Command, a: str, b: str) -> bool:
    return any(a in p.opts and b in p.opts for p in command.params if isinstance(p, click.Option))


@pytest.fixture(scope="module")
def commands() -> dict[str, click.Command]:
    return dict(build_app().commands)


def test_the_table_lists_every_command_as_it_is(commands) -> None:
    text = CLI_MD.read_text()
    rows = re.findall(r"^\| `([^`]+)` \|", text, re.M)
    listed = [check(row, commands) for row in rows]
    assert sorted(listed) == sorted(commands), f"table: {sorted(listed)}; commands: {sorted(commands)}"


def test_every_command_has_a_section_with_its_arguments_and_options(commands) -> None:
    headings = re.findall(r"^## (.+)$", CLI_MD.read_text(), re.M)
    spans = [span for heading in headings for span in re.findall(r"`([^`]+)`", heading)]
    documented = [check(span, commands) for span in spans]
    assert sorted(documented) == sorted(commands)


def test_json_and_progress_are_where_the_page_says(commands) -> None:
    text = " ".join(CLI_MD.read_text().split())
    takes = {flag: sorted(n for n, c in commands.items() if any(flag in p.opts for p in c.params)) for flag in ("--json", "--progress")}
    without_json = sorted(set(commands) - set(takes["--json"]))
    assert f"Every command but {' and '.join(f'`{n}`' for n in without_json)} takes `--json`." in text
    progress = [f"`{n}`" for n in ("threads", "verify", "trim", "upgrade", "expire", "migrate", "schema")]
    assert takes["--progress"] == sorted(["threads", "verify", "trim", "upgrade", "expire", "migrate", "schema"])
    assert f"{', '.join(progress[:-1])} and {progress[-1]} take `--progress`." in text


def test_a_wrong_signature_is_found(commands) -> None:
    """The checks above can fail."""
    for wrong in ("history URL THREAD", "history URL [THREAD] [--ns NS]", "trim URL [--keep N] [THREAD] [--yes]",
                  "repair URL THREAD [--yes]", "rebuild URL", "verify URL [THREAD] [--strict] [--quiet] [--fast]"):  # fmt: skip
        with pytest.raises(AssertionError):
            check(wrong, commands)


def test_the_demo_prints_what_the_page_shows(capsys, monkeypatch, tmp_path) -> None:
    from telar_checkpoint.cli import main

    steps = [step for lang, body in blocks(CLI_MD.read_text()) if lang == "console" for step in transcript(body)]
    command, shown = next(step for step in steps if step[0].startswith("telar-checkpoint demo"))
    monkeypatch.chdir(tmp_path)
    assert main(command.split()[1:]) == 0
    assert demo_shape(capsys.readouterr().out) == demo_shape(shown)
