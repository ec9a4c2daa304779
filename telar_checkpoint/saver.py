"""`TelarSaver`: LangGraph's `BaseCheckpointSaver` on a string store, sync and async.

The one place where LangGraph, the codec and a store meet. Every method reads or
atomically updates one thread's string through the store and leaves the rest to
the pure codec, so the sync and async twins share all their logic.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Collection, Hashable, Iterator, Mapping, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    EXCLUDED_METADATA_KEYS,
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    get_checkpoint_id,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from telar_checkpoint._arguments import check, check_config, explain
from telar_checkpoint.codec import (
    CheckpointCodec,
    check_max_history,
    checkpoint_config,
    entry_filter,
    listed,
)
from telar_checkpoint.errors import ArgumentTypeError, SaverClosedError, SaverContextError, UsageError
from telar_checkpoint.format import WritesLine
from telar_checkpoint.history import History
from telar_checkpoint.lifetime import Clock, deletion
from telar_checkpoint.rules import Put
from telar_checkpoint.schema import Schema, SchemaThreads
from telar_checkpoint.serde_allowlist import with_msgpack_allowlist
from telar_checkpoint.serializer import JsonSerializer
from telar_checkpoint.steps import Call, Emit, Steps, Stream, arun, astream, call, run, stream
from telar_checkpoint.stores.base import Change, Store
from telar_checkpoint.stores.file import FileStore
from telar_checkpoint.thread_index import ThreadIndex, metadata_terms
from telar_checkpoint.values import ValueCodec
from telar_checkpoint.writing import RewriteThread, Writer

DEFAULT_DIRECTORY = ".telar-checkpoint"
# A thread's history larger than this (characters) is parsed, and its checkpoint decoded, on a
# worker thread by the async methods, not on the event loop (about 9 ms of parsing).
OFF_LOOP_CHARS = 256 * 1024
Version = int | str


def _open_store(target: str | os.PathLike[str] | None, share_database: bool = False) -> Store:
    """The store a path or URL given to `TelarSaver` names: a string with ``://`` is a URL (see
    `open_store`), anything else a directory (`FileStore` refuses a path that is a file)."""
    if isinstance(target, str) and "://" in target:
        from telar_checkpoint.stores.url import open_store

        return open_store(target, share_database=share_database)
    return FileStore(os.fspath(target or DEFAULT_DIRECTORY))


def _check_arguments(store: object, serde: object, keep_finished_subgraphs: object, max_history: object, **others: object) -> None:
    """Refuse an argument of the wrong type in our words (`ArgumentTypeError`), saying what to pass
    (`others` by their annotations in `TelarSaver.__init__`)."""
    if store is not None and not isinstance(store, (Store, str, os.PathLike)):
        raise ArgumentTypeError(
            f"store must be a Store, a directory path or a store URL (sqlite:///x.db, postgresql://..., "
            f"redis://...), not {type(store).__name__}"
        )
    if serde is not None and not (callable(getattr(serde, "dumps_typed", None)) and callable(getattr(serde, "loads_typed", None))):
        raise ArgumentTypeError(
            f"serde must be a LangGraph serializer (with dumps_typed and loads_typed), not {type(serde).__name__}"
        )
    if not isinstance(keep_finished_subgraphs, bool):
        raise ArgumentTypeError(f"keep_finished_subgraphs must be True or False, not {type(keep_finished_subgraphs).__name__}")
    if max_history is not None and (not isinstance(max_history, int) or isinstance(max_history, bool)):
        raise ArgumentTypeError(f"max_history must be a positive int or None, not {type(max_history).__name__}")
    check(TelarSaver.__init__, others)


_A_CONFIG = 'a config dict, such as {"configurable": {"thread_id": "..."}}'
_NO_THREAD_ID = (
    'the config has no "thread_id" in "configurable"; pass a config such as '
    '{"configurable": {"thread_id": "..."}} (as graph.invoke(input, config) takes)'
)


def _thread_and_ns(config: RunnableConfig) -> tuple[str, str]:
    try:
        configurable = config.get("configurable") or {}
        if "thread_id" in configurable:
            return str(configurable["thread_id"]), configurable.get("checkpoint_ns") or ""
    except (AttributeError, TypeError):  # not a dict, or its "configurable" is not: say which
        if not isinstance(config, Mapping):
            raise ArgumentTypeError(f"config must be {_A_CONFIG}, not {type(config).__name__}") from None
        check_config("TelarSaver", "config", config)
        raise
    raise UsageError(_NO_THREAD_ID)


class _Closed:
    """What a closed saver holds in place of its writer and index: any use raises `SaverClosedError`
    (so the methods on the hot path check nothing to refuse a closed saver)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def error(self) -> SaverClosedError:
        return SaverClosedError(
            f"this TelarSaver was closed (its `with` block ended), and its {self.kind} store with it; "
            "make a new saver to go on: TelarSaver(store_or_url), or `with TelarSaver.from_conn_string(url) as saver:`"
        )

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise self.error()


