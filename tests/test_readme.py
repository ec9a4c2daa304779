"""README.md says what is true: its quickstart runs and prints what it shows, the demo prints the
output it shows, its commands name extras, commands and files that exist, and the test command is
the one CI runs (issue "The first hour of a new user": a README that fits on a screen or two)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def blocks(text: str) -> list[tuple[str, str]]:
    """The fenced code blocks of a Markdown text: (language, body)."""
    return [(m.group(1), m.group(2)) for m in re.finditer(r"^```(\w*)\n(.*?)^```$", text, re.M | re.S)]


def transcript(body: str) -> list[tuple[str, str]]:
    """A console block with `$ ` prompts as (command, the output shown after it)."""
    steps: list[tuple[str, list[str]]] = []
    for line in body.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif steps:
            steps[-1][1].append(line)
    return [(command, "\n".join(out).strip("\n")) for command, out in steps]


def demo_shape(text: str) -> str:
    """The demo's output with what varies from run to run replaced: checkpoint ids, times, the
    temporary directory. Everything else (the steps, the columns, STEP, SOURCE, V, NEXT, the
    count) must match."""
    text = re.sub(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", "<checkpoint-id>", text)
    text = re.sub(r"\b\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\b", "<time>", text)
    text = re.sub(r"\S*telar-demo-\w+", "<temporary-dir>", text)
    return "\n".join(line.rstrip() for line in text.strip("\n").splitlines())


def readme() -> str:
    return README.read_text()


def shown_demo_output(text: str) -> str:
    found = [body for lang, body in blocks(text) if lang == "text" and body.startswith("telar-checkpoint demo:")]
    assert len(found) == 1, "README shows the demo's output once, in a ```text block"
    return found[0]


def printed_demo_output(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                        *args: str) -> str:  # fmt: skip
    from telar_checkpoint.cli import main

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # `demo` without DIR makes its directory here
    assert main(["demo", *args]) == 0
    return capsys.readouterr().out


def test_the_demo_prints_what_the_readme_shows(capsys, monkeypatch, tmp_path) -> None:
    printed = printed_demo_output(capsys, monkeypatch, tmp_path)
    assert demo_shape(printed) == demo_shape(shown_demo_output(readme()))


def test_a_wrong_version_in_the_shown_output_is_found(capsys, monkeypatch, tmp_path) -> None:
    """The comparison above can fail: the README's output with one changed V column differs."""
    shown = shown_demo_output(readme())
    wrong = re.sub(r"(\d\d:\d\d:\d\d  )1(  ask)", r"\g<1>3\2", shown)  # the V of the paused checkpoint
    assert wrong.count("  3  ask") == 1 and wrong != shown
    printed = printed_demo_output(capsys, monkeypatch, tmp_path)
    assert demo_shape(printed) != demo_shape(wrong)
    assert demo_shape(printed) != demo_shape(shown.replace("5 checkpoints", "6 checkpoints"))


