"""Checks a run of LangGraph's suite with TelarSaver against by_design.txt (and InMemorySaver's run).

Usage: python compare.py [--mode MODE] TELAR_RESULTS.json [MEMORY_RESULTS.json]

The result files are written by telar_lgsuite_plugin (TELAR_LGSUITE_RESULTS). MODE is the
TELAR_LGSUITE_SAVER of the run (default `telar`); it says which by_design.txt lines are
expected to fail: all of them with `telar`, only those of kind `branch` with `telar_keep`
(the `subgraph` ones pass when finished subgraph calls are kept), none with `telar_shadow`.
Prints the counts of each run, then every failure that is not expected in that mode (and
whether InMemorySaver fails it too), and every expected failure whose test ran and did not
fail. Exits 1 if there is either kind, 0 otherwise.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

BY_DESIGN = Path(__file__).with_name("by_design.txt")
_FAILED = ("failed", "error")
_COUNTED = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")
# Kinds of by-design failure: `branch` reads a checkpoint of a branch that a run moving on
# abandoned; `subgraph` reads a finished subgraph call's checkpoints after its parent moved on.
KINDS = ("branch", "subgraph")
# The kinds that fail in each mode of telar_lgsuite_plugin that runs TelarSaver.
EXPECTED_KINDS = {"telar": KINDS, "telar_keep": ("branch",), "telar_shadow": ()}


def read_by_design(path: Path = BY_DESIGN) -> dict[str, str]:
    """`{node id: kind}` from lines `<node id>  <kind>  <reason>`; blank lines and `#` comments skipped."""
    listed: dict[str, str] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        nodeid, _, rest = line.partition("  ")
        kind, _, reason = rest.strip().partition("  ")
        if kind not in KINDS or not reason.strip():
            raise SystemExit(
                f"{path}:{number}: expected <node id>  <kind: {' or '.join(KINDS)}>  <one-line reason>, "
                "separated by two spaces"
            )
        if nodeid in listed:
            raise SystemExit(f"{path}:{number}: {nodeid} is listed twice")
        listed[nodeid] = kind
    return listed


def counts(outcomes: dict[str, str]) -> str:
    tally = Counter(outcomes.values())
    return ", ".join(f"{tally[kind]} {kind}" for kind in _COUNTED if tally[kind]) or "no tests"


def reference_id(nodeid: str) -> str:
    """The same test's node id in the InMemorySaver run."""
    return nodeid.replace("telar_file", "memory")


def main(argv: list[str]) -> int:
    arguments = argv[1:]
    mode = "telar"
    if arguments[:1] == ["--mode"] and len(arguments) >= 2:
        mode, arguments = arguments[1], arguments[2:]
    if len(arguments) not in (1, 2) or mode not in EXPECTED_KINDS:
        print(__doc__, file=sys.stderr)
        return 2
    telar = json.loads(Path(arguments[0]).read_text(encoding="utf-8"))
    memory = json.loads(Path(arguments[1]).read_text(encoding="utf-8")) if len(arguments) == 2 else None
    expected = {nodeid for nodeid, kind in read_by_design().items() if kind in EXPECTED_KINDS[mode]}

    failed = sorted(nodeid for nodeid, outcome in telar.items() if outcome in _FAILED)
    expected_failed = [nodeid for nodeid in failed if nodeid in expected]
    print(f"TelarSaver ({mode}): {counts(telar)}; {len(expected_failed)} of the failures by design")
    if memory is not None:
        print(f"InMemorySaver:           {counts(memory)}")

    unexpected = [nodeid for nodeid in failed if nodeid not in expected]
    for nodeid in unexpected:
        also = memory is not None and memory.get(reference_id(nodeid)) in _FAILED
        print(f"NOT BY DESIGN: {nodeid}" + ("  (InMemorySaver fails it too)" if also else ""))
    stale = sorted(nodeid for nodeid in expected if nodeid in telar and telar[nodeid] not in _FAILED)
    for nodeid in stale:
        print(f"LISTED BUT {telar[nodeid].upper()}: {nodeid}  (by_design.txt expects it to fail with {mode})")
    not_run = [nodeid for nodeid in expected if nodeid not in telar]
    if not_run:
        print(f"{len(not_run)} listed tests did not run (a partial run, or tests renamed upstream)")
    return 1 if unexpected or stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
