"""The Lua scripts `RedisStore` runs, what each takes and returns, and the arguments of the
compare-and-set (pure: no I/O). See `stores.redis` for the keys they work on.

On a single server a script may touch keys it was not given (a term's set, named from a prefix
and the term); on a cluster every script is given, and touches, only keys of one thread, which
share a hash slot.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

from telar_checkpoint.stores.common import encode, extension


class Script:
    """A Lua script's source and SHA-1, to run by EVALSHA."""

    def __init__(self, source: str) -> None:
        self.source = source.encode()
        self.sha = hashlib.sha1(self.source).hexdigest()


# KEYS: value, token. Returns {token, length}, or nil when the value or its token is missing.
_VERSION_LUA = """
local token = redis.call('GET', KEYS[2])
if not token or redis.call('EXISTS', KEYS[1]) == 0 then return false end
return {token, redis.call('STRLEN', KEYS[1])}
"""

# KEYS: value, token. ARGV: expected token, expected length, suffix, new token. Returns the new length, or nil.
_APPEND_IF_LUA = """
if redis.call('GET', KEYS[2]) ~= ARGV[1] or redis.call('EXISTS', KEYS[1]) == 0
   or redis.call('STRLEN', KEYS[1]) ~= tonumber(ARGV[2]) then
  return false
end
local length = redis.call('APPEND', KEYS[1], ARGV[3])
redis.call('SET', KEYS[2], ARGV[4])
return length
"""

# Drops the thread's terms (KEYS[3]); on a single server (KEYS[4]: the key set, KEYS[5]: the
# expiry set) its id from the term sets, the key set and the expiry set too, returning {}; on a
# cluster, returns the terms for the caller.
_FORGET_LUA = """
local function forget(id, term_prefix)
  local terms = redis.call('SMEMBERS', KEYS[3])
  redis.call('DEL', KEYS[3])
  if not KEYS[4] then return terms end
  for _, term in ipairs(terms) do redis.call('ZREM', term_prefix .. term, id) end
  redis.call('ZREM', KEYS[4], id)
  redis.call('ZREM', KEYS[5], id)
  return {}
end
"""

# KEYS: value, token, terms[, key set, expiry set]. ARGV: expected token ('' = none), expected length (-1: absent),
# expected SHA-1 ('' = unchecked), operation, payload, new token, id, term key prefix.
# Returns the new length, what `forget` returns when it deleted, or nil when the value moved.
_COMPARE_AND_SET_LUA = (
    _FORGET_LUA
    + """
if (redis.call('GET', KEYS[2]) or '') ~= ARGV[1] then return false end
local expected = tonumber(ARGV[2])
local exists = redis.call('EXISTS', KEYS[1]) == 1
if not exists then
  if expected >= 0 then return false end
elseif expected < 0 or redis.call('STRLEN', KEYS[1]) ~= expected then
  return false
elseif ARGV[3] ~= '' and redis.sha1hex(redis.call('GET', KEYS[1])) ~= ARGV[3] then
  return false
end
if ARGV[4] == 'del' then
  redis.call('DEL', KEYS[1], KEYS[2])
  return forget(ARGV[7], ARGV[8])
end
local length
if ARGV[4] == 'append' then length = redis.call('APPEND', KEYS[1], ARGV[5])
else redis.call('SET', KEYS[1], ARGV[5]); length = #ARGV[5] end
redis.call('SET', KEYS[2], ARGV[6])
if not exists and KEYS[4] then redis.call('ZADD', KEYS[4], 0, ARGV[7]) end
return length
"""
)

# KEYS: value, token, terms[, key set, expiry set]. ARGV: id, term key prefix. Returns what `forget` returns.
_DELETE_LUA = (
    _FORGET_LUA
    + """
redis.call('DEL', KEYS[1], KEYS[2])
return forget(ARGV[1], ARGV[2])
"""
)

