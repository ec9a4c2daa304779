"""The package's layers, as docs/ARCHITECTURE.md draws them: every import goes down or sideways.

The table under "Layers" in docs/ARCHITECTURE.md names each layer, bottom first, and the modules
in it (a name ending in ``.*`` takes a package's modules). Every import of the library (at
module level, inside a function, or for type checking only) must name a module of its own
layer or of one below, and no modules may import each other in a circle. A module the table
does not name fails too: a new module is placed in a layer when it is made.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import telar_checkpoint

PACKAGE = Path(telar_checkpoint.__file__).parent
ARCHITECTURE = PACKAGE.parent / "docs" / "ARCHITECTURE.md"


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of ours that `path` imports, anywhere in it."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1]) if node.level else ""
            module = ".".join(part for part in (base, node.module or "") if part)
            for alias in node.names:
                found.add(f"{module}.{alias.name}" if f"{module}.{alias.name}" in known else module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {m for m in found if m in known and m != name}


def layers() -> list[tuple[str, list[str]]]:
    """The table of docs/ARCHITECTURE.md's "Layers" section: (layer, module patterns), bottom first."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    section = text.split("\n## Layers\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (\d+)\. ([^|]+?) \| ([^|]+) \|$", section, re.M)
    assert rows, "docs/ARCHITECTURE.md has no table of layers under '## Layers'"
    assert [int(n) for n, _, _ in rows] == list(range(1, len(rows) + 1)), "the layers are numbered in order"
    return [(layer, re.findall(r"`([\w.*]+)`", names)) for _, layer, names in rows]


def layer_of(known: dict[str, Path]) -> dict[str, int]:
    placed: dict[str, int] = {}
    for level, (_layer, patterns) in enumerate(layers()):
        for pattern in patterns:
            full = "telar_checkpoint" if pattern == "telar_checkpoint" else f"telar_checkpoint.{pattern}"
            matched = [m for m in known if (m.startswith(full[:-1]) if full.endswith(".*") else m == full)]
            assert matched, f"docs/ARCHITECTURE.md's layers name {pattern!r}, which is no module of the package"
            for module in matched:
                assert module not in placed, f"{module} is in two layers of docs/ARCHITECTURE.md"
                placed[module] = level
    return placed


def test_every_module_has_a_layer_and_imports_only_its_own_or_lower_ones() -> None:
    known = modules()
    placed = layer_of(known)
    names = [layer for layer, _ in layers()]
    assert sorted(set(known) - set(placed)) == [], "modules docs/ARCHITECTURE.md's layers do not place"
    upward = [
        f"{module} ({names[placed[module]]}) imports {target} ({names[placed[target]]})"
        for module, path in known.items()
        for target in sorted(imports(module, path, known))
        if placed[target] > placed[module]
    ]
    assert upward == []


def test_no_modules_import_each_other_in_a_circle() -> None:
    known = modules()
    graph = {name: imports(name, path, known) for name, path in known.items()}
    circles: list[list[str]] = []
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    assert circles == []


def test_the_check_sees_an_import_inside_a_function_and_under_type_checking(tmp_path: Path) -> None:
    """The checks would fail on an import a module makes only when called, or only for mypy."""
    source = tmp_path / "probe.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from telar_checkpoint.saver import TelarSaver\n"
        "def f():\n    from telar_checkpoint import rules\n    from .history import History\n",
        encoding="utf-8",
    )
    known = {**modules(), "telar_checkpoint.probe": source}
    assert imports("telar_checkpoint.probe", source, known) == {
        "telar_checkpoint.saver", "telar_checkpoint.rules", "telar_checkpoint.history",
    }
