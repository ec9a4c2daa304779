"""Print pip constraints that pin every direct dependency of pyproject.toml to its declared floor.

`python .ci/floors.py EXTRA...` reads [project] dependencies and the named extras (following
`telar-checkpoint[...]` self-references) and prints `name==floor ; marker` for each `>=` bound.
CI installs with these constraints, so the run proves that the floors install together and work;
a requirement without a `>=` floor fails here, since it would go untested.
"""

from __future__ import annotations

import sys
from pathlib import Path

import tomllib
from packaging.requirements import Requirement

PROJECT = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())["project"]


def requirements(extras: list[str]) -> list[Requirement]:
    found, pending, seen = [Requirement(r) for r in PROJECT["dependencies"]], list(extras), set()
    while pending:
        extra = pending.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for text in PROJECT["optional-dependencies"][extra]:
            requirement = Requirement(text)
            if requirement.name == PROJECT["name"]:
                pending.extend(requirement.extras)
            else:
                found.append(requirement)
    return found


def floor(requirement: Requirement) -> str:
    floors = [spec.version for spec in requirement.specifier if spec.operator == ">="]
    if len(floors) != 1:
        sys.exit(f"{requirement}: every direct dependency needs exactly one '>=' floor to be tested")
    return floors[0]


def main(extras: list[str]) -> None:
    for requirement in requirements(extras):
        marker = f" ; {requirement.marker}" if requirement.marker else ""
        print(f"{requirement.name}=={floor(requirement)}{marker}")


if __name__ == "__main__":
    main(sys.argv[1:])
