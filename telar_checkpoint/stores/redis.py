"""`RedisStore`: one Redis string per thread, with a version beside it, updated by compare-and-set.

A thread's value lives at ``prefix + "h:" + key`` where the key part is the
raw UTF-8 bytes of the thread id (``surrogatepass``, so every id maps back),
and its version token at ``prefix + "v:" + key``: random bytes drawn anew by
every write. ``prefix + "schema"`` records the store's schema version. Values
are the exact UTF-8 bytes of the string. A version is (token, byte length of
the value), read in one script call; `append_if` is a Lua script that checks
both and then ``APPEND``s the suffix, so an append never reads or rewrites the
history. An update reads the value and token (``MGET``), runs the change, then
a Lua script applies it only if the token and length are still the ones read
(and, for a value written before versions, its SHA-1), appending with
``APPEND`` when the new value extends the old; otherwise the update is
retried. The client does not retry commands by itself: a dropped connection is
a `StoreError` naming the server, the value stays as it was, and the pool
reconnects on the next call. Async methods use ``redis.asyncio``, with one
client per event loop, closed when that loop shuts down (see `stores.event_loops`).

The frequent commands (`read`, `version`, `append_if`, the compare-and-set)
go straight to a connection of the client's pool (``send_command`` then
``read_response``), skipping the client's per-command machinery (retry
wrapper, observability records); scripts run by ``EVALSHA``, and by ``EVAL``
(which also loads them) when the server does not have them.

Schema 1 had no version tokens: its values are read as they are, and get a
token on their next update.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import os
import random
import time
from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

try:
    import redis
    import redis.asyncio
    from redis.backoff import NoBackoff
    from redis.retry import Retry
except ImportError as exc:  # pragma: no cover - exercised by simulating a missing driver
    raise ImportError(f"{exc}: RedisStore needs redis; pip install 'telar-checkpoint[redis]'") from exc

from telar_checkpoint.errors import StoredDataError, StoreError, UsageError
from telar_checkpoint.stores.base import Change, Store
from telar_checkpoint.stores.event_loops import PerLoop

try:  # redis>=7: with maintenance notifications on ("auto"), the asyncio pool skips its dead-connection check
    from redis.maint_notifications import MaintNotificationsConfig

    _CLIENT_DEFAULTS: dict[str, Any] = {"maint_notifications_config": MaintNotificationsConfig(enabled=False)}
except ImportError:  # pragma: no cover - older redis
    _CLIENT_DEFAULTS = {}

# redis<5.3 requires a command name here (a plain pool ignores it); redis>=5.3 warns when given one.
_POOL_ARGS: tuple[str, ...] = (
    ("GET",)
    if inspect.signature(redis.ConnectionPool.get_connection).parameters["command_name"].default
    is inspect.Parameter.empty
    else ()
)

SCHEMA_VERSION = 2
"""The layout of our keys; 1 is read as it is, a prefix recording a newer one is refused."""

MAX_ATTEMPTS = 1000
"""Compare-and-set attempts before an update gives up (each is lost only to another writer)."""

Version = tuple[bytes, int]
"""A value's token and its length in bytes."""

# KEYS: value, token. Returns {token, length}, or nil when the value or its token is missing.
_VERSION = """
local token = redis.call('GET', KEYS[2])
if not token or redis.call('EXISTS', KEYS[1]) == 0 then return false end
return {token, redis.call('STRLEN', KEYS[1])}
"""

# KEYS: value, token. ARGV: expected token, expected length, suffix, new token. Returns the new length, or nil.
_APPEND_IF = """
if redis.call('GET', KEYS[2]) ~= ARGV[1] or redis.call('EXISTS', KEYS[1]) == 0
   or redis.call('STRLEN', KEYS[1]) ~= tonumber(ARGV[2]) then
  return false
end
local length = redis.call('APPEND', KEYS[1], ARGV[3])
redis.call('SET', KEYS[2], ARGV[4])
return length
"""

# KEYS: value, token. ARGV: expected token ('' = none), expected length (-1: absent), expected SHA-1
# ('' = unchecked), operation, payload, new token. Returns the new length (-1: deleted), or nil.
_COMPARE_AND_SET = """
if (redis.call('GET', KEYS[2]) or '') ~= ARGV[1] then return false end
local expected = tonumber(ARGV[2])
if redis.call('EXISTS', KEYS[1]) == 0 then
  if expected >= 0 then return false end
elseif expected < 0 or redis.call('STRLEN', KEYS[1]) ~= expected then
  return false
elseif ARGV[3] ~= '' and redis.sha1hex(redis.call('GET', KEYS[1])) ~= ARGV[3] then
  return false
end
if ARGV[4] == 'del' then
  redis.call('DEL', KEYS[1], KEYS[2])
  return -1
end
local length
if ARGV[4] == 'append' then length = redis.call('APPEND', KEYS[1], ARGV[5])
else redis.call('SET', KEYS[1], ARGV[5]); length = #ARGV[5] end
redis.call('SET', KEYS[2], ARGV[6])
return length
"""


