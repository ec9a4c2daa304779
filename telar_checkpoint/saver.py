"""`TelarSaver`: LangGraph's `BaseCheckpointSaver` on a string store, sync and async.

The one place where LangGraph, the codec and a store meet. Every method reads or
atomically updates one thread's string through the store and leaves the rest to
the pure codec, so the sync and async twins share all their logic.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
import uuid
import weakref
from collections.abc import AsyncIterator, Collection, Hashable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal

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
from telar_checkpoint.errors import ArgumentTypeError, SaverClosedError, SaverContextError, TelarError, UsageError
from telar_checkpoint.format import WritesLine
from telar_checkpoint.history import History
from telar_checkpoint.lifetime import (
    RECORD_DAYS,
    TTL,
    Clock,
    Lifetimes,
    Sweeper,
    SweepReport,
    deletion,
    expiry_after,
    own_ttl,
    ttl_settings,
    written_at,
)
from telar_checkpoint.rules import DeleteThread, Put
from telar_checkpoint.schema import Schema, SchemaThreads
from telar_checkpoint.serde_allowlist import with_msgpack_allowlist
from telar_checkpoint.serializer import JsonSerializer
from telar_checkpoint.steps import Call, Emit, Steps, Stream, arun, astream, call, run, stream
from telar_checkpoint.stores.base import ABSENT, Change, Store
from telar_checkpoint.stores.file import FileStore
from telar_checkpoint.thread_index import ThreadIndex, metadata_terms
from telar_checkpoint.values import ValueCodec
from telar_checkpoint.writing import RewriteThread, Writer

DEFAULT_DIRECTORY = ".telar-checkpoint"
# A thread's history larger than this (characters) is parsed, and its checkpoint decoded, on a
# worker thread by the async methods, not on the event loop (about 9 ms of parsing).
OFF_LOOP_CHARS = 256 * 1024
SWEEP_BATCH = 500  # expired threads a sweep asks the store for at a time
SWEEP_PASS = 10_000  # threads one pass of the background sweep handles at most
SWEEP_LEASE = "sweep"  # the lease that keeps two sweeps of a store from running at once
LEASE_SECONDS = 300.0  # how long a sweep's lease lasts unless renewed (after each batch)
Version = int | str
AppConnection = Any  # a psycopg connection or pool, or a redis-py client, the application's own (see TelarSaver)


def _given_store(target: object, share_database: bool) -> Store | None:
    """A store on the application's own connection, pool or client (`target`), or None when it is
    none: psycopg's and psycopg_pool's objects make a `PostgresStore`, redis-py's a `RedisStore`.
    Neither driver is imported unless the application has imported it (it made `target` with it)."""
    module = type(target).__module__.split(".")[0]
    if module in ("psycopg", "psycopg_pool") and module in sys.modules:
        from telar_checkpoint.stores.postgres import PostgresStore

        return PostgresStore(target, share_database=share_database)  # type: ignore[arg-type]  # (it refuses what it cannot serve)
    if module == "redis" and "redis" in sys.modules:
        from telar_checkpoint.stores.redis import RedisStore
        from telar_checkpoint.stores.redis_clients import is_redis_object

        if is_redis_object(target):
            return RedisStore(target)  # type: ignore[arg-type]  # (a pipeline is refused in our words)
    return None


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
            f"redis://...), or the application's own psycopg connection or pool or redis-py client, not {type(store).__name__}"
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
    ``redis://...``), or the application's own connection, pool or client: a psycopg
    ``Connection``, ``AsyncConnection``, psycopg_pool ``ConnectionPool`` or ``AsyncConnectionPool``
    (a `PostgresStore` on it), or a redis-py ``Redis``, ``RedisCluster`` or their asyncio twins (a
    `RedisStore`); a sync one serves the sync methods, an async one the async methods, and the
    saver never closes it. A store the saver opened from a path or URL is the saver's:
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
    `ttl`: a time-to-live, in langgraph.json's keys (``{"default_ttl": 43200}``: minutes;
    `refresh_on_read`, `strategy` "delete" or "keep_latest", `sweep_interval_minutes`), or a
    `lifetime.TTL`: a thread idle that long reads as deleted (or as its latest checkpoint), and
    `sweep` reclaims its space; ``{}`` lets only threads given their own (`set_thread_ttl`) expire.
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
        given = _given_store(store, share_database) if not isinstance(store, (Store, str, os.PathLike, type(None))) else None
        if given is not None:  # the application's own connection, pool or client: the store is ours, what it holds is not
            store = given
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
        self.ttl: TTL | None = None
        self._lifetimes: Lifetimes | None = None
        self._sweeper: Sweeper | None = None
        if ttl is not None:
            self._set_ttl(ttl)

    def _set_ttl(self, ttl: TTL | Mapping[str, Any]) -> None:
        self.ttl = ttl if isinstance(ttl, TTL) else ttl_settings(ttl)
        self._lifetimes = Lifetimes(self.ttl, self.clock)
        self._holder = uuid.uuid4().hex  # this saver's name in the sweep's lease
        if self.ttl.sweep_interval_minutes is not None:
            ref = weakref.ref(self)

            def sweep() -> SweepReport | None:
                saver = ref()
                return None if saver is None else saver.sweep(limit=SWEEP_PASS)

            async def asweep() -> SweepReport | None:
                saver = ref()
                return None if saver is None else await saver.asweep(limit=SWEEP_PASS)

            self._sweeper = Sweeper(self.ttl.sweep_interval_minutes * 60, sweep, asweep)
            self._sweeper.start_thread()

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
        """Create now what the store would create on first use (tables, indexes, the directory:
        `Store.setup`), so that a deployment fails at its start rather than at its first write.
        Optional, as the saver sets its store up on first use anyway; idempotent. (LangGraph's
        PostgresSaver and SqliteSaver need their `setup()`; this one is for programs written for them.)"""
        self._check(self.setup, {})
        self.store.setup()

    async def asetup(self) -> None:
        """`setup`, on the store's async side (``await checkpointer.setup()`` of AsyncPostgresSaver)."""
        self._check(self.setup, {})
        await self.store.asetup()

    def __enter__(self) -> TelarSaver:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._sweeper is not None:
            self._sweeper.stop()
        self._closed()
        self.store.close()

    async def __aenter__(self) -> TelarSaver:
        if self._sweeper is not None:  # an async saver sweeps in a task of its event loop
            self._sweeper.start_task()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._sweeper is not None:
            await self._sweeper.astop()
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
        clone.ttl, clone._lifetimes = self.ttl, self._lifetimes  # (the sweep stays this saver's)
        clone._holder = uuid.uuid4().hex  # its own name in the sweep's lease: its sweeps and this one's take turns
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

    def _history_steps(self, thread_id: str, *, as_read: bool = True) -> Steps[History]:
        """The thread's parsed history, read only when the store's version says it changed; as
        readers see it (`as_read`: an expired thread through `_visible_steps`), else as stored."""
        store, versioned = self.store, self._writer.versioned
        version = (yield call(versioned.version, versioned.aversion, thread_id)) if versioned is not None else None
        history = self._writer.histories.get(thread_id, version)
        if history is None and versioned is not None and version is None:  # nothing stored: nothing to read
            history = self._writer.histories.parse(thread_id, None, ABSENT)
        elif history is None:
            text = yield call(store.read, store.aread, thread_id)
            version_after = None
            if versioned is not None and version is not None:
                version_after = yield call(versioned.version, versioned.aversion, thread_id)
            history = yield call(self._parsed, self._aparsed, thread_id, version, text, version_after)
        if self._schema_threads is not None:
            history = self._schema_threads.read(thread_id, history)
        if as_read and self._lifetimes is not None:
            history = yield from self._visible_steps(thread_id, history)
        return history

    def _schema_first_write(self, thread_id: str) -> Steps[None] | None:
        """With a schema, before this saver's first write of a thread: the steps that bring it to
        the schema's version (`SchemaThreads.write_steps`); None when there is nothing to do."""
        threads = self._schema_threads
        if threads is None or not threads.before_write(thread_id):
            return None
        return threads.write_steps(self, thread_id, self._history_steps(thread_id, as_read=False))

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
        now = self.clock()
        deleted = deletion(now)
        new = yield call(self.rewrite, self.arewrite, thread_id, lambda old: self.codec.delete_thread(old, deleted))
        if self._lifetimes is not None and new is not None:  # the record is kept a time-to-live, then swept
            yield from self._set_expiry_steps(thread_id, now + self._record_seconds())

    def _prune_steps(self, thread_ids: Sequence[str], strategy: str) -> Steps[None]:
        strategy = _check_strategy(strategy)
        for thread_id in map(str, thread_ids):
            if strategy == "delete":
                yield from self._delete_steps(thread_id)
            else:
                self._index.forget(thread_id)
                self._forget_schema(thread_id)
                yield call(self.rewrite, self.arewrite, thread_id, self.codec.keep_latest)

    # --- a thread's lifetime (see `lifetime`), written once for the sync and async methods ---

    def _lifetimes_for(self, method: str) -> Lifetimes:
        if self._lifetimes is None:
            raise UsageError(
                f"{method} needs a saver with a time-to-live: TelarSaver(..., ttl={{'default_ttl': 43200}}) "
                "(minutes), or ttl={} for threads that expire only by their own"
            )
        return self._lifetimes

    def _expiry_steps(self, thread_id: str, seconds: float | None, now: float) -> Steps[float | None]:
        """The thread's expiry in the store (None: none): what this saver knows, when that is
        later than `now` (the store's only grows), else the store's own."""
        lifetimes = self._lifetimes
        assert lifetimes is not None
        known = lifetimes.known(thread_id, seconds)
        if known is not None and known > now:
            return known
        store = self.store
        expiry = yield call(store.expiry, store.aexpiry, thread_id)
        lifetimes.remember(thread_id, expiry, seconds)
        return expiry

    def _is_expired_steps(self, thread_id: str, history: History, now: float) -> Steps[bool]:
        """Whether the thread has expired at `now`: its data and the store both say so."""
        lifetimes = self._lifetimes
        assert lifetimes is not None
        seconds = lifetimes.seconds(history)
        if not history.entries or not lifetimes.idle(history, now, seconds):
            return False
        expiry = yield from self._expiry_steps(thread_id, seconds, now)
        return expiry is not None and expiry <= now

    def _visible_steps(self, thread_id: str, history: History) -> Steps[History]:
        """What readers see of the thread: nothing of an expired one (or its latest checkpoint,
        with "keep_latest"); with `refresh_on_read`, reading a live one restarts its clock."""
        lifetimes = self._lifetimes
        assert lifetimes is not None
        now = self.clock()
        if (yield from self._is_expired_steps(thread_id, history, now)):
            return lifetimes.view(history)
        if lifetimes.ttl.refresh_on_read and history.entries:
            yield from self._record_steps(thread_id, history, now)
        return history

    def _record_steps(self, thread_id: str, history: History, now: float) -> Steps[None]:
        """Record the thread's expiry after a write (or a refreshing read) at `now`, unless the
        store holds one as late already (as far as this saver knows)."""
        lifetimes = self._lifetimes
        assert lifetimes is not None
        when = lifetimes.due(thread_id, history, now)
        if when is not None:
            store = self.store
            yield call(store.expire_at, store.aexpire_at, thread_id, when)
            lifetimes.remember(thread_id, when, lifetimes.seconds(history))

    def _lifetime_write_steps(self, thread_id: str, change: Put | WritesLine) -> Steps[None]:
        """A put or writes on a saver with a time-to-live: an expired thread expires first (a run
        that continues it is then refused, as after a deletion), then the write, then the
        thread's new expiry is recorded."""
        now = self.clock()
        kept = self._writer.histories.latest(thread_id)
        history = kept.history if kept is not None else (yield from self._history_steps(thread_id, as_read=False))
        if (yield from self._is_expired_steps(thread_id, history, now)):
            yield from self._expire_steps(thread_id, now, SweepReport())
        yield call(self._writer.write, self._writer.awrite, thread_id, change)
        kept = self._writer.histories.latest(thread_id)
        yield from self._record_steps(thread_id, kept.history if kept is not None else history, now)

    def _record_seconds(self) -> float:
        """How long the record of a deleted thread is kept by a saver with a time-to-live: the
        default time-to-live, else `RECORD_DAYS`."""
        minutes = self.ttl.default_ttl if self.ttl is not None else None
        return minutes * 60 if minutes is not None else RECORD_DAYS * 86400.0

    def _set_expiry_steps(self, thread_id: str, when: float | None) -> Steps[None]:
        store = self.store
        yield call(store.set_expiry, store.aset_expiry, thread_id, when)
        if self._lifetimes is not None:
            self._lifetimes.forget(thread_id)

    def _fresh_clock_steps(self, thread_id: str) -> Steps[None]:
        """A thread written whole from elsewhere (a copy, a migration, an import) or given its own
        time-to-live: its clock starts now, whatever the age of its checkpoints."""
        lifetimes = self._lifetimes
        assert lifetimes is not None
        history = yield from self._history_steps(thread_id, as_read=False)
        seconds = lifetimes.seconds(history)
        yield from self._set_expiry_steps(thread_id, expiry_after(self.clock(), seconds) if seconds is not None else None)

    def _expire_steps(self, thread_id: str, now: float, report: SweepReport, dry_run: bool = False) -> Steps[None]:
        """Expire one thread whose expiry in the store has come, if its data says so too: deleted
        (to its record) or trimmed to its latest checkpoint; a deletion record kept its time
        removed; what was done counted in `report`. Its expiry is then set anew: the record's
        end, none (trimmed), or the time its data gives (written since)."""
        lifetimes = self._lifetimes
        assert lifetimes is not None
        keep_record = self._record_seconds()
        outcome: list[Any] = []  # what the change did, on its last call: (kind, bytes before, bytes after, next expiry)

        def change(old: str | None) -> str | None:
            outcome.clear()
            if old is None:
                outcome.append(("gone", 0, 0, None))
                return None
            history = History.parse(thread_id, old)
            if history.only_deleted:
                record = history.deletion_record
                assert record is not None and record.deleted_at is not None
                ends = _timestamp(record.deleted_at) + keep_record
                if ends > now:
                    outcome.append(("record kept", 0, 0, ends))
                    return old
                outcome.append(("record", _bytes(old), 0, None))
                return old if dry_run else None
            operation = lifetimes.expired_now(history, now)
            if operation is None:  # written since (or no longer expiring): expires when its data says
                seconds = lifetimes.seconds(history)
                expires = expiry_after(written_at(history) or 0.0, seconds) if seconds is not None and history.entries else None
                outcome.append(("fresh", 0, 0, expires))
                return old
            new = self.codec.edit(old, operation, history=history)[0]
            deleted = isinstance(operation, DeleteThread)
            outcome.append(("deleted" if deleted else "trimmed", _bytes(old), _bytes(new), now + keep_record if deleted else None))
            return old if dry_run else new

        store = self.store
        try:
            if dry_run:
                change((yield call(store.read, store.aread, thread_id)))
            else:
                yield call(self.rewrite, self.arewrite, thread_id, change)
        except TelarError as exc:  # a thread that cannot be read is left as it is, for `repair`
            report.failed.append((thread_id, str(exc)))
            if not dry_run:  # tried again by the next sweep a time-to-live on, not by this one
                yield call(store.expire_at, store.aexpire_at, thread_id, now + keep_record)
            return
        kind, before, after, expiry = outcome[0]
        if kind == "deleted":
            report.deleted.append(thread_id)
            self._index.forget(thread_id)
            self._forget_schema(thread_id)
        elif kind == "trimmed":
            report.trimmed.append(thread_id)
        elif kind == "record":
            report.records_removed += 1
        report.bytes_freed += before - after
        if not dry_run:
            yield from self._set_expiry_steps(thread_id, expiry)

    def _sweep_steps(self, limit: int | None, dry_run: bool) -> Steps[SweepReport]:
        """`sweep`, written once: under the store's sweep lease, the expired threads in batches,
        earliest first, until none is left or `limit` were handled."""
        self._lifetimes_for("sweep")
        store = self.store
        report, now = SweepReport(dry_run=dry_run), self.clock()
        if not (yield call(store.lease, store.alease, SWEEP_LEASE, self._holder, now, LEASE_SECONDS)):
            report.skipped = True
            return report
        try:
            handled = 0
            while limit is None or handled < limit:
                want = SWEEP_BATCH if limit is None else min(SWEEP_BATCH, limit - handled)
                if dry_run:  # nothing moves out of the expired range: ask for all of them at once
                    want = limit if limit is not None else 1 << 62
                batch = yield call(store.expired, store.aexpired, now, want)
                for thread_id, _when in batch:
                    expiry = yield call(store.expiry, store.aexpiry, thread_id)  # (a write since may have moved it on)
                    if expiry is not None and expiry <= now:
                        yield from self._expire_steps(thread_id, now, report, dry_run)
                handled += len(batch)
                report.examined += len(batch)
                if dry_run or len(batch) < want:
                    break
                if not (yield call(store.lease, store.alease, SWEEP_LEASE, self._holder, self.clock(), LEASE_SECONDS)):
                    break  # the lease lapsed and another sweep took it: it goes on from here
        finally:
            yield call(store.release, store.arelease, SWEEP_LEASE, self._holder)
        return report

    def _thread_ttl_steps(self, thread_id: str, minutes: float | None | Literal["default"]) -> Steps[None]:
        self._lifetimes_for("set_thread_ttl")
        own = own_ttl(minutes)
        yield call(self.rewrite, self.arewrite, thread_id, lambda old: self.codec.with_ttl(thread_id, old, own))
        yield from self._fresh_clock_steps(thread_id)

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
        if self._lifetimes is None or self._lifetimes.quiet(thread_id, self.clock()):
            self._writer.write(thread_id, change)
        else:
            run(self._lifetime_write_steps(thread_id, change))
        return checkpoint_config(thread_id, change.ns, change.id)

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = "") -> None:
        thread_id, change = self._writes(config, writes, task_id, task_path)
        if self._schema_threads is not None and (upgrading := self._schema_first_write(thread_id)) is not None:
            run(upgrading)
        if self._lifetimes is None or self._lifetimes.quiet(thread_id, self.clock()):
            self._writer.write(thread_id, change)
        else:
            run(self._lifetime_write_steps(thread_id, change))

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
        """Reclaim the space of expired threads: delete each (to the record that keeps it
        deleted) or, with "keep_latest", trim it to its latest checkpoint; remove the records of
        threads deleted a time-to-live ago. At most `limit` threads (None: all that expired);
        `dry_run`: report what would be done, change nothing. One sweep of a store runs at a
        time, across processes: another finds it `skipped`. Its cost is in the threads that
        expired, not in those stored (the store's expiry index)."""
        self._check(self.sweep, {"limit": limit, "dry_run": dry_run})
        return run(self._sweep_steps(limit, dry_run))

    def is_expired(self, thread_id: str) -> bool:
        """Whether the thread has expired: idle longer than its time-to-live, so readers no longer
        see it (or see only its latest checkpoint, with "keep_latest") until a sweep reclaims it."""
        self._check(self.is_expired, {"thread_id": thread_id})
        self._lifetimes_for("is_expired")
        thread_id = str(thread_id)

        def steps() -> Steps[bool]:
            history = yield from self._history_steps(thread_id, as_read=False)
            return (yield from self._is_expired_steps(thread_id, history, self.clock()))

        return run(steps())

    def set_thread_ttl(self, thread_id: str, minutes: float | None | Literal["default"]) -> None:
        """Give the thread its own time-to-live, in minutes (None: it never expires; "default":
        the saver's again), kept in the store with it, so every process sees it; its clock
        starts now. UsageError when no thread is stored under that id."""
        self._check(self.set_thread_ttl, {"thread_id": thread_id, "minutes": minutes})
        run(self._thread_ttl_steps(str(thread_id), minutes))

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
        new = rewrite.result()
        if text is not None and new is not None and self._lifetimes is not None:
            run(self._fresh_clock_steps(thread_id))
        return new

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
        if self._lifetimes is None or self._lifetimes.quiet(thread_id, self.clock()):
            await self._writer.awrite(thread_id, change)
        else:
            await arun(self._lifetime_write_steps(thread_id, change))
        return checkpoint_config(thread_id, change.ns, change.id)

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = "") -> None:
        thread_id, change = self._writes(config, writes, task_id, task_path)
        if self._schema_threads is not None and (upgrading := self._schema_first_write(thread_id)) is not None:
            await arun(upgrading)
        if self._lifetimes is None or self._lifetimes.quiet(thread_id, self.clock()):
            await self._writer.awrite(thread_id, change)
        else:
            await arun(self._lifetime_write_steps(thread_id, change))

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
        return await arun(self._sweep_steps(limit, dry_run))

    async def aset_thread_ttl(self, thread_id: str, minutes: float | None | Literal["default"]) -> None:
        self._check(self.set_thread_ttl, {"thread_id": thread_id, "minutes": minutes})
        await arun(self._thread_ttl_steps(str(thread_id), minutes))

    async def arewrite(self, thread_id: str, change: Change, *, text: str | None = None) -> str | None:
        self._check(self.rewrite, {"thread_id": thread_id, "change": change, "text": text})
        rewrite = RewriteThread(change, self._index.text_terms(thread_id, text))
        await self._writer.awrite(thread_id, rewrite)
        new = rewrite.result()
        if text is not None and new is not None and self._lifetimes is not None:
            await arun(self._fresh_clock_steps(thread_id))
        return new

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


def _bytes(text: str | None) -> int:
    return len(text.encode("utf-8", "surrogatepass")) if text else 0


def _timestamp(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def _check_strategy(strategy: str) -> str:
    """The strategy, with LangGraph server's spelling "delete_all" read as "delete"."""
    if strategy == "delete_all":
        return "delete"
    if strategy not in ("keep_latest", "delete"):
        raise UsageError(f"unknown prune strategy {strategy!r}; use 'keep_latest' or 'delete'")
    return strategy


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
        from telar_checkpoint.stores.url import open_store

        self.saver = self.cls(open_store(self.url, **self.store_options), **self.saver_options)
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
