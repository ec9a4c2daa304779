"""`run_demo`: a small LangGraph graph that pauses at `interrupt()` and resumes in a new saver.

The graph asks for approval between two steps. The first saver stores the run
up to the pause; a second `TelarSaver`, opened on the same directory as a new
process would open it, finds the pause and resumes it. LangGraph is a test
dependency of this package, not a runtime one, so it is imported here, on use.
"""

from __future__ import annotations

import operator
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from telar_checkpoint.errors import UsageError
from telar_checkpoint.saver import TelarSaver
from telar_checkpoint.stores.file import FileStore
from telar_checkpoint.stores.opening import open_store

THREAD = "demo"


def approval_graph() -> Any:
    """The approval graph (a `StateGraph` to compile): prepare -> ask (interrupts) -> finish."""
    try:
        from langgraph.graph import END, START, StateGraph
        from langgraph.types import interrupt
    except ImportError as exc:
        raise UsageError("the demo runs a LangGraph graph, and langgraph is not installed: pip install langgraph") from exc
    from typing_extensions import TypedDict

    class Approval(TypedDict):
        request: str
        answer: str
        log: Annotated[list[str], operator.add]

    def prepare(state: Approval) -> dict[str, Any]:
        return {"log": [f"prepared {state['request']}"]}

    def ask(state: Approval) -> dict[str, Any]:
        answer = interrupt({"question": f"approve {state['request']}?"})
        return {"answer": answer, "log": [f"answered {answer}"]}

    def finish(state: Approval) -> dict[str, Any]:
        return {"log": [f"finished: {state['answer']}"]}

    builder = StateGraph(Approval)
    builder.add_node(prepare)
    builder.add_node(ask)
    builder.add_node(finish)
    builder.add_edge(START, "prepare")
    builder.add_edge("prepare", "ask")
    builder.add_edge("ask", "finish")
    builder.add_edge("finish", END)
    return builder


@dataclass(frozen=True, slots=True)
class DemoRun:
    """What the demo saw: the question it paused on, the state a new saver found, the end."""

    path: str  # the thread's file
    question: Any  # the value the run paused with
    paused_next: tuple[str, ...]  # the nodes to run next, as the second saver found them
    paused_log: list[str]  # the log at the pause
    log: list[str]  # the log once resumed
    text: str  # the stored history


def run_demo(directory: str | os.PathLike[str]) -> DemoRun:
    """Run the demo with its files in `directory` (the CLI's ``demo`` prints it).

    Refuses (UsageError) a directory that already holds a thread named "demo", and one that
    holds only files not ours (`stores.opening.open_store`).
    """
    builder = approval_graph()  # first: it explains a missing langgraph
    from langgraph.types import Command

    config = {"configurable": {"thread_id": THREAD}}
    store = open_store(Path(directory)).store
    if store.read(THREAD) is not None:
        raise UsageError(f"{directory} already holds a thread {THREAD!r}; run the demo in a new directory")
    first = builder.compile(checkpointer=TelarSaver(store))
    question = first.invoke({"request": "deploy v2", "log": []}, config)["__interrupt__"][0].value
    second = builder.compile(checkpointer=TelarSaver(FileStore(directory)))  # as a new process would
    paused = second.get_state(config)
    result = second.invoke(Command(resume="yes"), config)
    return DemoRun(
        str(FileStore(directory).path(THREAD)), question, tuple(paused.next), paused.values["log"], result["log"],
        FileStore(directory).read(THREAD) or "",
    )