class _Script:
    """A Lua script's source and SHA-1, to run by EVALSHA."""

    def __init__(self, source: str) -> None:
        self.source = source.encode()
        self.sha = hashlib.sha1(self.source).hexdigest()


_VERSION_SCRIPT, _APPEND_IF_SCRIPT, _COMPARE_AND_SET_SCRIPT = map(_Script, (_VERSION, _APPEND_IF, _COMPARE_AND_SET))


def _encode(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def _decode(raw: bytes | None, key: str) -> str | None:
    if raw is None:
        return None
    try:
        return raw.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError as exc:
        raise StoredDataError(f"the stored value is not UTF-8 text: {exc}", thread_id=key) from exc


def _glob_escape(raw: bytes) -> bytes:
    return b"".join(b"\\" + bytes([b]) if b in b"*?[]\\" else bytes([b]) for b in raw)


def _token() -> bytes:
    return os.urandom(8).hex().encode()


def _plan(raw_old: bytes | None, token: bytes | None, old: str | None, new: str | None) -> list[Any] | None:
    """The compare-and-set arguments that turn `old` into `new`, or None when nothing changes."""
    if new == old:
        return None
    if raw_old is None:
        expected: list[Any] = [token or b"", -1, ""]
    else:  # a value without a token (written before versions) is also compared by its SHA-1
        expected = [token or b"", len(raw_old), "" if token else hashlib.sha1(raw_old).hexdigest()]
    if new is None:
        return [*expected, "del", b"", b""]
    if old is not None and new.startswith(old):
        return [*expected, "append", _encode(new[len(old) :]), _token()]
    return [*expected, "set", _encode(new), _token()]


def _outcome(plan: list[Any], result: int) -> Version | None:
    """The version that a compare-and-set of `plan` which returned `result` left."""
    return None if result < 0 else (plan[-1], int(result))


def _current(raw_old: bytes | None, token: bytes | None) -> Version | None:
    return None if raw_old is None or token is None else (token, len(raw_old))


def _version(reply: Any) -> Version | None:
    return None if reply is None else (bytes(reply[0]), int(reply[1]))


def _expected(version: Hashable) -> tuple[bytes, int] | None:
    """`version` as (token, length) when it is one of ours, else None."""
    if isinstance(version, tuple) and len(version) == 2 and isinstance(version[0], bytes) and isinstance(version[1], int):
        return version
    return None


def _pause(attempt: int) -> None:
    if attempt > 2:
        time.sleep(random.uniform(0, 0.001 * min(attempt, 20)))


class RedisStore(Store):
    """Histories as Redis strings under `prefix` on the server at `url`."""

    kind = "redis"

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        *,
        prefix: str = "telar:",
        connect_timeout: float = 5.0,
        timeout: float | None = 30.0,
        **client_options: Any,
    ) -> None:
        """`connect_timeout` and `timeout`: seconds to wait for a connection and for a reply;
        `client_options` go to `redis.Redis.from_url`."""
        self.url = url
        self.prefix = prefix
        self._prefix = _encode(prefix)
        self._values = self._prefix + b"h:"
        self._tokens = self._prefix + b"v:"
        self._schema_key = self._prefix + b"schema"
        self._options: dict[str, Any] = {
            "socket_connect_timeout": connect_timeout,
            "socket_timeout": timeout,
            "retry": Retry(NoBackoff(), 0),
            **_CLIENT_DEFAULTS,
            **client_options,
        }
        try:
            # Any: its replies are bytes (decode_responses is off), which redis-py's types cannot say
            self._client: Any = redis.Redis.from_url(url, **self._options)
        except ValueError as exc:
            raise UsageError(f"not a Redis URL: {exc}") from exc
        # A client bound to one connection (single_connection_client), or caching replies on the
        # client side (whose connections need the keys of each command), keeps the client's path.
        self._direct = self._client.connection is None and getattr(self._client.connection_pool, "cache", None) is None
        params = self._client.connection_pool.connection_kwargs
        self.server = params.get("path") or f"{params.get('host', 'localhost')}:{params.get('port', 6379)}"
        self._ready = False
        self._async: PerLoop[_AsyncClient] = PerLoop(self._new_async_client, _AsyncClient.aclose, _AsyncClient.abandon)

    def _raw_key(self, key: str) -> bytes:
        return self._values + _encode(key)

    def _raw_keys_of(self, key: str) -> list[bytes]:
        """The value's key and its token's key."""
        raw = _encode(key)
        return [self._values + raw, self._tokens + raw]

    @contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except redis.RedisError as exc:
            raise StoreError(f"Redis server at {self.server}: {exc}") from exc

    def _command(self, *args: Any) -> Any:
        """The reply to one command, sent on a connection of the pool (see the module's docs).
        A connection error disconnects it (redis-py does), so the pool reconnects next time."""
        if not self._direct:
            return self._client.execute_command(*args)
        pool = self._client.connection_pool
        conn = pool.get_connection(*_POOL_ARGS)
        try:
            conn.send_command(*args)
            return conn.read_response()
        finally:
            pool.release(conn)

    def _eval(self, script: _Script, keys: list[bytes], args: list[Any]) -> Any:
        """The reply of `script`, by EVALSHA, or by EVAL when the server does not have it."""
        try:
            return self._command("EVALSHA", script.sha, len(keys), *keys, *args)
        except redis.exceptions.NoScriptError:
            return self._command("EVAL", script.source, len(keys), *keys, *args)

    def _check_version(self, recorded: bytes | None) -> list[Any] | None:
        """Refuses a newer schema; the arguments of a SET that records ours over schema 1, if needed."""
        version = SCHEMA_VERSION if recorded is None else int(recorded)
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"Redis server at {self.server}: keys under {self.prefix!r} have store schema version "
                f"{version}, newer than this telar-checkpoint knows ({SCHEMA_VERSION}); upgrade telar-checkpoint"
            )
        self._ready = True
        return [self._schema_key, SCHEMA_VERSION] if version < SCHEMA_VERSION else None

    def _setup(self) -> None:
        if not self._ready:
            upgrade = self._check_version(self._client.set(self._schema_key, SCHEMA_VERSION, nx=True, get=True))
            if upgrade:
                self._client.set(*upgrade)

    def schema_version(self) -> int:
        """The schema version recorded under the prefix."""
        with self._errors():
            self._setup()
            return int(self._client.get(self._schema_key))

    # Sync

    def read(self, key: str) -> str | None:
        with self._errors():
            raw_key = self._raw_key(key)
            return _decode(self._command("GET", raw_key) if self._direct else self._client.get(raw_key), key)

    def version(self, key: str) -> Version | None:
        try:
            return _version(self._eval(_VERSION_SCRIPT, self._raw_keys_of(key), []))
        except redis.RedisError as exc:
            raise StoreError(f"Redis server at {self.server}: {exc}") from exc

    def append_if(self, key: str, suffix: str, version: Hashable) -> Version | None:
        expected = _expected(version)
        if expected is None:
            return None
        token = _token()
        try:
            length = self._eval(_APPEND_IF_SCRIPT, self._raw_keys_of(key), [*expected, _encode(suffix), token])
        except redis.RedisError as exc:
            raise StoreError(f"Redis server at {self.server}: {exc}") from exc
        return None if length is None else (token, int(length))

    def update(self, key: str, change: Change) -> str | None:
        return self.update_versioned(key, change)[0]

    def update_versioned(self, key: str, change: Change) -> tuple[str | None, Version | None]:
        keys = self._raw_keys_of(key)
        with self._errors():
            self._setup()
            for attempt in range(MAX_ATTEMPTS):
                raw_old, token = self._client.mget(keys)
                old = _decode(raw_old, key)
                new = change(old)
                plan = _plan(raw_old, token, old, new)
                if plan is None:
                    return new, _current(raw_old, token)
                result = self._eval(_COMPARE_AND_SET_SCRIPT, keys, plan)
                if result is not None:
                    return new, _outcome(plan, result)
                _pause(attempt)
        raise StoreError(f"thread {key!r}: gave up after {MAX_ATTEMPTS} conflicting updates on {self.server}")

    def delete(self, key: str) -> None:
        with self._errors():
            self._client.delete(*self._raw_keys_of(key))

    def _raw_keys(self) -> list[bytes]:
        with self._errors():
            return list(self._client.scan_iter(match=_glob_escape(self._prefix) + b"*", count=1000))

    def _split(self, raw_keys: list[bytes]) -> tuple[list[str], list[str]]:
        """Our thread ids, and the other keys under the prefix (shown with escapes)."""
        ours, others = [], []
        for raw in raw_keys:
            if raw.startswith(self._values):
                try:
                    ours.append(raw[len(self._values) :].decode("utf-8", "surrogatepass"))
                    continue
                except UnicodeDecodeError:
                    pass
            elif raw.startswith(self._tokens) and _decodable(raw[len(self._tokens) :]):
                continue
            if raw != self._schema_key:
                others.append(raw.decode("utf-8", "backslashreplace"))
        return ours, sorted(others)

    def keys(self) -> Iterator[str]:
        return iter(self._split(self._raw_keys())[0])

    def foreign(self) -> list[str]:
        """Keys under the prefix that are neither our values, their tokens nor our schema key."""
        return self._split(self._raw_keys())[1]

    def close(self) -> None:
        self._client.close()
        self._async.close()

    # Async: one client per event loop

    def _new_async_client(self) -> _AsyncClient:
        client = redis.asyncio.Redis.from_url(self.url, **self._options)
        direct = not client.single_connection_client and getattr(client.connection_pool, "cache", None) is None
        return _AsyncClient(client, direct)

    async def _acommand(self, *args: Any) -> Any:
        """`_command` on the running loop's client."""
        client, direct = self._async.current() or await self._async.get()
        if not direct:
            return await client.execute_command(*args)
        pool = client.connection_pool
        conn = await pool.get_connection(*_POOL_ARGS)
        try:
            await conn.send_command(*args)
            return await conn.read_response()
        finally:
            await pool.release(conn)

    async def _aeval(self, script: _Script, keys: list[bytes], args: list[Any]) -> Any:
        try:
            return await self._acommand("EVALSHA", script.sha, len(keys), *keys, *args)
        except redis.exceptions.NoScriptError:
            return await self._acommand("EVAL", script.source, len(keys), *keys, *args)

    async def aread(self, key: str) -> str | None:
        with self._errors():
            return _decode(await self._acommand("GET", self._raw_key(key)), key)

    async def aversion(self, key: str) -> Version | None:
        with self._errors():
            return _version(await self._aeval(_VERSION_SCRIPT, self._raw_keys_of(key), []))

    async def aappend_if(self, key: str, suffix: str, version: Hashable) -> Version | None:
        expected = _expected(version)
        if expected is None:
            return None
        token = _token()
        with self._errors():
            length = await self._aeval(_APPEND_IF_SCRIPT, self._raw_keys_of(key), [*expected, _encode(suffix), token])
        return None if length is None else (token, int(length))

    async def aupdate(self, key: str, change: Change) -> str | None:
        return (await self.aupdate_versioned(key, change))[0]

    async def aupdate_versioned(self, key: str, change: Change) -> tuple[str | None, Version | None]:
        client = (self._async.current() or await self._async.get()).client
        keys = self._raw_keys_of(key)
        with self._errors():
            if not self._ready:
                upgrade = self._check_version(await client.set(self._schema_key, SCHEMA_VERSION, nx=True, get=True))
                if upgrade:
                    await client.set(*upgrade)
            for attempt in range(MAX_ATTEMPTS):
                raw_old, token = await client.mget(keys)
                old = _decode(raw_old, key)
                new = change(old)
                plan = _plan(raw_old, token, old, new)
                if plan is None:
                    return new, _current(raw_old, token)
                result = await self._aeval(_COMPARE_AND_SET_SCRIPT, keys, plan)
                if result is not None:
                    return new, _outcome(plan, result)
                if attempt > 2:
                    await asyncio.sleep(random.uniform(0, 0.001 * min(attempt, 20)))
        raise StoreError(f"thread {key!r}: gave up after {MAX_ATTEMPTS} conflicting updates on {self.server}")

    async def adelete(self, key: str) -> None:
        client = (self._async.current() or await self._async.get()).client
        with self._errors():
            await client.delete(*self._raw_keys_of(key))

    async def akeys(self) -> list[str]:
        client = (self._async.current() or await self._async.get()).client
        with self._errors():
            raw = [k async for k in client.scan_iter(match=_glob_escape(self._prefix) + b"*", count=1000)]
        return self._split(raw)[0]

    async def aclose(self) -> None:
        await self._async.aclose()
        self.close()


class _AsyncClient(NamedTuple):
    """An event loop's client, and whether its commands may go straight to a connection."""

    client: Any
    direct: bool

    async def aclose(self) -> None:
        await self.client.aclose()

    def abandon(self) -> None:
        """A client whose loop closed without shutting down: its connections cannot be closed
        without the loop, and close when collected."""


def _decodable(raw: bytes) -> bool:
    try:
        raw.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return False
    return True