def test_every_python_block_runs(tmp_path) -> None:
    sources = [body for lang, body in blocks(readme()) if lang == "python"]
    assert sources, "README has a quickstart"
    for number, source in enumerate(sources):
        cwd = tmp_path / f"block{number}"
        cwd.mkdir()
        (cwd / "block.py").write_text(source)
        done = subprocess.run([sys.executable, "block.py"], cwd=cwd, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, f"README python block {number} failed:\n{done.stderr}"


def test_the_quickstart_prints_what_the_readme_shows(tmp_path) -> None:
    """The console block after the quickstart: each command is run in a new directory holding the
    quickstart as quickstart.py, and prints what is shown."""
    text = readme()
    quickstart = next(body for lang, body in blocks(text) if lang == "python")
    (tmp_path / "quickstart.py").write_text(quickstart)
    steps = [step for lang, body in blocks(text) if lang == "console" for step in transcript(body)]
    assert [command for command, _ in steps if "quickstart.py" in command] == ["python quickstart.py"] * 2
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    for command, shown in steps:
        if shlex.split(command)[0] == "jq" and shutil.which("jq") is None:
            continue  # the lines are checked below without jq
        done = subprocess.run(command, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, f"{command}:\n{done.stderr}"
        assert done.stdout.strip("\n") == shown, command
    import json

    lines = [json.loads(line) for line in (tmp_path / "checkpoints" / "chat-1.jsonl").read_text().splitlines()]
    jq = next(shown for command, shown in steps if command.startswith("jq "))
    assert [json.dumps([x["step"], x["source"]], separators=(",", ":")) for x in lines if x["kind"] == "checkpoint"] == (
        jq.splitlines()
    )


def install_line(text: str) -> list[str]:
    """The words of the Install section's first command."""
    section = text[text.index("## Install"):text.index("## Quickstart")]
    return shlex.split(re.search(r"`(pip install [^`]+)`", section).group(1))


def installed_with(words: list[str]) -> set[str]:
    """The distributions that `pip install ...` (`words`) installs: the ones it names, this project
    ("." or "-e .", without extras unless named), and what they require, as installed here."""
    import importlib.metadata as metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    wanted: list[Requirement] = []
    for word in words[2:]:
        if word == "-e":
            continue
        if word.startswith("."):
            extras = word[2:-1] if word.startswith(".[") else ""
            wanted.append(Requirement(f"{PYPROJECT['name']}[{extras}]" if extras else PYPROJECT["name"]))
        else:
            wanted.append(Requirement(word))
    found: set[str] = set()
    while wanted:
        requirement = wanted.pop()
        name = canonicalize_name(requirement.name)
        extras = requirement.extras or {""}
        key = {f"{name}[{extra}]" for extra in extras}
        if key <= found:
            continue
        found |= key | {name}
        for required in metadata.requires(name) or []:
            dependency = Requirement(required)
            if dependency.marker is None or any(dependency.marker.evaluate({"extra": extra}) for extra in extras):
                wanted.append(dependency)
    return {name for name in found if "[" not in name}


def providers(module: str) -> set[str]:
    """The installed distributions whose files hold `module` (none for the standard library)."""
    import importlib.metadata as metadata
    import importlib.util

    from packaging.utils import canonicalize_name

    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin, module
    origin = Path(spec.origin).resolve()
    if not any(part in ("site-packages", "dist-packages") for part in origin.parts) and ROOT not in origin.parents:
        return set()  # the standard library
    return {
        canonicalize_name(dist.metadata["Name"])
        for dist in metadata.distributions()
        if any(Path(dist.locate_file(file)).resolve() == origin for file in dist.files or [])
    } or ({canonicalize_name(PYPROJECT["name"])} if ROOT in origin.parents else set())


def test_the_install_line_installs_what_the_quickstart_imports() -> None:
    """Every module the Quickstart imports comes with the Install section's command (issue 51:
    `pip install -e .` alone left `langgraph.graph` missing)."""
    import ast

    quickstart = ast.parse(next(body for lang, body in blocks(readme()) if lang == "python"))
    modules = {alias.name for node in ast.walk(quickstart) if isinstance(node, ast.Import) for alias in node.names}
    modules |= {node.module for node in ast.walk(quickstart) if isinstance(node, ast.ImportFrom) and node.module}
    installed = installed_with(install_line(readme()))
    for module in sorted(modules):
        provided = providers(module)
        assert not provided or provided & installed, f"the Quickstart imports {module} ({sorted(provided)}), not installed"
    assert installed_with(["pip", "install", "-e", "."]).isdisjoint(providers("langgraph.graph")), "the check sees what is missing"


def commands(text: str) -> list[list[str]]:
    """The commands of the console blocks without prompts (the ones to copy), split at `&&`."""
    found = []
    for lang, body in blocks(text):
        if lang == "console" and not body.startswith("$ "):
            for line in body.splitlines():
                found += [shlex.split(part) for part in line.split("&&")]
    return found


def test_the_two_commands_name_what_exists() -> None:
    from telar_checkpoint.cli import build_app

    found = commands(readme())
    extras = [words[3] for words in found if words[:3] == ["pip", "install", "-e"]]
    assert extras == [".[demo]", ".[test]"], "the demo installs the demo extra, the tests the test extra"
    for extra in extras:
        assert extra[2:-1] in PYPROJECT["optional-dependencies"]
    clone = next(words for words in found if words[:2] == ["git", "clone"])
    assert ["cd", clone[-1]] in found, "cd into the directory the clone made"
    assert ["telar-checkpoint", "demo"] in found
    assert PYPROJECT["scripts"]["telar-checkpoint"] == "telar_checkpoint.cli:main"
    assert "demo" in build_app().commands
    demo = {r.split("[")[0].split(">")[0].strip() for r in PYPROJECT["optional-dependencies"]["demo"]}
    assert demo == {"telar-checkpoint", "langgraph"}, "the demo needs the CLI and LangGraph, nothing more"


def test_the_test_command_is_the_one_ci_runs() -> None:
    """.ci/run's newest combination installs as README's test command does and runs python -m pytest."""
    lines = [line for lang, body in blocks(readme()) if lang == "console" and not body.startswith("$ ")
             for line in body.splitlines() if "pytest" in line]  # fmt: skip
    assert len(lines) == 1, "README has one test command"
    match = re.fullmatch(r"python3 -m venv \.venv && \. \.venv/bin/activate && pip install -e '(\.\[\w+\])' && python -m pytest( .*)?",
                         lines[0])  # fmt: skip
    assert match, lines[0]
    ci = (ROOT / ".ci" / "run").read_text()
    newest = ci[ci.index("# newest:"):ci.index("# lint:")]
    installed = re.findall(r"pip install -q -e '([^']+)'", newest)
    assert installed == [match.group(1)]
    assert 'python -m pytest "$@"' in ci


def test_the_documentation_map_lists_every_page_and_every_link_exists() -> None:
    text = readme()
    links = re.findall(r"\]\(([^)#]+)(?:#([\w-]+))?\)", text)
    for target, anchor in links:
        if "://" in target:
            continue
        assert (ROOT / target).exists(), target
        if anchor:
            headings = re.findall(r"^#+ (.+)$", (ROOT / target).read_text(), re.M)
            assert anchor in {re.sub(r"[^\w -]", "", h).strip().lower().replace(" ", "-") for h in headings}, anchor
    documentation = text[text.index("## Documentation"):]
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert f"(docs/{page.name})" in documentation, f"docs/{page.name} is missing from README's map"


def test_the_readme_fits_on_a_screen_or_two() -> None:
    assert len(readme().splitlines()) <= 120, "keep README short: move details to docs/"
