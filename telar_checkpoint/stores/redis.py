"""`RedisStore`: one Redis string per thread, updated by compare-and-set.

A thread's value lives at ``prefix + "h:" + key`` where the key part is the
raw UTF-8 bytes of the thread id (``surrogatepass``, so every id maps back),
and ``prefix + "schema"`` records the store's schema version. Values are the
exact UTF-8 bytes of the string. An update reads the value, runs the change,
then a Lua script applies it only if the value is still the one read (same
length and SHA-1), appending with ``APPEND`` when the new value extends the
old; otherwise the update is retried. The client does not retry commands by
itself: a dropped connection is a `StoreError` naming the server, the value
stays as it was, and the pool reconnects on the next call. Async methods use
``redis.asyncio``, with one client per event loop.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

try:
    import redis
    import redis.asyncio
    from redis.backoff import NoBackoff
    from redis.retry import Retry
except ImportError as exc:  # pragma: no cover - exercised by simulating a missing driver
    raise ImportError(f"{exc}: RedisStore needs redis; pip install 'telar-checkpoint[redis]'") from exc

from telar_checkpoint.errors import StoreError, StoredDataError, UsageError
from telar_checkpoint.stores.base import Change, Store

try:  # redis>=7: with maintenance notifications on ("auto"), the asyncio pool skips its dead-connection check
    from redis.maint_notifications import MaintNotificationsConfig

    _CLIENT_DEFAULTS: dict[str, Any] = {"maint_notifications_config": MaintNotificationsConfig(enabled=False)}
except ImportError:  # pragma: no cover - older redis
    _CLIENT_DEFAULTS = {}

SCHEMA_VERSION = 1
"""The layout of our keys; a prefix recording a newer one is refused."""

MAX_ATTEMPTS = 1000
"""Compare-and-set attempts before an update gives up (each is lost only to another writer)."""

# KEYS[1]: the value's key. ARGV: expected length (-1: absent), expected SHA-1, operation, payload.
_COMPARE_AND_SET = """
local current = redis.call('GET', KEYS[1])
local expected = tonumber(ARGV[1])
if expected < 0 then
  if current then return 0 end
elseif not current or #current ~= expected or redis.sha1hex(current) ~= ARGV[2] then
  return 0
