"""`TelarSaver`: LangGraph's `BaseCheckpointSaver` on a string store, sync and async.

The one place where LangGraph, the codec and a store meet. Every method reads or
atomically updates one thread's string through the store and leaves the rest to
the pure codec, so the sync and async twins share all their logic.
"""

from __future__ import annotations

import asyncio
import copy
import os
import time
import weakref
from collections.abc import AsyncIterator, Collection, Hashable, Iterator, Mapping, Sequence
from typing import Any, Literal

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    get_checkpoint_id,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from telar_checkpoint._arguments import check
from telar_checkpoint.changes import next_version, put_change, read_target, thread_and_ns, writes_change
from telar_checkpoint.codec import (
    CheckpointCodec,
    check_max_history,
    checkpoint_config,
    entry_filter,
)
from telar_checkpoint.errors import ArgumentTypeError, SaverClosedError, SaverContextError, UsageError
from telar_checkpoint.format import WritesLine
from telar_checkpoint.history import History
from telar_checkpoint.lifetime import TTL, Clock, Lifetime, SweepReport, check_strategy, deletion, ttl_settings
from telar_checkpoint.rules import Put
from telar_checkpoint.serde_allowlist import with_msgpack_allowlist
from telar_checkpoint.serializer import JsonSerializer
from telar_checkpoint.state_schema import Schema, SchemaThreads
from telar_checkpoint.steps import Steps, Stream, arun, astream, call, run, stream
from telar_checkpoint.stores.base import ABSENT, Change, Store
from telar_checkpoint.stores.opening import open_store
from telar_checkpoint.thread_index import ThreadIndex
from telar_checkpoint.threads import ThreadRecords
from telar_checkpoint.values import ValueCodec
from telar_checkpoint.writing import RewriteThread, ThreadPolicy, Writer

# A thread's history larger than this (characters) is parsed, and its checkpoint decoded, on a
# worker thread by the async methods, not on the event loop (about 9 ms of parsing).
OFF_LOOP_CHARS = 256 * 1024
Version = int | str
AppConnection = Any  # a psycopg connection or pool, or a redis-py client, the application's own (see TelarSaver)


