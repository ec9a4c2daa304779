"""`telar_checkpoint.server` under the real LangGraph dev server (`langgraph dev`).

A tiny project (a graph that pauses at `interrupt()` and a `langgraph.json` naming our
checkpointer) is served, driven to the interrupt through `langgraph_sdk`, the server is
stopped and started again on the same directories, and the thread is resumed: the
outputs must equal the same graph's run in-process, without a restart. The checkpoint
files in our directory prove that our saver, not the server's own, kept the thread.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from telar_checkpoint import TelarSaver
from telar_checkpoint.errors import UsageError
from telar_checkpoint.server import checkpointer, settings
from telar_checkpoint.stores.file import FileStore
from tests.stores import unavailable

# --- the environment settings, no server needed -----------------------------------


def test_settings_default_to_a_local_directory() -> None:
    assert settings({}) == (".telar-checkpoint", None)
    assert settings({"TELAR_CHECKPOINT_URL": " ", "TELAR_CHECKPOINT_MAX_HISTORY": ""}) == (".telar-checkpoint", None)


def test_settings_read_the_url_and_max_history() -> None:
    environ = {"TELAR_CHECKPOINT_URL": "sqlite:///c.db", "TELAR_CHECKPOINT_MAX_HISTORY": " 7 "}
    assert settings(environ) == ("sqlite:///c.db", 7)


@pytest.mark.parametrize("text", ["0", "-3", "ten", "2.5"])
def test_a_bad_max_history_is_refused_naming_the_variable(text: str) -> None:
    with pytest.raises(UsageError, match=rf"TELAR_CHECKPOINT_MAX_HISTORY='{text}': write a positive whole number"):
        settings({"TELAR_CHECKPOINT_MAX_HISTORY": text})


async def test_checkpointer_yields_a_saver_on_the_named_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TELAR_CHECKPOINT_URL", (tmp_path / "threads").as_uri())
    monkeypatch.setenv("TELAR_CHECKPOINT_MAX_HISTORY", "5")
    async with checkpointer() as saver:
        assert isinstance(saver, TelarSaver)
        assert saver.max_history == 5
        assert isinstance(saver.store, FileStore)
        assert Path(saver.store.directory) == tmp_path / "threads"


async def test_checkpointer_defaults_to_telar_checkpoint_in_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TELAR_CHECKPOINT_URL", raising=False)
    monkeypatch.delenv("TELAR_CHECKPOINT_MAX_HISTORY", raising=False)
    monkeypatch.chdir(tmp_path)
    async with checkpointer() as saver:
        assert saver.max_history is None
        assert (tmp_path / ".telar-checkpoint").is_dir()


# --- the dev server ------------------------------------------------------------------

GRAPH_MODULE = '''
from typing import TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt


class State(TypedDict):
    topic: str
    answer: str
    log: list


def ask(state: State) -> dict:
    answer = interrupt({"question": f"what about {state['topic']}?"})
    return {"answer": answer, "log": state["log"] + [f"asked:{state['topic']}"]}


def finish(state: State) -> dict:
    return {"log": state["log"] + [f"done:{state['answer']}"]}


builder = StateGraph(State)
builder.add_node(ask)
builder.add_node(finish)
builder.add_edge(START, "ask")
builder.add_edge("ask", "finish")
builder.add_edge("finish", END)
graph = builder.compile()
'''

LANGGRAPH_JSON = """{
  "dependencies": ["."],
  "graphs": {"agent": "./graph.py:graph"},
  "checkpointer": {"path": "telar_checkpoint.server.checkpointer"}
}
"""

START_TIMEOUT = 40.0
STOP_TIMEOUT = 20.0
# Keys that would let the server or the SDK reach LangSmith; the test stays on 127.0.0.1.
NETWORK_KEYS = ("LANGSMITH_API_KEY", "LANGCHAIN_API_KEY", "LANGGRAPH_CLOUD_LICENSE_KEY", "LANGSMITH_CONTROL_PLANE_API_KEY")
QUIET = {
    "LANGSMITH_TRACING": "false",
    "LANGCHAIN_TRACING_V2": "false",
    "LANGGRAPH_CLI_NO_ANALYTICS": "1",  # no usage report from the CLI
    "LANGGRAPH_NO_VERSION_CHECK": "true",  # no PyPI look-up at start
    "OTEL_ENABLED": "false",
}


def _require_dev_server() -> None:
    if sys.version_info < (3, 11):
        pytest.skip("the LangGraph dev server (langgraph-api) needs Python 3.11 or newer")
    for module in ("langgraph_cli", "langgraph_api", "langgraph_runtime_inmem", "langgraph_sdk"):
        try:
            __import__(module)
        except ImportError:
            unavailable(f"{module} is not installed; pip install 'langgraph-cli[inmem]' langgraph-sdk")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class DevServer:
    """`langgraph dev` on a project directory, started and stopped on demand, logging to a file."""

    def __init__(self, project: Path, checkpoints: Path) -> None:
        self.project, self.checkpoints = project, checkpoints
        self.log = project / "server.log"
        self.env = {k: v for k, v in os.environ.items() if k not in NETWORK_KEYS and not k.startswith("OTEL_")}
        self.env.update(QUIET)
        self.env["TELAR_CHECKPOINT_URL"] = checkpoints.as_uri()
        self.env["TELAR_CHECKPOINT_MAX_HISTORY"] = "20"
        self.starts = 0

    def _log_tail(self) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-40:])

    @contextmanager
    def running(self) -> Iterator[str]:
        """The server's URL while it runs; stopped with SIGTERM (a clean shutdown) after."""
        self.starts += 1
        port = _free_port()
        command = [sys.executable, "-m", "langgraph_cli", "dev", "--host", "127.0.0.1", "--port", str(port),
                   "--no-browser", "--no-reload"]  # fmt: skip
        with self.log.open("a") as log:
            log.write(f"\n===== start {self.starts}: {' '.join(command)}\n")
            log.flush()
            process = subprocess.Popen(
                command, cwd=self.project, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        try:
            url = f"http://127.0.0.1:{port}"
            self._wait_ready(process, url)
            yield url
        finally:
            self._stop(process)

    def start_failure(self) -> tuple[int, str]:
        """(exit code, log) of a start that must fail."""
        command = [sys.executable, "-m", "langgraph_cli", "dev", "--host", "127.0.0.1", "--port", str(_free_port()),
                   "--no-browser", "--no-reload"]  # fmt: skip
        with self.log.open("a") as log:
            process = subprocess.Popen(
                command, cwd=self.project, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        try:
            returncode = process.wait(timeout=START_TIMEOUT)
        except subprocess.TimeoutExpired:
            self._stop(process)
            pytest.fail(f"langgraph dev started although it should not have:\n{self._log_tail()}")
        return returncode, self.log.read_text(errors="replace")

    def _wait_ready(self, process: subprocess.Popen[bytes], url: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if process.poll() is not None:
                pytest.fail(f"langgraph dev exited with {process.returncode} before it was ready:\n{self._log_tail()}")
            try:
                with urllib.request.urlopen(f"{url}/ok", timeout=1) as response:
                    if response.status == 200:
                        break
            except OSError:
                time.sleep(0.2)
        else:
            pytest.fail(f"langgraph dev was not ready at {url} after {START_TIMEOUT:.0f} s:\n{self._log_tail()}")
        # The CLI moves to another port when ours is taken; then /ok answered someone else.
        assert "already in use" not in self.log.read_text(errors="replace"), self._log_tail()

    def _stop(self, process: subprocess.Popen[bytes]) -> None:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                pytest.fail(f"langgraph dev did not stop within {STOP_TIMEOUT:.0f} s of SIGTERM:\n{self._log_tail()}")


@pytest.fixture
def server(tmp_path: Path) -> DevServer:
    _require_dev_server()
    project = tmp_path / "project"
    project.mkdir()
    (project / "graph.py").write_text(GRAPH_MODULE)
    (project / "langgraph.json").write_text(LANGGRAPH_JSON)
    return DevServer(project, tmp_path / "checkpoints")


def _reference(project: Path, topic: str, resume: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The project's graph run in-process on `InMemorySaver`: (output at the interrupt, final output)."""
    import importlib.util

    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command

    spec = importlib.util.spec_from_file_location(f"server_test_graph_{id(project)}", project / "graph.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    graph = module.builder.compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "reference"}}
    paused = graph.invoke({"topic": topic, "log": []}, config)
    done = graph.invoke(Command(resume=resume), config)
    return paused, done


def _same_pause(served: dict[str, Any], reference: dict[str, Any]) -> None:
    """A served output at an interrupt equals the in-process one (interrupt ids are random)."""
    assert {k: v for k, v in served.items() if k != "__interrupt__"} == {
        k: v for k, v in reference.items() if k != "__interrupt__"
    }
    assert [i["value"] for i in served["__interrupt__"]] == [i.value for i in reference["__interrupt__"]]


def _our_state(checkpoints: Path, thread_id: str) -> dict[str, Any]:
    """The thread's latest state values (its channels, less LangGraph's own), read from our files by a fresh saver."""
    store = FileStore(checkpoints)
    assert store.path(thread_id).is_file(), f"no checkpoint file for {thread_id} in {sorted(os.listdir(checkpoints))}"
    latest = TelarSaver(store).get_tuple({"configurable": {"thread_id": thread_id}})
    assert latest is not None
    return {k: v for k, v in latest.checkpoint["channel_values"].items() if k in ("topic", "answer", "log")}


async def test_a_thread_paused_at_an_interrupt_resumes_after_a_restart(server: DevServer) -> None:
    from langgraph_sdk import get_client

    paused_ref, done_ref = _reference(server.project, "tea", "green")

    with server.running() as url:
        async with get_client(url=url) as client:  # closes its HTTP connections
            thread = await client.threads.create()
            thread_id = thread["thread_id"]
            paused = await client.runs.wait(thread_id, "agent", input={"topic": "tea", "log": []})
            _same_pause(paused, paused_ref)

    # Our saver wrote the thread: its file holds the state at the interrupt.
    assert _our_state(server.checkpoints, thread_id) == {"topic": "tea", "log": []}

    with server.running() as url:
        async with get_client(url=url) as client:
            # The dev server kept its thread table in .langgraph_api across the clean restart.
            assert (await client.threads.get(thread_id))["status"] == "interrupted"
            state = await client.threads.get_state(thread_id)
            assert state["next"] == ["ask"]
            assert [i["value"] for i in state["tasks"][0]["interrupts"]] == [{"question": "what about tea?"}]
            done = await client.runs.wait(thread_id, "agent", command={"resume": "green"})
            assert done == done_ref

    assert _our_state(server.checkpoints, thread_id)["log"] == done_ref["log"]


async def test_a_thread_resumes_from_our_files_when_the_servers_own_table_is_lost(server: DevServer) -> None:
    from langgraph_sdk import get_client
    from langgraph_sdk.errors import NotFoundError

    paused_ref, done_ref = _reference(server.project, "coffee", "black")

    with server.running() as url:
        async with get_client(url=url) as client:
            thread_id = (await client.threads.create())["thread_id"]
            _same_pause(await client.runs.wait(thread_id, "agent", input={"topic": "coffee", "log": []}), paused_ref)

    # As on a fresh machine or container: the server's own files are gone, ours remain.
    shutil.rmtree(server.project / ".langgraph_api")
    assert _our_state(server.checkpoints, thread_id) == {"topic": "coffee", "log": []}

    with server.running() as url:
        async with get_client(url=url) as client:
            with pytest.raises(NotFoundError):
                await client.threads.get(thread_id)
            # Re-create the thread under its old id: the state comes back from our checkpoints.
            await client.threads.create(thread_id=thread_id, graph_id="agent", if_exists="do_nothing")
            state = await client.threads.get_state(thread_id)
            assert state["values"] == {"topic": "coffee", "log": []}
            assert state["next"] == ["ask"]
            done = await client.runs.wait(thread_id, "agent", command={"resume": "black"})
            assert done == done_ref

    assert _our_state(server.checkpoints, thread_id)["log"] == done_ref["log"]


def test_a_bad_setting_stops_the_server_at_start_saying_what_to_write(server: DevServer) -> None:
    server.env["TELAR_CHECKPOINT_MAX_HISTORY"] = "ten"
    returncode, log = server.start_failure()
    assert returncode != 0
    assert "TELAR_CHECKPOINT_MAX_HISTORY='ten': write a positive whole number" in log