end
if ARGV[3] == 'append' then redis.call('APPEND', KEYS[1], ARGV[4])
elseif ARGV[3] == 'set' then redis.call('SET', KEYS[1], ARGV[4])
elseif ARGV[3] == 'del' then redis.call('DEL', KEYS[1]) end
return 1
"""


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


def _plan(raw_old: bytes | None, old: str | None, new: str | None) -> list[Any] | None:
    """The compare-and-set arguments that turn `old` into `new`, or None when nothing changes."""
    if new == old:
        return None
    expected = [-1, ""] if raw_old is None else [len(raw_old), hashlib.sha1(raw_old).hexdigest()]
    if new is None:
        return [*expected, "del", b""]
    if old is not None and new.startswith(old):
        return [*expected, "append", _encode(new[len(old) :])]
    return [*expected, "set", _encode(new)]


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
        self._schema_key = self._prefix + b"schema"
        self._options: dict[str, Any] = {
            "socket_connect_timeout": connect_timeout,
            "socket_timeout": timeout,
            "retry": Retry(NoBackoff(), 0),
            **_CLIENT_DEFAULTS,
            **client_options,
        }
        try:
            self._client = redis.Redis.from_url(url, **self._options)
        except ValueError as exc:
            raise UsageError(f"not a Redis URL: {exc}") from exc
        self._script = self._client.register_script(_COMPARE_AND_SET)
        params = self._client.connection_pool.connection_kwargs
        self.server = params.get("path") or f"{params.get('host', 'localhost')}:{params.get('port', 6379)}"
        self._ready = False
        self._async: tuple[asyncio.AbstractEventLoop, Any, Any] | None = None

    def _raw_key(self, key: str) -> bytes:
        return self._values + _encode(key)

    @contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except redis.RedisError as exc:
            raise StoreError(f"Redis server at {self.server}: {exc}") from exc

    def _check_version(self, recorded: bytes | None) -> None:
        version = SCHEMA_VERSION if recorded is None else int(recorded)
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"Redis server at {self.server}: keys under {self.prefix!r} have store schema version "
                f"{version}, newer than this telar-checkpoint knows ({SCHEMA_VERSION}); upgrade telar-checkpoint"
            )
        self._ready = True

    def _setup(self) -> None:
        if not self._ready:
            self._check_version(self._client.set(self._schema_key, SCHEMA_VERSION, nx=True, get=True))

    def schema_version(self) -> int:
        """The schema version recorded under the prefix."""
        with self._errors():
            self._setup()
            return int(self._client.get(self._schema_key))

    # Sync

    def read(self, key: str) -> str | None:
        with self._errors():
            return _decode(self._client.get(self._raw_key(key)), key)

    def update(self, key: str, change: Change) -> str | None:
        raw_key = self._raw_key(key)
        with self._errors():
            self._setup()
            for attempt in range(MAX_ATTEMPTS):
                raw_old = self._client.get(raw_key)
                old = _decode(raw_old, key)
                new = change(old)
                plan = _plan(raw_old, old, new)
                if plan is None or self._script(keys=[raw_key], args=plan):
                    return new
                _pause(attempt)
        raise StoreError(f"thread {key!r}: gave up after {MAX_ATTEMPTS} conflicting updates on {self.server}")

    def delete(self, key: str) -> None:
        with self._errors():
            self._client.delete(self._raw_key(key))

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
            if raw != self._schema_key:
                others.append(raw.decode("utf-8", "backslashreplace"))
        return ours, sorted(others)

    def keys(self) -> Iterator[str]:
        return iter(self._split(self._raw_keys())[0])

    def foreign(self) -> list[str]:
        """Keys under the prefix that are neither our values nor our schema key."""
        return self._split(self._raw_keys())[1]

    def close(self) -> None:
        self._client.close()

    # Async: one client per event loop

    def _async_client(self) -> tuple[Any, Any]:
        loop = asyncio.get_running_loop()
        if self._async is None or self._async[0] is not loop:
            client = redis.asyncio.Redis.from_url(self.url, **self._options)
            self._async = (loop, client, client.register_script(_COMPARE_AND_SET))
        return self._async[1], self._async[2]

    async def aread(self, key: str) -> str | None:
        client, _script = self._async_client()
        with self._errors():
            return _decode(await client.get(self._raw_key(key)), key)

    async def aupdate(self, key: str, change: Change) -> str | None:
        client, script = self._async_client()
        raw_key = self._raw_key(key)
        with self._errors():
            if not self._ready:
                self._check_version(await client.set(self._schema_key, SCHEMA_VERSION, nx=True, get=True))
            for attempt in range(MAX_ATTEMPTS):
                raw_old = await client.get(raw_key)
                old = _decode(raw_old, key)
                new = change(old)
                plan = _plan(raw_old, old, new)
                if plan is None or await script(keys=[raw_key], args=plan):
                    return new
                if attempt > 2:
                    await asyncio.sleep(random.uniform(0, 0.001 * min(attempt, 20)))
        raise StoreError(f"thread {key!r}: gave up after {MAX_ATTEMPTS} conflicting updates on {self.server}")

    async def adelete(self, key: str) -> None:
        client, _script = self._async_client()
        with self._errors():
            await client.delete(self._raw_key(key))

    async def akeys(self) -> list[str]:
        client, _script = self._async_client()
        with self._errors():
            raw = [k async for k in client.scan_iter(match=_glob_escape(self._prefix) + b"*", count=1000)]
        return self._split(raw)[0]

    async def aclose(self) -> None:
        held, self._async = self._async, None
        if held is not None and held[0] is asyncio.get_running_loop():
            await held[1].aclose()
        self.close()
