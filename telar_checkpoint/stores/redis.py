"""`RedisStore`: one Redis string per thread, with a version beside it, updated by compare-and-set,
on a single Redis server or a Redis Cluster.

Keys, under the store's prefix (schema 3); ``id`` is the raw UTF-8 bytes of the thread id
(``surrogatepass``, so every id maps back), ``term`` those of an index term:

==================  =========================================================================
``h:`` + part       the thread's value: the exact UTF-8 bytes of its history
``v:`` + part       its version token: random bytes drawn anew by every write
``t:`` + part       the set of its index terms (so that a delete can drop them)
``i:`` + term       the ids recorded under the term (`Store.index`), a sorted set (score 0)
``keys``            every id holding a value, a sorted set (score 0) read by ``ZRANGEBYLEX``
``expiry``          the ids with an expiry (`Store.expire_at`), a sorted set scored by it
``l:`` + name       a lease: ``end`` + newline + holder, expiring in Redis when the lease ends
``index``           ``ready`` once the index covers every value
``schema``          the schema version
==================  =========================================================================

A thread's part is its id on a single server; on a cluster it is ``{tag}`` + id, where tag is
the CRC-32 of the id in hex: every key of a thread is in one hash slot, whatever braces the id
holds. The layout follows the client: threads move between a single server and a cluster by
``telar-checkpoint migrate``, not by copying keys.

A version is (token, byte length of the value), read in one script call; `append_if` is a Lua
script that checks both and then ``APPEND``s the suffix, so an append never reads or rewrites
the history. An update reads the value and token (``MGET``), runs the change, then a Lua script
applies it only if the token and length are still the ones read (and, for a value written before
versions, its SHA-1), appending with ``APPEND`` when the new value extends the old; otherwise
the update is retried.

The index and the key set: on a single server, the script that creates a value adds its id to
``keys``, and the script that deletes one removes it from ``keys`` and from the sets of its terms,
atomically. On a cluster those global keys are in other slots than the thread's, so they are
written by separate commands: a value's index entries before the write that creates it (and its
id once more after it), and removed after a delete, which then looks again and restores the
entries of a write that raced it. The index may so hold more than the values (after a crash),
never less.

Expiries: ``ZADD GT`` keeps the later time, and `expired` is one ``ZRANGE ... BYSCORE``. A
delete drops the id from ``expiry`` in its script on a single server, and right after it on a
cluster. A lease is taken, renewed or refused by a Lua script that compares the holder and the
end (on the caller's clock) it finds, and sets the key to expire in Redis once the lease ends
(``PX``, rounded up), so a lapsed lease does not stay behind.

Commands are not retried: a dropped connection is a `StoreError` naming the server, the value
stays as it was, and the pool reconnects on the next call (a command that only reads is sent once
more: see `redis_scripts.reads_only`). The store reaches Redis through clients it makes from its
URL, or through a redis-py client the application gave it and owns (sync or async, never closed by
the store): how, in `stores.redis_clients`. Scripts run by ``EVALSHA``, and by ``EVAL`` (which also
loads them) when the server does not have them. The operations are written once as generators of
commands, run by a sync and an async driver; the scripts are in `stores.redis_scripts`.

Schema 1 had no version tokens: its values are read as they are, and get a token on their next
update. Schemas 1 and 2 had no index: a prefix of theirs is marked 3 when first written, its index
not ready until the saver rebuilds it (`set_index_ready` then builds ``keys`` by a ``SCAN``).
"""

from __future__ import annotations

import asyncio
import math
import time
import zlib
from collections.abc import Callable, Collection, Coroutine, Generator, Hashable, Iterator
from contextlib import AbstractContextManager
from typing import Any, NamedTuple

try:
    import redis
    from redis.exceptions import RedisClusterException

    from telar_checkpoint.stores import redis_clients as clients
except ImportError as exc:  # pragma: no cover - exercised by simulating a missing driver
    raise ImportError(f"{exc}: RedisStore needs redis; pip install 'telar-checkpoint[redis]'") from exc