class TelarSaver(BaseCheckpointSaver[Version]):  # type: ignore[type-var]  # V is one of int|float|str; ours are either
    """A LangGraph checkpointer that keeps each thread as readable JSON lines in a store.

    `store` is a `Store`, a directory path (a `FileStore`, the directory made if
    missing), None for `./.telar-checkpoint`, or a store URL (a string with
    ``://``, as `from_conn_string` takes: ``sqlite:///x.db``, ``postgresql://...``,
    ``redis://...``). A store the saver opened from a path or URL is the saver's:
    ``with TelarSaver(url) as saver:`` closes it (or ``saver.store.close()``).
    `max_history` keeps the last N checkpoints of each
    thread (None: unbounded). `serde` serializes state values (default: the
    readable `JsonSerializer`; any LangGraph `SerializerProtocol` works).
    `keep_finished_subgraphs` keeps a finished subgraph call's checkpoints while
    the checkpoint it ran under is kept, so a past step's subgraph state can be
    inspected (as LangGraph Studio does); by default they go once the call is over,
    and a thread neither paused in a subgraph nor using a persistent one (compiled with
    `checkpointer=True`) holds format version 1 lines only.
    `share_database=True` opens a store URL whose database holds a LangGraph saver's
    data beside it on purpose (else refused, with the command that migrates it).
    `schema` (a `telar_checkpoint.schema.Schema`): threads stored at an older state schema
    version read upgraded (in memory), and are rewritten at the current version before
    this saver's next write of them; a thread at a newer version is refused (docs/SCHEMA.md).
    `clock`: the time, in seconds since the epoch (default `time.time`); tests pass their own.
    A deleted thread stays deleted: a run that still writes to it is refused
    (`ThreadDeletedError`), and a new run starts it again (docs/USAGE.md, "A thread's lifetime").
    """

    def __init__(
        self,
        store: Store | str | os.PathLike[str] | None = None,
        *,
        max_history: int | None = None,
        serde: SerializerProtocol | None = None,
        keep_finished_subgraphs: bool = False,
        share_database: bool = False,
        schema: Schema | None = None,
        clock: Clock | None = None,
    ) -> None:
        _check_arguments(store, serde, keep_finished_subgraphs, max_history, share_database=share_database, schema=schema)
        if clock is not None and not callable(clock):
            raise ArgumentTypeError(f"clock must be a function giving the time in seconds (as time.time), not {type(clock).__name__}")
        self.clock: Clock = clock or time.time
        check_max_history(max_history)
        serde = serde or JsonSerializer()
        super().__init__(serde=serde)
        self.store: Store = store if isinstance(store, Store) else _open_store(store, share_database)
        self.max_history = max_history
        self.codec = CheckpointCodec(serde, keep_finished_subgraphs=keep_finished_subgraphs)
        self._index = ThreadIndex(self.store, self.codec)
        self._writer = Writer(self.store, self._index, keep_finished_subgraphs)
        self.schema = schema
        self._schema_threads = SchemaThreads(schema, self.codec) if schema is not None else None

    @classmethod
    def from_conn_string(cls, url: str, **options: Any) -> _SaverContext:
        """A context manager (sync and async) yielding a saver on the store that `url` names.

        `file:///dir` or a path, `sqlite:///path.db`, `postgresql://...`,
        `redis://...` or `memory://`; options go to the saver (`max_history`, `serde`)
        or to the store.
        """
        if not isinstance(url, (str, os.PathLike)):
            raise ArgumentTypeError(
                f"TelarSaver.from_conn_string: url must be a str (a path or a store URL such as sqlite:///x.db), "
                f"not {type(url).__name__}"
            )
        return _SaverContext(cls, os.fspath(url), options)

    def __enter__(self) -> TelarSaver:
        return self

    def __exit__(self, *exc: object) -> None:
        self._closed()
        self.store.close()

    async def __aenter__(self) -> TelarSaver:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._closed()
        await self.store.aclose()

    def _closed(self) -> None:
        """Refuse every later use of this saver (`SaverClosedError`), at no cost to the others."""
        closed = _Closed(self.store.kind)
        self._writer = self._index = closed  # type: ignore[assignment]

    def _check(self, method: Any, values: dict[str, object]) -> None:
        """The checks of a method off the hot path: the saver is open, and its arguments' types."""
        if isinstance(self._writer, _Closed):
            raise self._writer.error()
        check(method, values)

    def with_allowlist(self, extra_allowlist: Collection[tuple[str, ...]]) -> TelarSaver:
        """A shallow clone whose serializer also loads the classes LangGraph derived from the state
        schema: through its own allowlist when it has one, and on the serde allowlist (stored
        ``$serde`` values may name them)."""
        self._check(self.with_allowlist, {"extra_allowlist": extra_allowlist})
        values = self.codec.values
        serde = with_msgpack_allowlist(values.serde, extra_allowlist)
        allowlist = tuple(dict.fromkeys((*values.allowlist, *extra_allowlist)))
        if serde is values.serde and len(allowlist) == len(values.allowlist):
            return self
        clone = type(self)(
            self.store, max_history=self.max_history, serde=serde,
            keep_finished_subgraphs=self.codec.keep_finished_subgraphs, schema=self.schema, clock=self.clock,
        )
        clone.codec.values = ValueCodec(serde, allowlist=allowlist)
        clone._index = self._index
        clone._writer = self._writer.sharing_turns()  # one saver's writers take turns
        return clone

    # --- pure pieces, shared by the sync and async methods ------------------------

    # --- reading and writing a thread: the same steps, sync and async ---------------

    def _parsed(self, thread_id: str, version: Hashable | None, text: str | None, version_after: Hashable | None) -> History:
        return self._writer.histories.parse(thread_id, text, version if version_after == version else None)

    async def _aparsed(self, thread_id: str, version: Hashable | None, text: str | None, version_after: Hashable | None) -> History:
        if text is not None and len(text) > OFF_LOOP_CHARS:  # parsing takes about 35 ms a MB
            return await asyncio.to_thread(self._parsed, thread_id, version, text, version_after)
        return self._parsed(thread_id, version, text, version_after)

    def _history_steps(self, thread_id: str) -> Steps[History]:
        """The thread's parsed history, read only when the store's version says it changed."""
        store, versioned = self.store, self._writer.versioned
        version = (yield call(versioned.version, versioned.aversion, thread_id)) if versioned is not None else None
        history = self._writer.histories.get(thread_id, version)
        if history is None:
            text = yield call(store.read, store.aread, thread_id)
            version_after = None
            if versioned is not None and version is not None:
                version_after = yield call(versioned.version, versioned.aversion, thread_id)
            history = yield call(self._parsed, self._aparsed, thread_id, version, text, version_after)
        return history if self._schema_threads is None else self._schema_threads.read(thread_id, history)

    def _schema_first_write(self, thread_id: str) -> Steps[None] | None:
        """With a schema, before this saver's first write of a thread: the steps that bring it to
        the schema's version (`SchemaThreads.write_steps`); None when there is nothing to do."""
        threads = self._schema_threads
        if threads is None or not threads.before_write(thread_id):
            return None
        return threads.write_steps(self, thread_id, self._history_steps(thread_id))

    def _forget_schema(self, thread_id: str) -> None:
        if self._schema_threads is not None:
            self._schema_threads.forget(thread_id)

    def _history(self, thread_id: str) -> History:
        return run(self._history_steps(thread_id))

    async def _ahistory(self, thread_id: str) -> History:
        return await arun(self._history_steps(thread_id))

    def _get(self, config: RunnableConfig, history: History) -> CheckpointTuple | None:
        thread_id, ns = _thread_and_ns(config)
        checkpoint_id = get_checkpoint_id(config)
        entry = self.codec.find(thread_id, history, ns, checkpoint_id)
        return self.codec.checkpoint_tuple(thread_id, entry, config if checkpoint_id else None) if entry else None

    def _put(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata, new_versions: ChannelVersions
    ) -> tuple[str, Put]:
        """The put as a change, its values encoded now, before it waits its turn (see
        `CheckpointCodec.prepare`). When it fails for an argument of the wrong type, the error
        says which (on the error path only)."""
        try:
            thread_id, ns = _thread_and_ns(config)
            put = self.codec.prepare(
                checkpoint, _metadata(config, metadata), ns, config["configurable"].get("checkpoint_id"), new_versions, self.max_history
            )
            if self._index.indexed is not None:  # the terms of the metadata stored, before the put travels
                put.terms = metadata_terms(put.metadata)
        except (TypeError, AttributeError, KeyError):
            explain(TelarSaver.put, {"config": config, "checkpoint": checkpoint, "metadata": metadata, "new_versions": new_versions})
            raise
        return thread_id, put

    def _writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str) -> tuple[str, WritesLine]:
        """The writes as a change, their values encoded now, before it waits its turn. When it
        fails for an argument of the wrong type, the error says which (on the error path only)."""
        try:
            thread_id, ns = _thread_and_ns(config)
            checkpoint_id = get_checkpoint_id(config)
            if not checkpoint_id:
                raise UsageError('put_writes needs a config with a "checkpoint_id" in "configurable": the one put returned')
            if type(task_id) is not str or type(task_path) is not str:
                check(TelarSaver.put_writes, {"task_id": task_id, "task_path": task_path})
            items = [(WRITES_IDX_MAP.get(channel, i), channel, value) for i, (channel, value) in enumerate(writes)]
            line = self.codec.writes_line(ns, checkpoint_id, task_id, items, task_path)
        except (TypeError, AttributeError, KeyError):
            explain(TelarSaver.put_writes, {"config": config, "writes": writes})
            raise
        return thread_id, line

    def _delta(self, config: RunnableConfig, history: History, channels: Sequence[str]) -> dict[str, DeltaChannelHistory]:
        thread_id, ns = _thread_and_ns(config)
        return self.codec.delta_history(thread_id, history, ns, get_checkpoint_id(config), channels)

    def rebuild_index(self) -> int:
        """Record the index terms of every thread the store holds, reading each once, then note
        the index ready; the number of threads read. The saver does this itself before it first
        uses an index that is not ready; call it after editing a file store's threads by hand."""
        self._check(self.rebuild_index, {})
        return run(self._index.rebuild_steps())

    async def arebuild_index(self) -> int:
        self._check(self.rebuild_index, {})
        return await arun(self._index.rebuild_steps())

    def _list_steps(
        self, config: RunnableConfig | None, filter: dict[str, Any] | None, before: RunnableConfig | None, limit: int | None
    ) -> Stream:
        """`list`, written once: the tuples that match, emitted thread by thread."""
        configurable = (config or {}).get("configurable") or {}
        matches = entry_filter(
            configurable.get("checkpoint_ns"), configurable.get("checkpoint_id"), get_checkpoint_id(before) if before else None, filter
        )
        threads = self._index.threads_steps(filter) if config is None else _emit(_thread_and_ns(config)[0])
        reply = None
        while True:  # the threads are emitted by `threads`, whose calls are passed on to the driver
            try:
                step = threads.send(reply)
            except StopIteration:
                return
            if isinstance(step, Call):
                reply = yield step
                continue
            reply = None
            if limit is not None and limit <= 0:
                return
            thread_id = step.value
            for entry in listed((yield from self._history_steps(thread_id)), matches, limit):
                yield Emit(self.codec.checkpoint_tuple(thread_id, entry))
                if limit is not None:
                    limit -= 1

    # --- operations on whole threads, written once for the sync and async methods ---

    def _delete_for_runs_steps(self, runs: set[str]) -> Steps[None]:
        for thread_id in (yield from self._index.runs_threads_steps(runs)):
            new = yield call(self.rewrite, self.arewrite, thread_id, lambda old: self.codec.remove_runs(old, runs))
            if (stale := self._index.stale_run_terms(thread_id, runs, new)) and (indexed := self._index.indexed) is not None:
                yield call(indexed.unindex, indexed.aunindex, thread_id, stale)

    def _copy_steps(self, source: str, target: str) -> Steps[None]:
        text = yield call(self.store.read, self.store.aread, source)
        copy = self.codec.copied(source, text) if text is not None else None  # refuses a corrupt history
        if copy is not None:
            yield call(self.rewrite, self.arewrite, target, lambda old: copy, text=copy)

    def _delete_steps(self, thread_id: str) -> Steps[None]:
        """The thread rewritten to the record of its deletion (`rules.DeleteThread`), in turn
        with the saver's other writers: a run still writing to it is refused from then on."""
        self._index.forget(thread_id)
        self._forget_schema(thread_id)
        deleted = deletion(self.clock())
        yield call(self.rewrite, self.arewrite, thread_id, lambda old: self.codec.delete_thread(old, deleted))

    def _prune_steps(self, thread_ids: Sequence[str], strategy: str) -> Steps[None]:
        strategy = _check_strategy(strategy)
        for thread_id in map(str, thread_ids):
            if strategy == "delete":
                yield from self._delete_steps(thread_id)
            else:
                self._index.forget(thread_id)
                self._forget_schema(thread_id)
                yield call(self.rewrite, self.arewrite, thread_id, self.codec.keep_latest)

    # --- sync API -------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._get(config, self._history(_thread_and_ns(config)[0]))

    def list(
        self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None, limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        self._check(self.list, {"config": config, "filter": filter, "before": before, "limit": limit})
        return stream(self._list_steps(config, filter, before, limit))

    def put(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata, new_versions: ChannelVersions
    ) -> RunnableConfig:
        thread_id, change = self._put(config, checkpoint, metadata, new_versions)
        if self._schema_threads is not None and (upgrading := self._schema_first_write(thread_id)) is not None:
            run(upgrading)
        self._writer.write(thread_id, change)
        return checkpoint_config(thread_id, change.ns, change.id)

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = "") -> None:
        thread_id, change = self._writes(config, writes, task_id, task_path)
        if self._schema_threads is not None and (upgrading := self._schema_first_write(thread_id)) is not None:
            run(upgrading)
        self._writer.write(thread_id, change)

    def delete_thread(self, thread_id: str) -> None:
        self._check(self.delete_thread, {"thread_id": thread_id})
        run(self._delete_steps(str(thread_id)))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._check(self.delete_for_runs, {"run_ids": run_ids})
        run(self._delete_for_runs_steps(set(run_ids)))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._check(self.copy_thread, {"source_thread_id": source_thread_id, "target_thread_id": target_thread_id})
        run(self._copy_steps(str(source_thread_id), str(target_thread_id)))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._check(self.prune, {"thread_ids": thread_ids, "strategy": strategy})
        run(self._prune_steps(thread_ids, strategy))

    def rewrite(self, thread_id: str, change: Change, *, text: str | None = None) -> str | None:
        """Change the thread's whole stored history, `change(old) -> new` (None: no thread),
        the one way every change but a put or its writes is written (delete_for_runs, prune,
        copy, migration, trim, repair, upgrade): in turn with the saver's other writers, after the
        writes waiting to be carried, atomically in the store; the new history. An error of
        `change` is raised here, and the writes carried with it are stored all the same.
        `text`: the history the change writes, when known before (a copy, a migration): its
        index terms are recorded before it is written. A change that only removes checkpoints
        needs none (an index may name a thread that no longer holds a term, never the reverse)."""
        self._check(self.rewrite, {"thread_id": thread_id, "change": change, "text": text})
        rewrite = RewriteThread(change, self._index.text_terms(thread_id, text))
        self._writer.write(thread_id, rewrite)
        return rewrite.result()

    def get_delta_channel_history(self, *, config: RunnableConfig, channels: Sequence[str]) -> Mapping[str, DeltaChannelHistory]:
        self._check(self.get_delta_channel_history, {"config": config, "channels": channels})
        if not channels:
            return {}
        return self._delta(config, self._history(_thread_and_ns(config)[0]), channels)

    # --- async API: the same logic on the store's async methods ---------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        history = await self._ahistory(_thread_and_ns(config)[0])
        if history.size > OFF_LOOP_CHARS:  # decoding a large state would hold up the event loop
            return await asyncio.to_thread(self._get, config, history)
        return self._get(config, history)

    async def alist(
        self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None, limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        self._check(self.list, {"config": config, "filter": filter, "before": before, "limit": limit})
        async for found in astream(self._list_steps(config, filter, before, limit)):
            yield found

    async def aput(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata, new_versions: ChannelVersions
    ) -> RunnableConfig:
        thread_id, change = self._put(config, checkpoint, metadata, new_versions)
        if self._schema_threads is not None and (upgrading := self._schema_first_write(thread_id)) is not None:
            await arun(upgrading)
        await self._writer.awrite(thread_id, change)
        return checkpoint_config(thread_id, change.ns, change.id)

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = "") -> None:
        thread_id, change = self._writes(config, writes, task_id, task_path)
        if self._schema_threads is not None and (upgrading := self._schema_first_write(thread_id)) is not None:
            await arun(upgrading)
        await self._writer.awrite(thread_id, change)

    async def adelete_thread(self, thread_id: str) -> None:
        self._check(self.delete_thread, {"thread_id": thread_id})
        await arun(self._delete_steps(str(thread_id)))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._check(self.delete_for_runs, {"run_ids": run_ids})
        await arun(self._delete_for_runs_steps(set(run_ids)))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._check(self.copy_thread, {"source_thread_id": source_thread_id, "target_thread_id": target_thread_id})
        await arun(self._copy_steps(str(source_thread_id), str(target_thread_id)))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._check(self.prune, {"thread_ids": thread_ids, "strategy": strategy})
        await arun(self._prune_steps(thread_ids, strategy))

    async def arewrite(self, thread_id: str, change: Change, *, text: str | None = None) -> str | None:
        self._check(self.rewrite, {"thread_id": thread_id, "change": change, "text": text})
        rewrite = RewriteThread(change, self._index.text_terms(thread_id, text))
        await self._writer.awrite(thread_id, rewrite)
        return rewrite.result()

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        self._check(self.get_delta_channel_history, {"config": config, "channels": channels})
        if not channels:
            return {}
        return self._delta(config, await self._ahistory(_thread_and_ns(config)[0]), channels)

    def get_next_version(self, current: Version | None, channel: None = None) -> Version:
        """The next channel version, of the same JSON type as `current`.

        Integers count up; zero-padded strings (written by `InMemorySaver` and the
        SQL savers) keep their form, so threads they wrote go on working.
        """
        if current is None:
            return 1
        try:
            if isinstance(current, str):
                return f"{int(current.split('.')[0]) + 1:032}.{0:016}"
            return int(current) + 1
        except (TypeError, ValueError):
            explain(TelarSaver.get_next_version, {"current": current})
            raise


