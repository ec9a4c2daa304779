"""Checks a run of LangGraph's suite with TelarSaver against by_design.txt (and InMemorySaver's run).

Usage: python compare.py TELAR_RESULTS.json [MEMORY_RESULTS.json]

The result files are written by telar_lgsuite_plugin (TELAR_LGSUITE_RESULTS). Prints the
counts of each run, then every TelarSaver failure that by_design.txt does not list (and
whether InMemorySaver fails it too), and every by_design.txt line whose test ran and did
not fail.
Exits 1 if there is either kind, 0 otherwise.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

BY_DESIGN = Path(__file__).with_name("by_design.txt")
_FAILED = ("failed", "error")
_COUNTED = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")


def read_by_design(path: Path = BY_DESIGN) -> dict[str, str]:
    """`{node id: reason}` from lines `<node id>  <reason>`; blank lines and `#` comments skipped."""
    listed: dict[str, str] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        nodeid, _, reason = line.partition("  ")
        if not reason.strip():
            raise SystemExit(f"{path}:{number}: no reason after the node id (two spaces, then one line)")
        if nodeid in listed:
            raise SystemExit(f"{path}:{number}: {nodeid} is listed twice")
        listed[nodeid] = reason.strip()
    return listed


def counts(outcomes: dict[str, str]) -> str:
    tally = Counter(outcomes.values())
    return ", ".join(f"{tally[kind]} {kind}" for kind in _COUNTED if tally[kind]) or "no tests"


def reference_id(nodeid: str) -> str:
    """The same test's node id in the InMemorySaver run."""
    return nodeid.replace("telar_file", "memory")


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    telar = json.loads(Path(argv[1]).read_text(encoding="utf-8"))
    memory = json.loads(Path(argv[2]).read_text(encoding="utf-8")) if len(argv) == 3 else None
    by_design = read_by_design()

    failed = sorted(nodeid for nodeid, outcome in telar.items() if outcome in _FAILED)
    listed_failed = [nodeid for nodeid in failed if nodeid in by_design]
    print(f"TelarSaver (file store): {counts(telar)}; {len(listed_failed)} of the failures by design")
    if memory is not None:
        print(f"InMemorySaver:           {counts(memory)}")

    unexpected = [nodeid for nodeid in failed if nodeid not in by_design]
    for nodeid in unexpected:
        also = memory is not None and memory.get(reference_id(nodeid)) in _FAILED
        print(f"NOT BY DESIGN: {nodeid}" + ("  (InMemorySaver fails it too)" if also else ""))
    stale = [nodeid for nodeid in by_design if nodeid in telar and telar[nodeid] not in _FAILED]
    for nodeid in stale:
        print(f"LISTED BUT {telar[nodeid].upper()}: {nodeid}  (remove it from by_design.txt)")
    not_run = [nodeid for nodeid in by_design if nodeid not in telar]
    if not_run:
        print(f"{len(not_run)} listed tests did not run (a partial run, or tests renamed upstream)")
    return 1 if unexpected or stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