def _check_arguments(serde: object, keep_finished_subgraphs: object, max_history: object, **others: object) -> None:
    """Refuse an argument of the wrong type in our words (`ArgumentTypeError`), saying what to pass
    (`others` by their annotations in `TelarSaver.__init__`)."""
    if serde is not None and not (callable(getattr(serde, "dumps_typed", None)) and callable(getattr(serde, "loads_typed", None))):
        raise ArgumentTypeError(
            f"serde must be a LangGraph serializer (with dumps_typed and loads_typed), not {type(serde).__name__}"
        )
    if not isinstance(keep_finished_subgraphs, bool):
        raise ArgumentTypeError(f"keep_finished_subgraphs must be True or False, not {type(keep_finished_subgraphs).__name__}")
    if max_history is not None and (not isinstance(max_history, int) or isinstance(max_history, bool)):
        raise ArgumentTypeError(f"max_history must be a positive int or None, not {type(max_history).__name__}")
    check(TelarSaver.__init__, others)


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

    `store` (opened by `stores.open_store`): a `Store`; a directory path (a `FileStore`, made if missing;
    a directory holding only files not ours is refused, naming them), None for `./.telar-checkpoint`; a
    store URL (``sqlite:///x.db``, ``postgresql://...``, ``redis://...``, as `from_conn_string` takes); or
    the application's own psycopg connection or pool, or redis-py client (sync or asyncio), which serves the
    methods of its kind and which the saver never closes. A store opened from a path or URL is the saver's:
    ``with TelarSaver(url) as saver:`` closes it. `max_history` keeps the last N checkpoints of each thread
    (None: all). `serde` serializes state values (default: the readable `JsonSerializer`; any LangGraph
    `SerializerProtocol` works). `keep_finished_subgraphs` keeps a finished subgraph call's checkpoints
    while the checkpoint it ran under is kept (as LangGraph Studio shows them); by default they go once the
    call is over. `share_database=True` opens a URL whose database holds a LangGraph saver's data beside it
    on purpose (else refused, with the command that migrates it). `schema` (a `schema.Schema`): threads
    stored at an older state schema version read upgraded, and are rewritten at the current version before
    this saver's next write of them; a newer one is refused (docs/SCHEMA.md). `clock`: the time in seconds
    since the epoch (default `time.time`). A deleted thread stays deleted: a run still writing to it is
    refused (`ThreadDeletedError`); a new run starts it again. `ttl`: a time-to-live in langgraph.json's
    keys (``{"default_ttl": 43200}`` minutes, `strategy`, `sweep_interval_minutes`, `sweep_limit`, and
    `refresh_on_read`) or a `lifetime.TTL`: a thread idle that long reads as deleted (or as its latest
    checkpoint) and `sweep` reclaims it; ``{}`` lets only threads given their own (`set_thread_ttl`) expire.
    """

    def __init__(
        self,
        store: Store | str | os.PathLike[str] | AppConnection | None = None,
        *,
        max_history: int | None = None,
        serde: SerializerProtocol | None = None,
        keep_finished_subgraphs: bool = False,
        share_database: bool = False,
        schema: Schema | None = None,
        clock: Clock | None = None,
        ttl: TTL | Mapping[str, Any] | None = None,
    ) -> None:
        if not isinstance(store, (str, os.PathLike, type(None))):  # a Store or the application's connection; a path or URL below
            store = open_store(store, share_database=share_database).store
        _check_arguments(serde, keep_finished_subgraphs, max_history, share_database=share_database, schema=schema)
        if clock is not None and not callable(clock):
            raise ArgumentTypeError(f"clock must be a function giving the time in seconds (as time.time), not {type(clock).__name__}")
        self.clock: Clock = clock or time.time
        check_max_history(max_history)
        settings = None if ttl is None else ttl if isinstance(ttl, TTL) else ttl_settings(ttl)
        serde = serde or JsonSerializer()
        super().__init__(serde=serde)
        self.store: Store = store if isinstance(store, Store) else open_store(store, share_database=share_database).store
        self.max_history, self.schema, self.ttl = max_history, schema, settings
        self.codec = CheckpointCodec(serde, keep_finished_subgraphs=keep_finished_subgraphs)
        self._records = ThreadRecords()
        self._index = ThreadIndex(self.store, self.codec, self._records)
        self._writer = Writer(self.store, self._index, self._records, keep_finished_subgraphs)
        self._lifetime = Lifetime(settings, self.clock, self.store, self._records, self) if settings is not None else None
        self._policies = self._thread_policies()
        if self._lifetime is not None:
            ref = weakref.ref(self)  # the sweep holds the saver weakly: a saver nobody holds goes

            def sweep() -> SweepReport | None:
                saver = ref()
                return None if saver is None else saver.sweep(limit=saver._lifetime_for("sweep").pass_limit)

            async def asweep() -> SweepReport | None:
                saver = ref()
                return None if saver is None else await saver.asweep(limit=saver._lifetime_for("sweep").pass_limit)

            self._lifetime.start(sweep, asweep)

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

    def setup(self) -> None:
        """Create now what the store would make on first use (`Store.setup`), so that a deployment
        fails at its start; optional, idempotent."""
        self._check(self.setup, {})
        self.store.setup()

    async def asetup(self) -> None:
        """`setup`, on the store's async side (``await checkpointer.setup()`` of AsyncPostgresSaver)."""
        self._check(self.setup, {})
        await self.store.asetup()

    def __enter__(self) -> TelarSaver:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._lifetime is not None and self._lifetime.sweeper is not None:
            self._lifetime.sweeper.stop()
        self._closed()
        self.store.close()

    async def __aenter__(self) -> TelarSaver:
        if self._lifetime is not None and self._lifetime.sweeper is not None:  # an async saver sweeps in a task of its event loop
            self._lifetime.sweeper.start_task()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._lifetime is not None and self._lifetime.sweeper is not None:
            await self._lifetime.sweeper.astop()
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
        clone = copy.copy(self)  # the same store, records, index and writer: the two savers' writers take turns
        clone.serde = serde
        clone.codec = CheckpointCodec(serde, keep_finished_subgraphs=self.codec.keep_finished_subgraphs)
        clone.codec.values = ValueCodec(serde, allowlist=allowlist)
        clone._lifetime = self._lifetime.sharing(clone) if self._lifetime is not None else None  # (the sweep stays this saver's)
        clone._policies = clone._thread_policies()
        return clone

    def _thread_policies(self) -> tuple[ThreadPolicy, ...]:
        """What the saver does for its threads beside storing them: the schema first, then the lifetime."""
        schema = SchemaThreads(self.schema, self, self._records) if self.schema is not None else None
        return tuple(p for p in (schema, self._lifetime) if p is not None)

    # --- reading a thread, and the one write route ------------------------------------

    def _stored_steps(self, thread_id: str, latest: bool = False) -> Steps[History]:
        """The thread's parsed history as stored, read only when the store's version says it
        changed (`latest`: only its latest checkpoint will be read, see `ThreadRecords.get`)."""
        store, versioned, records = self.store, self._writer.versioned, self._records
        version = (yield call(versioned.version, versioned.aversion, thread_id)) if versioned is not None else None
        history = records.get(thread_id, version, latest)
        if history is None and versioned is not None and version is None:  # nothing stored: nothing to read
            history = records.parse(thread_id, None, ABSENT)
        elif history is None:
            text = yield call(store.read, store.aread, thread_id)
            version_after = None
            if versioned is not None and version is not None:
                version_after = yield call(versioned.version, versioned.aversion, thread_id)
            known = version if version_after == version else None
            history = yield call(self._parsed, self._aparsed, thread_id, text, known)
        return history

    def _parsed(self, thread_id: str, text: str | None, version: Hashable | None) -> History:
        return self._records.parse(thread_id, text, version)

    async def _aparsed(self, thread_id: str, text: str | None, version: Hashable | None) -> History:
        if text is not None and len(text) > OFF_LOOP_CHARS:  # parsing takes about 35 ms a MB
            return await asyncio.to_thread(self._parsed, thread_id, text, version)
        return self._parsed(thread_id, text, version)

    def _history_steps(self, thread_id: str, latest: bool = False) -> Steps[History]:
        """The thread's history as readers see it: as stored, then through each policy (with no
        policy, the stored read itself: no more steps to run)."""
        stored = self._stored_steps(thread_id, latest)
        return self._policies_read_steps(thread_id, stored) if self._policies else stored

    def _policies_read_steps(self, thread_id: str, stored: Steps[History]) -> Steps[History]:
        history = yield from stored
        for policy in self._policies:
            history = yield from policy.read_steps(thread_id, history)
        return history

    def _write(self, thread_id: str, change: Put | WritesLine) -> None:
        """The one route of a put or writes, at one time by the clock: the steps each policy has
        before the write, the write, then the steps after it of those policies (`_write_steps`)."""
        if not self._policies:
            return self._writer.write(thread_id, change)
        now = self.clock()
        if before := [(p, s) for p in self._policies if (s := p.before_write(thread_id, now)) is not None]:
            return run(self._write_steps(thread_id, change, before, now))
        self._writer.write(thread_id, change)

    async def _awrite(self, thread_id: str, change: Put | WritesLine) -> None:
        if not self._policies:
            return await self._writer.awrite(thread_id, change)
        now = self.clock()
        if before := [(p, s) for p in self._policies if (s := p.before_write(thread_id, now)) is not None]:
            return await arun(self._write_steps(thread_id, change, before, now))
        await self._writer.awrite(thread_id, change)

    def _write_steps(
        self, thread_id: str, change: Put | WritesLine, before: list[tuple[ThreadPolicy, Steps[None]]], now: float
    ) -> Steps[None]:
        for _policy, steps in before:
            yield from steps
        yield call(self._writer.write, self._writer.awrite, thread_id, change)
        for policy, _steps in before:
            if (after := policy.after_write(thread_id, now)) is not None:
                yield from after

    def _get(self, config: RunnableConfig, target: tuple[str, str, str | None], history: History) -> CheckpointTuple | None:
        thread_id, ns, checkpoint_id = target
        entry = self.codec.find(thread_id, history, ns, checkpoint_id)
        return self.codec.checkpoint_tuple(thread_id, entry, config if checkpoint_id else None) if entry else None

    def _delta(self, config: RunnableConfig, history: History, channels: Sequence[str]) -> dict[str, DeltaChannelHistory]:
        thread_id, ns = thread_and_ns(config)
        return self.codec.delta_history(thread_id, history, ns, get_checkpoint_id(config), channels)

    def _list_steps(
        self, config: RunnableConfig | None, filter: dict[str, Any] | None, before: RunnableConfig | None, limit: int | None
    ) -> Stream:
        """`list`, written once: the tuples that match, emitted thread by thread (`ThreadIndex.list_steps`)."""
        configurable = (config or {}).get("configurable") or {}
        matches = entry_filter(
            configurable.get("checkpoint_ns"), configurable.get("checkpoint_id"), get_checkpoint_id(before) if before else None, filter
        )
        thread_id = thread_and_ns(config)[0] if config is not None else None
        return self._index.list_steps(thread_id, filter, matches, limit, self._history_steps, self.codec)

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
        self._records.forget(thread_id)
        now = self.clock()
        deleted = deletion(now)
        new = yield call(self.rewrite, self.arewrite, thread_id, lambda old: self.codec.delete_thread(old, deleted))
        if self._lifetime is not None and new is not None:  # the record is kept a time-to-live, then swept
            yield from self._lifetime.deleted_steps(thread_id, now)

    def _prune_steps(self, thread_ids: Sequence[str], strategy: str) -> Steps[None]:
        strategy = check_strategy("delete" if strategy == "delete_all" else strategy, "the prune strategy")  # (LangGraph server's spelling)
        for thread_id in map(str, thread_ids):
            if strategy == "delete":
                yield from self._delete_steps(thread_id)
            else:
                self._records.forget(thread_id)
                yield call(self.rewrite, self.arewrite, thread_id, self.codec.keep_latest)

    def _lifetime_for(self, method: str) -> Lifetime:
        if self._lifetime is None:
            raise UsageError(
                f"{method} needs a saver with a time-to-live: TelarSaver(..., ttl={{'default_ttl': 43200}}) "
                "(minutes), or ttl={} for threads that expire only by their own"
            )
        return self._lifetime

    def _is_expired_steps(self, thread_id: str) -> Steps[bool]:
        lifetime = self._lifetime_for("is_expired")
        return (yield from lifetime.is_expired_steps(thread_id, (yield from self._stored_steps(thread_id)), self.clock()))

    # --- sync API -------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        target = read_target(config)
        return self._get(config, target, run(self._history_steps(target[0], not target[1] and not target[2])))

    def list(
        self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None, limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        self._check(self.list, {"config": config, "filter": filter, "before": before, "limit": limit})
        return stream(self._list_steps(config, filter, before, limit))

    def put(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata, new_versions: ChannelVersions
    ) -> RunnableConfig:
        thread_id, change = put_change(
            self.codec, self.max_history, self._index.indexed is not None, TelarSaver.put, config, checkpoint, metadata, new_versions
        )
        self._write(thread_id, change)
        return checkpoint_config(thread_id, change.ns, change.id)

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = "") -> None:
        self._write(*writes_change(self.codec, TelarSaver.put_writes, config, writes, task_id, task_path))

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

    def sweep(self, *, limit: int | None = None, dry_run: bool = False) -> SweepReport:
        """Reclaim the space of expired threads (deleted to their record, or trimmed to their latest
        checkpoint with "keep_latest") and of deletion records kept a time-to-live; at most `limit`
        threads (None: the ttl's `sweep_limit`, else all); `dry_run`: change nothing. One sweep of
        a store runs at a time, across processes (another is `skipped`) (`Lifetime.sweep_steps`)."""
        self._check(self.sweep, {"limit": limit, "dry_run": dry_run})
        return run(self._lifetime_for("sweep").sweep_steps(limit, dry_run))

    def is_expired(self, thread_id: str) -> bool:
        """Whether the thread has expired: idle longer than its time-to-live, so readers no longer
        see it (or see only its latest checkpoint, with "keep_latest") until a sweep reclaims it."""
        self._check(self.is_expired, {"thread_id": thread_id})
        return run(self._is_expired_steps(str(thread_id)))

    def set_thread_ttl(self, thread_id: str, minutes: float | None | Literal["default"]) -> None:
        """Give the thread its own time-to-live, in minutes (None: it never expires; "default":
        the saver's again), kept in the store with it, so every process sees it; its clock
        starts now. UsageError when no thread is stored under that id."""
        self._check(self.set_thread_ttl, {"thread_id": thread_id, "minutes": minutes})
        run(self._lifetime_for("set_thread_ttl").thread_ttl_steps(str(thread_id), minutes))

    def rewrite(self, thread_id: str, change: Change, *, text: str | None = None) -> str | None:
        """Change the thread's whole stored history, `change(old) -> new` (None: no thread), in turn
        with the saver's other writers, atomically in the store; the new history. Every change but
        a put or its writes is written so (delete, prune, copy, migration, trim, repair, upgrade).
        `text`: the history the change writes, when known before (a copy, a migration): its index
        terms are recorded first, and its clock starts now (a change that only removes needs none)."""
        self._check(self.rewrite, {"thread_id": thread_id, "change": change, "text": text})
        return run(self._rewrite_steps(thread_id, change, text))

    def _rewrite_steps(self, thread_id: str, change: Change, text: str | None) -> Steps[str | None]:
        rewrite = RewriteThread(change, self._index.text_terms(thread_id, text))
        yield call(self._writer.write, self._writer.awrite, thread_id, rewrite)
        new = rewrite.result()
        if text is not None and new is not None and self._lifetime is not None:
            yield from self._lifetime.fresh_clock_steps(thread_id)
        return new

    def get_delta_channel_history(self, *, config: RunnableConfig, channels: Sequence[str]) -> Mapping[str, DeltaChannelHistory]:
        self._check(self.get_delta_channel_history, {"config": config, "channels": channels})
        if not channels:
            return {}
        return self._delta(config, run(self._history_steps(thread_and_ns(config)[0])), channels)

    def rebuild_index(self) -> int:
        """Record the index terms of every thread the store holds, reading each once, then note
        the index ready; the number of threads read. The saver does this itself before it first
        uses an index that is not ready; call it after editing a file store's threads by hand."""
        self._check(self.rebuild_index, {})
        return run(self._index.rebuild_steps())

    # --- async API: the same steps, on the store's async methods ---------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        target = read_target(config)
        history = await arun(self._history_steps(target[0], not target[1] and not target[2]))
        if history.size > OFF_LOOP_CHARS:  # decoding a large state would hold up the event loop
            return await asyncio.to_thread(self._get, config, target, history)
        return self._get(config, target, history)

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
        thread_id, change = put_change(
            self.codec, self.max_history, self._index.indexed is not None, TelarSaver.put, config, checkpoint, metadata, new_versions
        )
        await self._awrite(thread_id, change)
        return checkpoint_config(thread_id, change.ns, change.id)

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = "") -> None:
        await self._awrite(*writes_change(self.codec, TelarSaver.put_writes, config, writes, task_id, task_path))

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

    async def asweep(self, *, limit: int | None = None, dry_run: bool = False) -> SweepReport:
        self._check(self.sweep, {"limit": limit, "dry_run": dry_run})
        return await arun(self._lifetime_for("sweep").sweep_steps(limit, dry_run))

    async def ais_expired(self, thread_id: str) -> bool:
        self._check(self.is_expired, {"thread_id": thread_id})
        return await arun(self._is_expired_steps(str(thread_id)))

    async def aset_thread_ttl(self, thread_id: str, minutes: float | None | Literal["default"]) -> None:
        self._check(self.set_thread_ttl, {"thread_id": thread_id, "minutes": minutes})
        await arun(self._lifetime_for("set_thread_ttl").thread_ttl_steps(str(thread_id), minutes))

    async def arewrite(self, thread_id: str, change: Change, *, text: str | None = None) -> str | None:
        self._check(self.rewrite, {"thread_id": thread_id, "change": change, "text": text})
        return await arun(self._rewrite_steps(thread_id, change, text))

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        self._check(self.get_delta_channel_history, {"config": config, "channels": channels})
        if not channels:
            return {}
        return self._delta(config, await arun(self._history_steps(thread_and_ns(config)[0])), channels)

    async def arebuild_index(self) -> int:
        self._check(self.rebuild_index, {})
        return await arun(self._index.rebuild_steps())

    def get_next_version(self, current: Version | None, channel: None = None) -> Version:
        """The next channel version, of the same JSON type as `current` (`changes.next_version`)."""
        return next_version(current, TelarSaver.get_next_version)


