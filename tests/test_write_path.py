"""The saver has one write path: nothing else in the library changes a stored thread.

Every change of a thread (put, writes, delete_thread, delete_for_runs, prune, copy, migration,
import, trim, repair, upgrade) goes through `writing.Writer.write`, in turn with the saver's other
writers.
This reads the library's source: a store's writing method called outside the stores and the
saver's write path fails it, naming the place.
"""

from __future__ import annotations

import ast
from pathlib import Path

import telar_checkpoint

WRITING = {"update", "update_versioned", "write", "append_if", "append_if_deferred", "delete"}
WRITING |= {f"a{name}" for name in WRITING}
PACKAGE = Path(telar_checkpoint.__file__).parent
# The stores implement the methods; the store tests call them; the saver's write path is
# the one caller (`Writer._store_steps`, through the steps driver).
ALLOWED = {PACKAGE / "stores", PACKAGE / "testing"}


def _is_store(name: str) -> bool:
    """Whether `name` names a store: `store`, `self.store`, or the store as one of its optional
    protocols (`versioned`, `deferred`, as `writing.Writer` holds it)."""
    return any(word in name.lower() for word in ("store", "versioned", "deferred"))


def writing_calls(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in WRITING:  # store.write(...)
            if _is_store(ast.unparse(node.func.value)):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {ast.unparse(node.func)}")
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "call" and len(node.args) >= 2:
            methods = [m for m in node.args[:2] if isinstance(m, ast.Attribute) and m.attr in WRITING]
            if methods and _is_store(ast.unparse(methods[0].value)):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: call({', '.join(map(ast.unparse, methods))}, ...)")
    return found


def test_only_the_write_path_writes_a_thread() -> None:
    sources = [p for p in PACKAGE.rglob("*.py") if not any(p == a or a in p.parents for a in ALLOWED)]
    found = [place for path in sources for place in writing_calls(path)]
    assert len(sources) > 30
    # the one place: the write path's `Writer._store_steps` asks for the append and the update
    assert sorted(place.split(": ", 1)[1] for place in found) == [
        "call(deferred.append_if_deferred, deferred.aappend_if_deferred, ...)",
        "call(store.update, store.aupdate, ...)",
        "call(versioned.append_if, versioned.aappend_if, ...)",
        "call(versioned.update_versioned, versioned.aupdate_versioned, ...)",
    ], "\n".join(found)
    assert all(place.startswith("telar_checkpoint/writing.py:") for place in found)
