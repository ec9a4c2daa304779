"""How many of the library's functions one call enters: a profile hook on a warm thread's put,
put_writes and get_tuple, on the file and memory stores.

    python -m benchmarks.calls

The thread holds a few checkpoints of a 10-message chat, each with a task's pending write, and
has been read, so the saver's caches hold it (a warm thread). Then one `put` of the next
checkpoint, one `put_writes` of one message on it and one `get_tuple` of the latest are each
run under `sys.setprofile`, counting the calls of functions defined in `telar_checkpoint/`:
the distinct functions, the modules they are in, and the calls (a generator counts once per
resumption; functions Python generates, as a dataclass's `__init__`, are not ours and not
counted). docs/ARCHITECTURE.md quotes these counts ("The path of a put").
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from langchain_core.messages import AIMessage

import telar_checkpoint
from benchmarks.checkpoints import Chain, sample_messages, thread_config
from telar_checkpoint import TelarSaver
from telar_checkpoint.stores.base import Store
from telar_checkpoint.stores.file import FileStore
from telar_checkpoint.stores.memory import MemoryStore

OURS = str(Path(telar_checkpoint.__file__).parent)


def entered(call: Callable[[], Any]) -> tuple[int, int, int]:
    """The distinct functions of ours that `call` enters, the modules they are in, and the calls."""
    functions: set[tuple[str, str]] = set()
    calls = 0

    def hook(frame: FrameType, event: str, arg: Any) -> None:
        nonlocal calls
        if event == "call" and frame.f_code.co_filename.startswith(OURS):
            functions.add((frame.f_code.co_filename, frame.f_code.co_qualname))
            calls += 1

    sys.setprofile(hook)
    try:
        call()
    finally:
        sys.setprofile(None)
    return len(functions), len({module for module, _ in functions}), calls


def counts(store: Store) -> dict[str, tuple[int, int, int]]:
    """`entered` for a warm put, put_writes and get_tuple on a saver over `store`."""
    saver = TelarSaver(store)
    messages = sample_messages(10)
    chain = Chain(saver, "calls")
    for step in range(5):
        stored = chain.put({"messages": messages, "step": step})
        saver.put_writes(stored, [("messages", [AIMessage("a pending write", id=f"w-{step}")])], f"task-{step}")
        saver.get_tuple(thread_config("calls"))
    config, checkpoint, metadata, versions = chain.next({"messages": messages, "step": 5})
    put: list[Any] = []
    found = {"put": entered(lambda: put.append(saver.put(config, checkpoint, metadata, versions)))}  # type: ignore[arg-type]
    chain.done(put[0], versions)
    write = [("messages", [AIMessage("one more", id="w-last")])]
    found["put_writes"] = entered(lambda: saver.put_writes(put[0], write, "task-last"))
    found["get_tuple"] = entered(lambda: saver.get_tuple(thread_config("calls")))
    return found


def main() -> None:
    print("| store | call | functions of ours | modules | calls |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        for name, store in (("file", FileStore(folder)), ("memory", MemoryStore())):
            for call, (functions, modules, calls) in counts(store).items():
                print(f"| {name} | {call} | {functions} | {modules} | {calls} |")
            store.close()


if __name__ == "__main__":
    main()