# KEYS: the thread's terms. ARGV: 'add' or 'remove', id, term key prefix, terms (single server only).
# A term's ids are a sorted set (score 0), read a page at a time by ZRANGEBYLEX.
_INDEX_LUA = """
for i = 4, #ARGV do
  if ARGV[1] == 'add' then
    redis.call('SADD', KEYS[1], ARGV[i])
    redis.call('ZADD', ARGV[3] .. ARGV[i], 0, ARGV[2])
  else
    redis.call('SREM', KEYS[1], ARGV[i])
    redis.call('ZREM', ARGV[3] .. ARGV[i], ARGV[2])
  end
end
return 1
"""

# KEYS: schema, index marker. ARGV: our schema version. Returns the version recorded, or nil for a
# new prefix, which it makes ours with its index ready.
_SETUP_LUA = """
local recorded = redis.call('GET', KEYS[1])
if recorded then return recorded end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], 'ready')
return false
"""

# KEYS: value, terms (cluster). Returns {whether the value exists, the thread's terms}.
_LOOK_AGAIN_LUA = """
return {redis.call('EXISTS', KEYS[1]), redis.call('SMEMBERS', KEYS[2])}
"""

# A lease is the string "end\nholder" (end: seconds on the caller's clock, as Python's repr of a
# float gives them, which Lua reads back exactly), kept by Redis no longer than the lease lasts.
# KEYS: the lease. ARGV: holder, now, end, milliseconds. Returns 1 when taken or renewed, else 0.
_LEASE_LUA = """
local held = redis.call('GET', KEYS[1])
if held then
  local at = string.find(held, '\\n', 1, true)
  if string.sub(held, at + 1) ~= ARGV[1] and tonumber(string.sub(held, 1, at - 1)) > tonumber(ARGV[2]) then
    return 0
  end
end
redis.call('SET', KEYS[1], ARGV[3] .. '\\n' .. ARGV[1], 'PX', ARGV[4])
return 1
"""

# KEYS: the lease. ARGV: holder. Deletes the lease if the holder has it.
_RELEASE_LUA = """
local held = redis.call('GET', KEYS[1])
if held and string.sub(held, string.find(held, '\\n', 1, true) + 1) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 1
"""


VERSION, APPEND_IF, COMPARE_AND_SET, DELETE, INDEX, SETUP, LOOK_AGAIN, LEASE, RELEASE = map(
    Script,
    (_VERSION_LUA, _APPEND_IF_LUA, _COMPARE_AND_SET_LUA, _DELETE_LUA, _INDEX_LUA, _SETUP_LUA, _LOOK_AGAIN_LUA, _LEASE_LUA, _RELEASE_LUA),
)

_READS = frozenset(
    {"GET", "MGET", "SMEMBERS", "ZRANGEBYLEX", "ZRANGE", "ZSCORE", VERSION.sha, VERSION.source, LOOK_AGAIN.sha, LOOK_AGAIN.source}
)


def reads_only(args: tuple[Any, ...]) -> bool:
    """Whether a command changes nothing, so that it may be sent again after its connection
    dropped: a cluster client lends a pooled connection without checking it first (the async
    one), so the first command after the server dropped idle connections fails; it then
    reconnects. A write is never sent twice (it may have been applied)."""
    return args[0] in _READS or (args[0] in ("EVALSHA", "EVAL") and args[1] in _READS)


def new_token() -> bytes:
    return os.urandom(8).hex().encode()


def plan(raw_old: bytes | None, token: bytes | None, old: str | None, new: str | None) -> list[Any] | None:
    """The compare-and-set arguments that turn `old` into `new`, or None when nothing changes."""
    if new == old:
        return None
    if raw_old is None:
        expected: list[Any] = [token or b"", -1, ""]
    else:  # a value without a token (written before versions) is also compared by its SHA-1
        expected = [token or b"", len(raw_old), "" if token else hashlib.sha1(raw_old).hexdigest()]
    if new is None:
        return [*expected, "del", b"", b""]
    suffix = extension(old, new)
    if suffix is not None:
        return [*expected, "append", encode(suffix), new_token()]
    return [*expected, "set", encode(new), new_token()]
