"""A TelarSaver that serves the checkpoints its history rules dropped from an InMemorySaver beside it.

Used by telar_lgsuite_plugin when `TELAR_LGSUITE_SAVER=telar_shadow`, to check a by-design
failure: every put also goes to a shadow InMemorySaver, and a read answers from TelarSaver
except where TelarSaver no longer holds a checkpoint that InMemorySaver does (a get by id of
a dropped checkpoint, the latest of a namespace it dropped whole, or the entries a history
listing lacks). A test that fails with
TelarSaver but passes here differs from InMemorySaver only in what the history rules drop;
everything else it checks (outputs, states, resumes) came from TelarSaver.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import ChannelVersions, Checkpoint, CheckpointMetadata, CheckpointTuple
from langgraph.checkpoint.memory import InMemorySaver

from telar_checkpoint import TelarSaver
from telar_checkpoint.errors import CheckpointDroppedError


class _ShadowMemory(InMemorySaver):
    """InMemorySaver that stores every channel of every checkpoint under versions of its own.

    InMemorySaver keeps channel values by (channel, version); TelarSaver's versions repeat
    across branches (a fork counts on from its parent), so a shared store would let a new
    branch overwrite an old branch's values. Tagging each version with its checkpoint id
    keeps them apart; reads give the versions back untagged.
    """

    def __init__(self) -> None:
        super().__init__()
        self._untagged: dict[str, Any] = {}

    def put(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata, new_versions: ChannelVersions
    ) -> RunnableConfig:
        tagged = {}
        for channel, version in checkpoint["channel_versions"].items():
            tag = f"{version}@{checkpoint['id']}"
            self._untagged[tag] = version
            tagged[channel] = tag
        return super().put(config, {**checkpoint, "channel_versions": tagged}, metadata, dict(tagged))

    def _untag(self, found: CheckpointTuple | None) -> CheckpointTuple | None:
        if found is not None:
            versions = found.checkpoint["channel_versions"]
            found.checkpoint["channel_versions"] = {k: self._untagged[v] for k, v in versions.items()}
        return found

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._untag(super().get_tuple(config))

    def list(self, config: RunnableConfig | None, **options: Any) -> Iterator[CheckpointTuple]:
        for found in super().list(config, **options):
            yield self._untag(found)


def _id(found: CheckpointTuple) -> str:
    return found.config["configurable"]["checkpoint_id"]


def _merge(own: list[CheckpointTuple], shadow: list[CheckpointTuple], limit: int | None) -> list[CheckpointTuple]:
    """TelarSaver's entries, plus the shadow's entries it lacks, newest first (ids grow with time)."""
    held = {_id(found) for found in own}
    merged = own + [found for found in shadow if _id(found) not in held]
    merged.sort(key=_id, reverse=True)
    return merged if limit is None else merged[:limit]


class ShadowedTelarSaver(TelarSaver):
    """TelarSaver whose dropped checkpoints are still served, from a shadow InMemorySaver."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.shadow = _ShadowMemory()

    def with_allowlist(self, extra_allowlist: Any) -> TelarSaver:
        clone = super().with_allowlist(extra_allowlist)
        clone.shadow = self.shadow
        return clone

    def put(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata, new_versions: ChannelVersions
    ) -> RunnableConfig:
        saved = super().put(config, checkpoint, metadata, new_versions)
        self.shadow.put(config, checkpoint, metadata, new_versions)
        return saved

    async def aput(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata, new_versions: ChannelVersions
    ) -> RunnableConfig:
        saved = await super().aput(config, checkpoint, metadata, new_versions)
        self.shadow.put(config, checkpoint, metadata, new_versions)
        return saved

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = "") -> None:
        super().put_writes(config, writes, task_id, task_path)
        self.shadow.put_writes(config, writes, task_id, task_path)

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        await super().aput_writes(config, writes, task_id, task_path)
        self.shadow.put_writes(config, writes, task_id, task_path)

    def delete_thread(self, thread_id: str) -> None:
        super().delete_thread(thread_id)
        self.shadow.delete_thread(thread_id)

    async def adelete_thread(self, thread_id: str) -> None:
        await super().adelete_thread(thread_id)
        self.shadow.delete_thread(thread_id)

    def _from_shadow(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The shadow's answer where TelarSaver has none: a dropped checkpoint asked for by id, or
        the latest of a namespace whose checkpoints were all dropped (a finished subgraph call)."""
        return self.shadow.get_tuple(config)

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        try:
            found = super().get_tuple(config)
        except CheckpointDroppedError:
            found = None
        return found if found is not None else self._from_shadow(config)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        try:
            found = await super().aget_tuple(config)
        except CheckpointDroppedError:
            found = None
        return found if found is not None else self._from_shadow(config)

    def _holds(self, config: RunnableConfig) -> CheckpointTuple | None:
        try:
            return super().get_tuple(config)
        except CheckpointDroppedError:
            return None

    def _lacks_path(self, config: RunnableConfig) -> bool:
        """Whether TelarSaver dropped the checkpoint `config` names, or its parent (the path to it)."""
        found = self._holds(config)
        return found is None or (found.parent_config is not None and self._holds(found.parent_config) is None)

    def get_delta_channel_history(self, *, config: RunnableConfig, channels: Sequence[str]) -> Mapping[str, Any]:
        if self._lacks_path(config):
            return self.shadow.get_delta_channel_history(config=config, channels=channels)
        return super().get_delta_channel_history(config=config, channels=channels)

    async def aget_delta_channel_history(self, *, config: RunnableConfig, channels: Sequence[str]) -> Mapping[str, Any]:
        if self._lacks_path(config):  # reads the store synchronously: a diagnosis aid, not a server
            return self.shadow.get_delta_channel_history(config=config, channels=channels)
        return await super().aget_delta_channel_history(config=config, channels=channels)

    def list(self, config: RunnableConfig | None, *, limit: int | None = None, **options: Any) -> Iterator[CheckpointTuple]:
        try:
            own = list(super().list(config, limit=limit, **options))
        except CheckpointDroppedError:  # `before` names a dropped checkpoint
            own = []
        yield from _merge(own, list(self.shadow.list(config, limit=limit, **options)), limit)

    async def alist(
        self, config: RunnableConfig | None, *, limit: int | None = None, **options: Any
    ) -> AsyncIterator[CheckpointTuple]:
        try:
            own = [found async for found in super().alist(config, limit=limit, **options)]
        except CheckpointDroppedError:  # `before` names a dropped checkpoint
            own = []
        for found in _merge(own, list(self.shadow.list(config, limit=limit, **options)), limit):
            yield found
