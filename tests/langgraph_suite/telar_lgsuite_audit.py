"""An InMemorySaver that notes each read LangGraph serves from a checkpoint off the live path.

Used by telar_lgsuite_plugin when `TELAR_LGSUITE_SAVER=audit`, to find which of LangGraph's
tests read checkpoints that TelarSaver's history rules drop (docs/FORMAT.md, issue 15). It
keeps everything, as InMemorySaver does, and for every checkpoint that `get_tuple` or `list`
returns it notes, at the moment of the read, one of these kinds:

- `root-branch`: a root checkpoint that is not on the path from the root's newest checkpoint
  back through parent links (a fork, a replay, or a re-decided interrupt left it behind);
- `subgraph-finished`: a checkpoint of a subgraph call (a namespace with task ids) whose
  parent graph has written a newer checkpoint since the call began, so the call is over or
  was abandoned;
- `subgraph-branch`: a checkpoint of a live subgraph call that is off that call's own path;
- `persistent-past`: a checkpoint of a `checkpointer=True` subgraph (a namespace without
  task ids) on the path to its newest but older than it (only a depth bound drops it);
- `persistent-branch`: a checkpoint of such a subgraph off the path to its newest.

The newest checkpoint of a namespace is the one with the greatest id (ids grow with time).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple
from langgraph.checkpoint.memory import InMemorySaver

_NS_SEP, _NS_END = "|", ":"

findings: dict[str, set[str]] = {}  # node id -> "kind namespace-shape reader" lines
current_test = ["<no test>"]


class AuditSaver(InMemorySaver):
    """InMemorySaver that records the reads described in the module docstring."""

    def _newest(self, thread_id: str, ns: str) -> str | None:
        held = self.storage.get(thread_id, {}).get(ns, {})
        return max(held) if held else None

    def _path(self, thread_id: str, ns: str) -> set[str]:
        held = self.storage.get(thread_id, {}).get(ns, {})
        path, checkpoint_id = set(), self._newest(thread_id, ns)
        while checkpoint_id is not None and checkpoint_id not in path:
            path.add(checkpoint_id)
            stored = held.get(checkpoint_id)
            checkpoint_id = stored[2] if stored else None
        return path

    def _kind(self, found: CheckpointTuple) -> str | None:
        conf = found.config["configurable"]
        thread_id, ns, checkpoint_id = conf["thread_id"], conf.get("checkpoint_ns", ""), conf["checkpoint_id"]
        if not ns:
            return None if checkpoint_id in self._path(thread_id, ns) else "root-branch"
        if _NS_END not in ns:
            if checkpoint_id == self._newest(thread_id, ns):
                return None
            return "persistent-past" if checkpoint_id in self._path(thread_id, ns) else "persistent-branch"
        parents: dict[str, str] = (found.metadata or {}).get("parents", {}) or {}
        for parent_ns, parent_id in parents.items():
            if _NS_END in parent_ns or not parent_ns:  # an ephemeral parent or the root
                if self._newest(thread_id, parent_ns) != parent_id:
                    return "subgraph-finished"
        return None if checkpoint_id in self._path(thread_id, ns) else "subgraph-branch"

    def _note(self, found: CheckpointTuple | None, reader: str) -> None:
        if found is None:
            return
        kind = self._kind(found)
        if kind is not None:
            ns = found.config["configurable"].get("checkpoint_ns", "")
            depth = "root" if not ns else f"depth {ns.count(_NS_SEP) + 1}"
            findings.setdefault(current_test[0], set()).add(f"{kind} ({depth}) via {reader}")

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        found = super().get_tuple(config)
        by_id = "checkpoint_id" in config.get("configurable", {})
        self._note(found, "get_tuple(id)" if by_id else "get_tuple(latest)")
        return found

    def list(self, config: RunnableConfig | None, **options: Any) -> Iterator[CheckpointTuple]:
        for found in super().list(config, **options):
            self._note(found, "list")
            yield found