from telar_checkpoint._arguments import check
from telar_checkpoint.errors import StoreError, UsageError
from telar_checkpoint.stores import redis_scripts as scripts
from telar_checkpoint.stores.base import ABSENT, Change, Store
from telar_checkpoint.stores.common import (
    attempts,
    check_schema,
    decode_key,
    decode_value,
    decoded_keys,
    driver_error,
    driver_errors,
    encode,
    gave_up,
)
from telar_checkpoint.stores.url import CLUSTER_SCHEMES, scheme

SCHEMA_VERSION = 3
"""The layout of our keys; 1 and 2 are read as they are (and marked 3), a newer one is refused."""

SCAN_BATCH = clients.SCAN_BATCH
"""Keys asked of each ``SCAN`` call, and ids added to the key set by one ``ZADD``."""

FOREIGN_SCANS = 20
"""SCAN calls made, at most, looking for a LangGraph saver's keys when a new prefix is set up."""

Version = tuple[bytes, int]
"""A value's token and its length in bytes."""


class _Eval(NamedTuple):
    """A step that runs a script (any other step is a command's arguments)."""

    script: scripts.Script
    keys: list[bytes]
    args: list[Any]


RedisSteps = Generator[_Eval | tuple[Any, ...], Any, Any]
"""An operation of the Redis store as a generator: it yields scripts (`_Eval`) and commands (their
arguments), is sent back each one's reply, and returns its result; `_drive` and `_adrive` run it
(not the saver's `steps.Steps`, whose steps are calls of a store's methods)."""

_ERRORS = (redis.RedisError, RedisClusterException)
"""What redis-py raises (a cluster client's failures to reach any node are not `RedisError`s)."""


def _decode(raw: bytes | None, key: str) -> str | None:
    return None if raw is None else decode_value(raw, key)


def _tag(raw: bytes) -> bytes:
    """A cluster hash tag for the thread whose id is `raw` (hex digits only: never a brace)."""
    return b"{%08x}" % zlib.crc32(raw)


def _glob_escape(raw: bytes) -> bytes:
    return b"".join(b"\\" + bytes([b]) if b in b"*?[]\\" else bytes([b]) for b in raw)


def _version(reply: Any) -> Version | None:
    return None if reply is None else (bytes(reply[0]), int(reply[1]))


def _scored(reply: Any) -> list[tuple[str, float]]:
    """The (id, score) pairs of a ``ZRANGE ... WITHSCORES`` reply: flat (RESP2) or in pairs (RESP3)."""
    pairs = reply if reply and isinstance(reply[0], (list, tuple)) else zip(reply[::2], reply[1::2])
    return [(key, float(score)) for member, score in pairs if (key := decode_key(bytes(member))) is not None]


def _lease_args(holder: str, now: float, seconds: float) -> list[Any]:
    """The arguments of `redis_scripts.LEASE`: the end as a float's repr, and Redis's own expiry in ms."""
    return [encode(holder), repr(float(now)), repr(float(now + seconds)), max(1, math.ceil(seconds * 1000))]


def _expected(version: Hashable) -> tuple[bytes, int] | None:
    """`version` as (token, length) when it is one of ours, else None."""
    if isinstance(version, tuple) and len(version) == 2 and isinstance(version[0], bytes) and isinstance(version[1], int):
        return version
    return None