_SAVER_ATTRIBUTES = frozenset(name for name in dir(BaseCheckpointSaver) if not name.startswith("_"))
"""What LangGraph may read of a checkpointer: every public attribute of `BaseCheckpointSaver`."""


class _SaverContext(BaseCheckpointSaver[Version]):  # type: ignore[type-var]  # (as TelarSaver)
    """What `TelarSaver.from_conn_string` returns: usable with `with` and `async with`.

    A `BaseCheckpointSaver` to LangGraph's check (never initialised as one), so that
    ``compile(checkpointer=TelarSaver.from_conn_string(url))`` compiles, and the graph's first use
    of it raises `SaverContextError`, saying to use `with`, rather than LangGraph's `TypeError`."""

    _SAVER_OPTIONS = ("max_history", "serde", "keep_finished_subgraphs", "clock", "ttl")

    def __init__(self, cls: type[TelarSaver], url: str, options: dict[str, Any]) -> None:
        self.cls, self.url = cls, url
        self.saver_options = {k: options.pop(k) for k in self._SAVER_OPTIONS if k in options}
        if isinstance(options.get("schema"), Schema):  # a state schema; a text `schema` is Postgres's
            self.saver_options["schema"] = options.pop("schema")
        self.store_options = options
        self.saver: TelarSaver | None = None

    def _open(self) -> TelarSaver:
        self.saver = self.cls(open_store(self.url, **self.store_options).store, **self.saver_options)
        return self.saver

    def __enter__(self) -> TelarSaver:
        return self._open()

    def __exit__(self, *exc: object) -> None:
        if self.saver is not None:
            self.saver.__exit__()

    async def __aenter__(self) -> TelarSaver:
        return await self._open().__aenter__()

    async def __aexit__(self, *exc: object) -> None:
        if self.saver is not None:
            await self.saver.__aexit__()

    def __getattribute__(self, name: str) -> Any:
        """The base class's attributes are refused as missing ones are (by `__getattr__`)."""
        if name in _SAVER_ATTRIBUTES:
            raise AttributeError(name)
        return super().__getattribute__(name)

    def __getattr__(self, name: str) -> Any:
        """A saver's method asked of the context manager (`from_conn_string` used without `with`)."""
        if name.startswith("__"):
            raise AttributeError(name)
        raise SaverContextError(
            f"TelarSaver.from_conn_string(...) gives a context manager, which has no {name!r}: use "
            f"`with TelarSaver.from_conn_string(url) as saver:` (or `async with`), or `TelarSaver(url)` "
            "for a saver you close yourself"
        )
