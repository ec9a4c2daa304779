"""A paused run resumes in a new process from the files alone."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from langgraph.checkpoint.memory import InMemorySaver

from tests.graphs import nested_subgraphs, normalize, resume

SCRIPT = textwrap.dedent(
    """
    import json, sys
    from telar_checkpoint import TelarSaver
    from tests.graphs import nested_subgraphs, normalize, resume
    directory, step = sys.argv[1], sys.argv[2]
    graph = nested_subgraphs(2).compile(checkpointer=TelarSaver(directory))
    config = {"configurable": {"thread_id": "paused"}}
    value = {"request": "r", "log": []} if step == "start" else resume("yes")
    out = graph.invoke(value, config)
    state = graph.get_state(config, subgraphs=True)
    print(json.dumps({"out": repr(normalize(out)), "next": list(state.next)}))
    """
)


def run(directory: Path, step: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(directory), step],
        capture_output=True, text=True, cwd=Path(__file__).parent.parent, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_paused_run_resumes_in_a_new_process(tmp_path) -> None:
    paused = run(tmp_path, "start")
    assert paused["next"] == ["child"]
    assert list(tmp_path.glob("*.jsonl")) == [tmp_path / "paused.jsonl"]
    done = run(tmp_path, "resume")

    reference = nested_subgraphs(2).compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "paused"}}
    assert paused["out"] == repr(normalize(reference.invoke({"request": "r", "log": []}, config)))
    assert done["out"] == repr(normalize(reference.invoke(resume("yes"), config)))
    assert done["next"] == []
