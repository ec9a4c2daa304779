"""`run_demo`: a small LangGraph graph that pauses at `interrupt()` and resumes in a new saver.

The graph asks for approval between two steps. The first saver stores the run
up to the pause; a second `TelarSaver`, opened on the same directory as a new
process would open it, finds the pause and resumes it. LangGraph is a test
dependency of this package, not a runtime one, so it is imported here, on use.
"""

from __future__ import annotations

import operator
import os
from typing import Annotated, Any

from telar_checkpoint.errors import UsageError
from telar_checkpoint.inspection import thread_history
from telar_checkpoint.saver import TelarSaver
from telar_checkpoint.stores.file import FileStore

THREAD = "demo"


def _graph() -> Any:
    """The approval graph: prepare -> ask (interrupts) -> finish."""
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


def run_demo(directory: str | os.PathLike[str]) -> str:
    """Run the demo with its files in `directory`; returns the text to print.

    Refuses (UsageError) a directory that already holds a thread named "demo".
    """
    builder = _graph()  # first: it explains a missing langgraph
    from langgraph.types import Command

    from telar_checkpoint.cli._commands import history_table
    from telar_checkpoint.cli._output import compact

    config = {"configurable": {"thread_id": THREAD}}
    if FileStore(directory).read(THREAD) is not None:
        raise UsageError(f"{directory} already holds a thread {THREAD!r}; run the demo in a new directory")
    out = [f"telar-checkpoint demo: a graph that asks for approval, stored in {directory}", ""]

    first = builder.compile(checkpointer=TelarSaver(FileStore(directory)))
    result = first.invoke({"request": "deploy v2", "log": []}, config)
    question = result["__interrupt__"][0].value
    out.append('1. First saver: the run pauses at interrupt() in node "ask".')
    out.append(f"   It asks: {compact(question)}")
    out.append(f"   Stored: {FileStore(directory).path(THREAD)}")

    second = builder.compile(checkpointer=TelarSaver(FileStore(directory)))  # as a new process would
    paused = second.get_state(config)
    out.append("2. A new saver on the same files finds the pause:")
    out.append(f"   next: {', '.join(paused.next)}; log so far: {compact(paused.values['log'])}")
    result = second.invoke(Command(resume="yes"), config)
    out.append('3. It resumes the run with Command(resume="yes"):')
    out.append(f"   log: {compact(result['log'])}")

    text = FileStore(directory).read(THREAD) or ""
    out += ["", f"The history (telar-checkpoint history {directory} {THREAD}):", ""]
    out.append(history_table(thread_history(THREAD, text)))
    return "\n".join(out) + "\n"