class RedisStore(Store):
    """Histories as Redis strings under `prefix` on the server or cluster at `url`."""

    kind = "redis"
    # Versions: (token, length), see the module's docs; the index: a sorted set per term;
    # expiries and leases: the sorted set ``expiry`` and a key per lease.
    keeps_versions = keeps_index = True

    def __init__(
        self,
        url: str | clients.Client = "redis://127.0.0.1:6379/0",
        *,
        prefix: str = "telar:",
        connect_timeout: float = 5.0,
        timeout: float | None = 30.0,
        max_connections: int = 64,
        share_database: bool = False,
        **client_options: Any,
    ) -> None:
        """`url`: ``redis://``, ``rediss://`` or ``unix://`` for a server, ``redis+cluster://host:port[,host:port...]``
        (or ``rediss+cluster://``) for a Redis Cluster, reached through any of the nodes named; or a
        redis-py client the application made and owns, which the store uses as it is and never closes:
        ``redis.Redis`` or ``redis.cluster.RedisCluster`` for the sync methods, ``redis.asyncio.Redis``
        or ``redis.asyncio.cluster.RedisCluster`` for the async ones (the other kind refuses, changing
        nothing; see `stores.redis_clients`).
        `connect_timeout` and `timeout`: seconds to wait for a connection and for a reply;
        `max_connections`: connections of each client on a single server (the sync one, and one per
        event loop), a call waiting up to `timeout` for a free one;
        `client_options` go to redis-py's client (``redis.Redis`` or ``redis.cluster.RedisCluster``);
        these four are for the clients made from a URL (a given client keeps its own settings).
        `share_database`: write under a new prefix of a server that holds a LangGraph RedisSaver's keys
        (else the first write, or any operation but a read, raises ForeignStoreError, writing nothing;
        not checked on a cluster)."""
        check(RedisStore.__init__, {k: v for k, v in locals().items() if k not in ("client_options", "url")})
        self.prefix = prefix
        self.share_database = share_database
        self._own: clients.OwnClients | None = None
        self._given: clients.Given | None = None
        if isinstance(url, str):
            self.cluster = scheme(url) in CLUSTER_SCHEMES
            own = self._own = clients.OwnClients(url, self.cluster, connect_timeout, timeout, client_options, max_connections)
            self.url, self.server, self._db = url, own.server, own.db
            self._command: Callable[..., Any] = own.command
            self._acommand: Callable[..., Coroutine[Any, Any, Any]] = own.acommand
            self._scan_keys: Callable[[bytes], list[bytes]] = own.scan
            self._ascan_keys: Callable[[bytes], Coroutine[Any, Any, list[bytes]]] = own.ascan
        else:
            given = self._given = clients.given(url)
            options = sorted(client_options) + [
                name for name, value, default in
                (("connect_timeout", connect_timeout, 5.0), ("timeout", timeout, 30.0), ("max_connections", max_connections, 64))
                if value != default
            ]  # fmt: skip
            if options:
                raise UsageError(
                    f"RedisStore was given a client and the options {options}, which are for the "
                    "clients it makes from a URL: set them on your client"
                )
            self.cluster, self.url, self.server, self._db = given.cluster, given.url, given.server, given.db
            self._command, self._acommand = given.command, given.acommand
            self._scan_keys, self._ascan_keys = given.scan, given.ascan
        self._where = f"Redis {'cluster' if self.cluster else 'server'} at {self.server}"
        if self.cluster:
            self.kind = "redis-cluster"
            if "{" in prefix:
                raise UsageError(f"Redis Cluster prefix {prefix!r}: a prefix cannot hold '{{' (it would choose the keys' hash slot)")
        raw_prefix = encode(prefix)
        self._values, self._tokens, self._terms_of = raw_prefix + b"h:", raw_prefix + b"v:", raw_prefix + b"t:"
        self._term_keys, self._key_set = raw_prefix + b"i:", raw_prefix + b"keys"
        self._index_key, self._schema_key = raw_prefix + b"index", raw_prefix + b"schema"
        self._expiry_key, self._leases = raw_prefix + b"expiry", raw_prefix + b"l:"
        self._prefix = raw_prefix
        self._globals = [] if self.cluster else [self._key_set, self._expiry_key]  # what a thread's scripts also update
        self._ready = False  # the schema was checked
        self._looked = share_database  # another tool's keys were looked for (a read's check, `_look`)
        self._index_ready = False

    # Keys

    def _part(self, raw: bytes) -> bytes:
        """The thread's part of its keys (see the module's docs)."""
        return _tag(raw) + raw if self.cluster else raw

    def _raw_key(self, key: str) -> bytes:
        return self._values + self._part(encode(key))

    def _raw_keys_of(self, key: str) -> list[bytes]:
        """The value's key and its token's key."""
        part = encode(key)
        if self.cluster:
            part = _tag(part) + part
        return [self._values + part, self._tokens + part]

    def _thread_keys(self, raw: bytes) -> list[bytes]:
        """The value's, the token's and the terms' keys, then the global keys its scripts update."""
        part = self._part(raw)
        return [self._values + part, self._tokens + part, self._terms_of + part, *self._globals]

    def _id_of(self, part: bytes) -> str | None:
        """The thread id whose keys end with `part`, or None when no thread's do."""
        if self.cluster:
            tag, part = part[:10], part[10:]
            if tag != _tag(part):
                return None
        return decode_key(part)

    # Connections

    def _errors(self) -> AbstractContextManager[None]:
        return driver_errors(self._where, _ERRORS)

    @property
    def _client(self) -> Any:
        """The sync client: ours, or the one given (tests write raw bytes through it)."""
        return self._own.sync_client() if self._own is not None else self._given.client  # type: ignore[union-attr]

    def _eval(self, script: scripts.Script, keys: list[bytes], args: list[Any]) -> Any:
        """The reply of `script`, by EVALSHA, or by EVAL when the server does not have it."""
        try:
            return self._command("EVALSHA", script.sha, len(keys), *keys, *args)
        except redis.exceptions.NoScriptError:
            return self._command("EVAL", script.source, len(keys), *keys, *args)

    def setup(self) -> None:
        """Record the schema under the prefix now, as the first write would (refusing a newer
        schema, or another tool's keys), which also checks that the server answers (and, on a
        single server, runs scripts)."""
        with self._errors():
            self._drive(self._setup_steps())

    def _run(self, steps: RedisSteps) -> Any:
        """Run an operation's steps, checking the schema first."""
        if not self._ready:
            self.setup()
        with self._errors():
            return self._drive(steps)

    def _drive(self, steps: RedisSteps) -> Any:
        try:
            step = next(steps)
            while True:
                step = steps.send(self._eval(*step) if isinstance(step, _Eval) else self._command(*step))
        except StopIteration as stop:
            return stop.value

    # Operations, each written once as steps

    def _setup_steps(self) -> RedisSteps:
        """Records our schema on a new prefix (its index ready), marks 3 over 1 and 2 (its index
        not ready), and refuses a newer one."""
        if self.cluster:
            recorded = yield ("GET", self._schema_key)
            if recorded is None:  # the marker first: whoever sees our schema sees the index ready
                yield ("SET", self._index_key, b"ready")
                if not (yield ("SET", self._schema_key, SCHEMA_VERSION, "NX")):
                    recorded = yield ("GET", self._schema_key)
        else:
            if not self.share_database and (yield ("EXISTS", self._schema_key)) == 0:
                yield from self._refuse_foreign_steps()
            recorded = yield _Eval(scripts.SETUP, [self._schema_key, self._index_key], [SCHEMA_VERSION])
        self._looked = True
        version = SCHEMA_VERSION if recorded is None else self._schema_number(recorded)
        check_schema(f"{self._where}, keys under {self.prefix!r}", version, SCHEMA_VERSION)
        if version < SCHEMA_VERSION:
            if self.cluster:
                raise StoreError(
                    f"{self._where}: keys under {self.prefix!r} have store schema version {version}, written "
                    "for a single Redis server; copy them into a new prefix with telar-checkpoint migrate"
                )
            yield ("SET", self._schema_key, SCHEMA_VERSION)  # a release without the index now refuses to write here
        self._ready = True

    def _look_steps(self) -> RedisSteps:
        """A read's check, which writes nothing: a prefix of ours not yet written, on a server that
        holds a LangGraph RedisSaver's keys, is refused as the first write would be."""
        if not self.cluster and (yield ("EXISTS", self._schema_key)) == 0:
            yield from self._refuse_foreign_steps()
        self._looked = True

    def _look(self) -> None:
        with self._errors():
            self._drive(self._look_steps())

    async def _alook(self) -> None:
        with self._errors():
            await self._adrive(self._look_steps())

    def _refuse_foreign_steps(self) -> RedisSteps:
        """Refuse a new prefix on a server holding a LangGraph RedisSaver's keys (see `stores.foreign`):
        at most `FOREIGN_SCANS` SCAN calls look for them, counting their threads up to THREADS_COUNTED."""
        from telar_checkpoint.stores.foreign import LANGGRAPH_REDIS_MATCH, THREADS_COUNTED, masked, redis_thread, refusal

        threads: set[bytes] = set()
        cursor, calls, complete = b"0", 0, True
        while True:
            cursor, keys = yield ("SCAN", cursor, "MATCH", LANGGRAPH_REDIS_MATCH, "COUNT", SCAN_BATCH)
            threads.update(thread for thread in map(redis_thread, keys) if thread is not None)
            calls += 1
            if int(cursor) == 0:
                break
            if calls == FOREIGN_SCANS or len(threads) > THREADS_COUNTED:
                complete = False
                break
        if threads:
            raise refusal(
                f"{self._where} (database {self._db})", "RedisSaver",
                min(len(threads), THREADS_COUNTED), complete and len(threads) <= THREADS_COUNTED,
                source=None, target=masked(self.url),
            )

    def _schema_number(self, recorded: bytes) -> int:
        try:
            return int(recorded)
        except ValueError:
            raise StoreError(f"{self._where}: the key {self._schema_key!r} holds {recorded!r}, not a schema version") from None

    def _update_steps(self, key: str, change: Change) -> RedisSteps:
        """One compare-and-set attempt: the new value and its version, or None when another writer moved it first."""
        raw = encode(key)
        keys = self._thread_keys(raw)
        raw_old, token = yield ("MGET", keys[0], keys[1])
        old = _decode(raw_old, key)
        new = change(old)
        plan = scripts.plan(raw_old, token, old, new)
        if plan is None:
            return new, None if raw_old is None or token is None else (token, len(raw_old))
        creates = self.cluster and raw_old is None
        if creates:
            yield ("ZADD", self._key_set, 0, raw)
        result = yield _Eval(scripts.COMPARE_AND_SET, keys, [*plan, raw, self._term_keys])
        if result is None:
            return None
        if isinstance(result, list):  # deleted
            if self.cluster:
                yield from self._cleanup_steps(raw, keys, result)
            return None, None
        if creates:  # again: a delete of the thread that raced this write may have removed it
            yield ("ZADD", self._key_set, 0, raw)
        return new, (plan[-1], int(result))

    def _delete_steps(self, key: str) -> RedisSteps:
        raw = encode(key)
        keys = self._thread_keys(raw)
        terms = yield _Eval(scripts.DELETE, keys, [raw, self._term_keys])
        if self.cluster:
            yield from self._cleanup_steps(raw, keys, terms)

    def _cleanup_steps(self, raw: bytes, keys: list[bytes], terms: list[bytes]) -> RedisSteps:
        """On a cluster, after a delete: drop the thread's id from the key set and from its terms'
        sets, then look again, restoring what a write that raced the delete recorded meanwhile
        (`index` records the thread's own terms before the terms' sets)."""
        for term in terms:
            yield ("ZREM", self._term_keys + term, raw)
        yield ("ZREM", self._key_set, raw)
        yield ("ZREM", self._expiry_key, raw)
        exists, now = yield _Eval(scripts.LOOK_AGAIN, [keys[0], keys[2]], [])
        if exists:
            yield ("ZADD", self._key_set, 0, raw)
        for term in set(terms) & set(now):
            yield ("ZADD", self._term_keys + term, 0, raw)

    def _index_steps(self, key: str, terms: Collection[str], add: bool) -> RedisSteps:
        raw = encode(key)
        encoded = [encode(term) for term in dict.fromkeys(terms)]
        if not encoded:
            return
        own = self._thread_keys(raw)[2]
        if not self.cluster:
            yield _Eval(scripts.INDEX, [own], ["add" if add else "remove", raw, self._term_keys, *encoded])
        elif add:  # the thread's own set first: a delete racing this finds the terms there (`_cleanup_steps`)
            yield ("SADD", own, *encoded)
            for term in encoded:
                yield ("ZADD", self._term_keys + term, 0, raw)
        else:
            for term in encoded:
                yield ("ZREM", self._term_keys + term, raw)
            yield ("SREM", own, *encoded)

    def _indexed_steps(self, term: str, start: str | None, limit: int | None) -> RedisSteps:
        return (yield from self._range_steps(self._term_keys + encode(term), b"-" if start is None else b"[" + encode(start), limit))

    def _index_ready_steps(self) -> RedisSteps:
        self._index_ready = self._index_ready or (yield ("GET", self._index_key)) == b"ready"
        return self._index_ready

    def _set_index_ready_steps(self, keys: list[str]) -> RedisSteps:
        """Adds `keys` (every thread, found by a scan) to the key set, then marks the index ready."""
        for start in range(0, len(keys), SCAN_BATCH):
            members = [item for key in keys[start : start + SCAN_BATCH] for item in (0, encode(key))]
            yield ("ZADD", self._key_set, *members)
        yield ("SET", self._index_key, b"ready")
        self._index_ready = True

    def _sorted_keys_steps(self, after: str | None, limit: int | None) -> RedisSteps:
        return (yield from self._range_steps(self._key_set, b"-" if after is None else b"(" + encode(after), limit))

    def _range_steps(self, sorted_set: bytes, start: bytes, limit: int | None) -> RedisSteps:
        """The ids of a sorted set (score 0) from `start` (ZRANGEBYLEX's form) on, at most `limit`."""
        if limit is not None and limit <= 0:
            return []
        page = () if limit is None else ("LIMIT", 0, limit)
        return decoded_keys((yield ("ZRANGEBYLEX", sorted_set, start, b"+", *page)))

    def _expire_at_steps(self, key: str, when: float) -> RedisSteps:
        yield ("ZADD", self._expiry_key, "GT", float(when), encode(key))

    def _set_expiry_steps(self, key: str, when: float | None) -> RedisSteps:
        if when is None:
            yield ("ZREM", self._expiry_key, encode(key))
        else:
            yield ("ZADD", self._expiry_key, float(when), encode(key))

    def _expiry_steps(self, key: str) -> RedisSteps:
        score = yield ("ZSCORE", self._expiry_key, encode(key))
        return None if score is None else float(score)

    def _expired_steps(self, now: float, limit: int) -> RedisSteps:
        if limit <= 0:
            return []
        return _scored((yield ("ZRANGE", self._expiry_key, "-inf", float(now), "BYSCORE", "LIMIT", 0, limit, "WITHSCORES")))

    def _lease_steps(self, name: str, holder: str, now: float, seconds: float) -> RedisSteps:
        return int((yield _Eval(scripts.LEASE, [self._leases + encode(name)], _lease_args(holder, now, seconds)))) == 1

    def _release_steps(self, name: str, holder: str) -> RedisSteps:
        yield _Eval(scripts.RELEASE, [self._leases + encode(name)], [encode(holder)])

    def _schema_steps(self) -> RedisSteps:
        return int((yield ("GET", self._schema_key)))

    def schema_version(self) -> int:
        """The schema version recorded under the prefix."""
        return int(self._run(self._schema_steps()))

    # Sync

    def read(self, key: str) -> str | None:
        if not self._looked:
            self._look()
        with self._errors():
            return _decode(self._command("GET", self._raw_key(key)), key)

    def version(self, key: str) -> Version | None:
        if not self._looked:
            self._look()
        try:  # not `_errors()`: the saver's fast path, where a context manager's cost shows (A/B: 4 µs a call)
            return _version(self._eval(scripts.VERSION, self._raw_keys_of(key), []))
        except _ERRORS as exc:
            raise driver_error(self._where, exc) from exc

    def _creation(self, key: str, suffix: str) -> tuple[list[bytes], list[Any]] | None:
        """The compare-and-set that creates `key` holding `suffix` if it holds nothing (`ABSENT`),
        on a single server whose schema was checked; None elsewhere (the saver then updates: on a
        cluster, a thread's creation also writes the key set, in another slot)."""
        if self.cluster or not self._ready:
            return None
        raw = encode(key)
        return self._thread_keys(raw), [*scripts.plan(None, None, None, suffix), raw, self._term_keys]  # type: ignore[misc]

    def append_if(self, key: str, suffix: str, version: Hashable) -> Version | None:
        if version is ABSENT:
            creation = self._creation(key, suffix)
            if creation is None:
                return None
            with self._errors():
                length = self._eval(scripts.COMPARE_AND_SET, *creation)
            return None if length is None else (creation[1][-3], int(length))
        expected = _expected(version)
        if expected is None:
            return None
        token = scripts.new_token()
        try:
            length = self._eval(scripts.APPEND_IF, self._raw_keys_of(key), [*expected, encode(suffix), token])
        except _ERRORS as exc:
            raise driver_error(self._where, exc) from exc
        return None if length is None else (token, int(length))

    def update(self, key: str, change: Change) -> str | None:
        return self.update_versioned(key, change)[0]

    def update_versioned(self, key: str, change: Change) -> tuple[str | None, Version | None]:
        for pause in attempts():
            if pause:
                time.sleep(pause)
            result = self._run(self._update_steps(key, change))
            if result is not None:
                return result  # type: ignore[no-any-return]  # (a pair, as _update_steps says)
        raise gave_up(key, self._where)

    def delete(self, key: str) -> None:
        self._run(self._delete_steps(key))

    def index(self, key: str, terms: Collection[str]) -> None:
        self._run(self._index_steps(key, terms, True))

    def unindex(self, key: str, terms: Collection[str]) -> None:
        self._run(self._index_steps(key, terms, False))

    def indexed(self, term: str, start: str | None = None, limit: int | None = None) -> list[str]:
        return self._run(self._indexed_steps(term, start, limit))  # type: ignore[no-any-return]

    def index_ready(self) -> bool:
        return self._index_ready or bool(self._run(self._index_ready_steps()))

    def set_index_ready(self) -> None:
        self._run(self._set_index_ready_steps(list(self.keys())))

    def sorted_keys(self, after: str | None = None, limit: int | None = None) -> list[str]:
        return self._run(self._sorted_keys_steps(after, limit))  # type: ignore[no-any-return]

    def expire_at(self, key: str, when: float) -> None:
        self._run(self._expire_at_steps(key, when))

    def set_expiry(self, key: str, when: float | None) -> None:
        self._run(self._set_expiry_steps(key, when))

    def expiry(self, key: str) -> float | None:
        return self._run(self._expiry_steps(key))  # type: ignore[no-any-return]

    def expired(self, now: float, limit: int) -> list[tuple[str, float]]:
        return self._run(self._expired_steps(now, limit))  # type: ignore[no-any-return]

    def lease(self, name: str, holder: str, now: float, seconds: float) -> bool:
        return self._run(self._lease_steps(name, holder, now, seconds))  # type: ignore[no-any-return]

    def release(self, name: str, holder: str) -> None:
        self._run(self._release_steps(name, holder))

    def _scan(self, match: bytes) -> list[bytes]:
        with self._errors():
            return self._scan_keys(match)

    def _split(self, raw_keys: list[bytes]) -> list[str]:
        """The keys under the prefix that are not ours (shown with escapes)."""
        ours = {self._schema_key, self._index_key, self._key_set, self._expiry_key}
        threads = (self._values, self._tokens, self._terms_of)
        others = []
        for raw in raw_keys:
            if raw in ours or raw.startswith(self._term_keys) or raw.startswith(self._leases):
                continue
            kind = next((start for start in threads if raw.startswith(start)), None)
            if kind is None or self._id_of(raw[len(kind) :]) is None:
                others.append(raw.decode("utf-8", "backslashreplace"))
        return sorted(others)

    def keys(self) -> Iterator[str]:
        found = (self._id_of(raw[len(self._values) :]) for raw in self._scan(_glob_escape(self._values) + b"*"))
        return iter([key for key in found if key is not None])

    def foreign(self) -> list[str]:
        """Keys under the prefix that are none of ours (see the module's docs)."""
        return self._split(self._scan(_glob_escape(self._prefix) + b"*"))

    def close(self) -> None:
        """Close the clients made from the URL (the next use makes new ones); a given client is left open."""
        if self._own is not None:
            self._own.close()

    # Async

    async def _aeval(self, script: scripts.Script, keys: list[bytes], args: list[Any]) -> Any:
        try:
            return await self._acommand("EVALSHA", script.sha, len(keys), *keys, *args)
        except redis.exceptions.NoScriptError:
            return await self._acommand("EVAL", script.source, len(keys), *keys, *args)

    async def asetup(self) -> None:
        with self._errors():
            await self._adrive(self._setup_steps())

    async def _arun(self, steps: RedisSteps) -> Any:
        if not self._ready:
            await self.asetup()
        with self._errors():
            return await self._adrive(steps)

    async def _adrive(self, steps: RedisSteps) -> Any:
        try:
            step = next(steps)
            while True:
                step = steps.send(await (self._aeval(*step) if isinstance(step, _Eval) else self._acommand(*step)))
        except StopIteration as stop:
            return stop.value

    async def aread(self, key: str) -> str | None:
        if not self._looked:
            await self._alook()
        with self._errors():
            return _decode(await self._acommand("GET", self._raw_key(key)), key)

    async def aversion(self, key: str) -> Version | None:
        if not self._looked:
            await self._alook()
        with self._errors():
            return _version(await self._aeval(scripts.VERSION, self._raw_keys_of(key), []))

    async def aappend_if(self, key: str, suffix: str, version: Hashable) -> Version | None:
        if version is ABSENT:
            creation = self._creation(key, suffix)
            if creation is None:
                return None
            with self._errors():
                length = await self._aeval(scripts.COMPARE_AND_SET, *creation)
            return None if length is None else (creation[1][-3], int(length))
        expected = _expected(version)
        if expected is None:
            return None
        token = scripts.new_token()
        with self._errors():
            length = await self._aeval(scripts.APPEND_IF, self._raw_keys_of(key), [*expected, encode(suffix), token])
        return None if length is None else (token, int(length))

    async def aupdate(self, key: str, change: Change) -> str | None:
        return (await self.aupdate_versioned(key, change))[0]

    async def aupdate_versioned(self, key: str, change: Change) -> tuple[str | None, Version | None]:
        for pause in attempts():
            if pause:
                await asyncio.sleep(pause)
            result = await self._arun(self._update_steps(key, change))
            if result is not None:
                return result  # type: ignore[no-any-return]
        raise gave_up(key, self._where)

    async def adelete(self, key: str) -> None:
        await self._arun(self._delete_steps(key))

    async def aindex(self, key: str, terms: Collection[str]) -> None:
        await self._arun(self._index_steps(key, terms, True))

    async def aunindex(self, key: str, terms: Collection[str]) -> None:
        await self._arun(self._index_steps(key, terms, False))

    async def aindexed(self, term: str, start: str | None = None, limit: int | None = None) -> list[str]:
        return await self._arun(self._indexed_steps(term, start, limit))  # type: ignore[no-any-return]

    async def aindex_ready(self) -> bool:
        return self._index_ready or bool(await self._arun(self._index_ready_steps()))

    async def aset_index_ready(self) -> None:
        await self._arun(self._set_index_ready_steps(await self.akeys()))

    async def asorted_keys(self, after: str | None = None, limit: int | None = None) -> list[str]:
        return await self._arun(self._sorted_keys_steps(after, limit))  # type: ignore[no-any-return]

    async def aexpire_at(self, key: str, when: float) -> None:
        await self._arun(self._expire_at_steps(key, when))

    async def aset_expiry(self, key: str, when: float | None) -> None:
        await self._arun(self._set_expiry_steps(key, when))

    async def aexpiry(self, key: str) -> float | None:
        return await self._arun(self._expiry_steps(key))  # type: ignore[no-any-return]

    async def aexpired(self, now: float, limit: int) -> list[tuple[str, float]]:
        return await self._arun(self._expired_steps(now, limit))  # type: ignore[no-any-return]

    async def alease(self, name: str, holder: str, now: float, seconds: float) -> bool:
        return await self._arun(self._lease_steps(name, holder, now, seconds))  # type: ignore[no-any-return]

    async def arelease(self, name: str, holder: str) -> None:
        await self._arun(self._release_steps(name, holder))

    async def akeys(self) -> list[str]:
        with self._errors():
            raw = await self._ascan_keys(_glob_escape(self._values) + b"*")
        return [key for key in (self._id_of(k[len(self._values) :]) for k in raw) if key is not None]

    async def aclose(self) -> None:
        """`close`, and the running loop's client made from the URL (a given client is left open)."""
        if self._own is not None:
            await self._own.aclose()
