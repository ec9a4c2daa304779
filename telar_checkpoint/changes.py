"""What LangGraph passes a checkpointer, as our typed changes: the thread a config names, a
`put` as a `rules.Put`, a `put_writes` as a `WritesLine`, and the next channel version.

Each conversion encodes the values at once, before the change waits its turn to be written
(`writing.Writer`). When one fails for an argument of the wrong type, the error says which
(`_arguments.explain`, on the error path only).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    EXCLUDED_METADATA_KEYS,
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    get_checkpoint_id,
)

from telar_checkpoint._arguments import check, check_config, explain
from telar_checkpoint.codec import CheckpointCodec
from telar_checkpoint.errors import ArgumentTypeError, UsageError
from telar_checkpoint.format import WritesLine
from telar_checkpoint.rules import Put
from telar_checkpoint.stores.base import RESERVED
from telar_checkpoint.thread_index import metadata_terms

Version = int | str
_A_CONFIG = 'a config dict, such as {"configurable": {"thread_id": "..."}}'
_NO_THREAD_ID = (
    'the config has no "thread_id" in "configurable"; pass a config such as '
    '{"configurable": {"thread_id": "..."}} (as graph.invoke(input, config) takes)'
)


def thread_and_ns(config: RunnableConfig) -> tuple[str, str]:
    """The thread and the namespace a config names."""
    try:
        configurable = config.get("configurable") or {}
        if "thread_id" in configurable:
            thread_id = str(configurable["thread_id"])
            if thread_id.startswith(RESERVED):
                raise UsageError(f"thread_id {thread_id!r}: a thread id may not start with {RESERVED!r} (stores keep their own keys there)")
            return thread_id, configurable.get("checkpoint_ns") or ""
    except (AttributeError, TypeError):  # not a dict, or its "configurable" is not: say which
        if not isinstance(config, Mapping):
            raise ArgumentTypeError(f"config must be {_A_CONFIG}, not {type(config).__name__}") from None
        check_config("TelarSaver", "config", config)
        raise
    raise UsageError(_NO_THREAD_ID)


def read_target(config: RunnableConfig) -> tuple[str, str, str | None]:
    """What a `get_tuple` reads: the thread, the namespace and the checkpoint id (None: the latest)."""
    thread_id, ns = thread_and_ns(config)
    return thread_id, ns, get_checkpoint_id(config)


def stored_metadata(config: RunnableConfig, metadata: CheckpointMetadata) -> dict[str, Any]:
    """The metadata to store: LangGraph's, plus the plain values of the config's `metadata` and
    `configurable` it does not already have (as LangGraph's savers do), without "writes".

    Unlike LangGraph's helper, NUL characters are kept: we store what we are given.
    """
    merged: dict[str, Any] = {k: v for k, v in metadata.items() if k != "writes"}
    for source in (config.get("metadata"), config.get("configurable")):
        for key, value in (source or {}).items():
            if key in merged or key in EXCLUDED_METADATA_KEYS or key.startswith("__"):
                continue
            if isinstance(value, (str, int, bool, float)):
                merged[key] = value
    return merged


def put_change(
    codec: CheckpointCodec, max_history: int | None, indexed: bool, method: Callable[..., Any],
    config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata, new_versions: ChannelVersions,
) -> tuple[str, Put]:
    """The thread and the `Put` of a `put` (`method`, named in an error), with the index terms of
    its metadata when the store keeps an index (`indexed`)."""
    try:
        thread_id, ns = thread_and_ns(config)
        put = codec.prepare(
            checkpoint, stored_metadata(config, metadata), ns, config["configurable"].get("checkpoint_id"), new_versions, max_history
        )
        if indexed:  # the terms of the metadata stored, before the put travels
            put.terms = metadata_terms(put.metadata)
    except (TypeError, AttributeError, KeyError):
        explain(method, {"config": config, "checkpoint": checkpoint, "metadata": metadata, "new_versions": new_versions})
        raise
    return thread_id, put


def writes_change(
    codec: CheckpointCodec, method: Callable[..., Any],
    config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str,
) -> tuple[str, WritesLine]:
    """The thread and the `WritesLine` of a `put_writes` (`method`, named in an error)."""
    try:
        thread_id, ns = thread_and_ns(config)
        checkpoint_id = get_checkpoint_id(config)
        if not checkpoint_id:
            raise UsageError('put_writes needs a config with a "checkpoint_id" in "configurable": the one put returned')
        if type(task_id) is not str or type(task_path) is not str:
            check(method, {"task_id": task_id, "task_path": task_path})
        items = [(WRITES_IDX_MAP.get(channel, i), channel, value) for i, (channel, value) in enumerate(writes)]
        line = codec.writes_line(ns, checkpoint_id, task_id, items, task_path)
    except (TypeError, AttributeError, KeyError):
        explain(method, {"config": config, "writes": writes})
        raise
    return thread_id, line


def next_version(current: Version | None, method: Callable[..., Any]) -> Version:
    """The next channel version, of the same JSON type as `current`. Integers count up;
    zero-padded strings (written by `InMemorySaver` and the SQL savers) keep their form, so
    threads they wrote go on working."""
    if current is None:
        return 1
    try:
        if isinstance(current, str):
            return f"{int(current.split('.')[0]) + 1:032}.{0:016}"
        return int(current) + 1
    except (TypeError, ValueError):
        explain(method, {"current": current})
        raise
