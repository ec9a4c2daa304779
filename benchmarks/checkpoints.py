"""Checkpoints made by hand, for the micro and scaling workloads (no graph involved).

`Chain` puts one checkpoint after another on a thread of one saver, each a child of
the last, with channel versions from that saver's own `get_next_version` (every
saver has its own version type). `telar_lines` encodes many small checkpoints with
the codec, to build a long TelarSaver thread in one write instead of N puts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver, Checkpoint, empty_checkpoint

from telar_checkpoint.codec import CheckpointCodec, CheckpointRecord


def sample_messages(count: int) -> list[BaseMessage]:
    """A short conversation of `count` messages (about 150 bytes each, with ids)."""
    return [
        (HumanMessage if i % 2 == 0 else AIMessage)(
            content=f"Message {i}: a sentence of ordinary length, about the weather and the trains.",
            id=f"msg-{i:04d}",
        )
        for i in range(count)
    ]


def thread_config(thread_id: str, checkpoint_id: str | None = None) -> RunnableConfig:
    configurable: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ""}
    if checkpoint_id is not None:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


@dataclass
class Chain:
    """A thread of one saver that grows by one checkpoint per `put`."""

    saver: BaseCheckpointSaver[Any]
    thread_id: str
    ids: list[str] = field(default_factory=list)
    versions: dict[str, Any] = field(default_factory=dict)

    @property
    def latest(self) -> RunnableConfig:
        return thread_config(self.thread_id, self.ids[-1] if self.ids else None)

    def next(self, values: dict[str, Any]) -> tuple[RunnableConfig, Checkpoint, dict[str, Any], dict[str, Any]]:
        """The arguments of the next `put`: every channel in `values` gets a new version."""
        new_versions = {ch: self.saver.get_next_version(self.versions.get(ch), None) for ch in values}
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = dict(values)
        checkpoint["channel_versions"] = {**self.versions, **new_versions}
        checkpoint["versions_seen"] = {"agent": dict(new_versions)}
        metadata = {"source": "loop", "step": len(self.ids), "parents": {}}
        return self.latest, checkpoint, metadata, new_versions

    def put(self, values: dict[str, Any]) -> RunnableConfig:
        config, checkpoint, metadata, new_versions = self.next(values)
        return self.done(self.saver.put(config, checkpoint, metadata, new_versions), new_versions)  # type: ignore[arg-type]

    def done(self, stored: RunnableConfig, new_versions: dict[str, Any]) -> RunnableConfig:
        """Record a put made outside `put` (to time just the saver call)."""
        self.ids.append(stored["configurable"]["checkpoint_id"])
        self.versions.update(new_versions)
        return stored


def small_values(step: int) -> dict[str, Any]:
    """The state of a small checkpoint (about 100 bytes of values)."""
    return {"step": step, "note": f"small checkpoint number {step} of a long thread"}


def telar_lines(codec: CheckpointCodec, count: int) -> tuple[list[str], list[str]]:
    """`count` small checkpoints, each a child of the last: their stored lines (with newline) and ids.

    Their channel versions are integers counting up, as TelarSaver's own are.
    """
    lines: list[str] = []
    ids: list[str] = []
    parent: str | None = None
    for step in range(count):
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = small_values(step)
        checkpoint["channel_versions"] = {"step": step + 1, "note": step + 1}
        checkpoint["versions_seen"] = {"agent": {"step": step + 1, "note": step + 1}}
        metadata = {"source": "loop", "step": step, "parents": {}}
        lines.append(codec.encode(CheckpointRecord(checkpoint, metadata, "", parent)))  # type: ignore[arg-type]
        parent = checkpoint["id"]
        ids.append(parent)
    return lines, ids