def _emit(value: Any) -> Stream:
    yield Emit(value)


def _metadata(config: RunnableConfig, metadata: CheckpointMetadata) -> dict[str, Any]:
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


def _check_strategy(strategy: str) -> str:
    """The strategy, with LangGraph server's spelling "delete_all" read as "delete"."""
    if strategy == "delete_all":
        return "delete"
    if strategy not in ("keep_latest", "delete"):
        raise UsageError(f"unknown prune strategy {strategy!r}; use 'keep_latest' or 'delete'")
    return strategy


class _SaverContext:
    """What `TelarSaver.from_conn_string` returns: usable with `with` and `async with`."""

    _SAVER_OPTIONS = ("max_history", "serde", "keep_finished_subgraphs")

    def __init__(self, cls: type[TelarSaver], url: str, options: dict[str, Any]) -> None:
        self.cls, self.url = cls, url
        self.saver_options = {k: options.pop(k) for k in self._SAVER_OPTIONS if k in options}
        if isinstance(options.get("schema"), Schema):  # a state schema; a text `schema` is Postgres's
            self.saver_options["schema"] = options.pop("schema")
        self.store_options = options
        self.saver: TelarSaver | None = None

    def _open(self) -> TelarSaver:
        from telar_checkpoint.stores.url import open_store

        self.saver = self.cls(open_store(self.url, **self.store_options), **self.saver_options)
        return self.saver

    def __enter__(self) -> TelarSaver:
        return self._open()

    def __exit__(self, *exc: object) -> None:
        if self.saver is not None:
            self.saver.__exit__()

    async def __aenter__(self) -> TelarSaver:
        return self._open()

    async def __aexit__(self, *exc: object) -> None:
        if self.saver is not None:
            await self.saver.__aexit__()

    def __getattr__(self, name: str) -> Any:
        """A saver's method asked of the context manager (`from_conn_string` used without `with`)."""
        if name.startswith("__"):
            raise AttributeError(name)
        raise SaverContextError(
            f"TelarSaver.from_conn_string(...) gives a context manager, which has no {name!r}: use "
            f"`with TelarSaver.from_conn_string(url) as saver:` (or `async with`), or `TelarSaver(url)` "
            "for a saver you close yourself"
        )
