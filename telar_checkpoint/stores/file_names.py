"""The file name of each thread id in a `FileStore`: safe, reversible, and distinct everywhere.

Every byte outside ``[a-z0-9_-]`` is percent-encoded with upper-case hex digits,
upper-case letters included (``Chat`` is ``%43hat``): no ``/``, ``..``, NUL or
newline reaches the file system, and ids that differ only in case get names that
differ even where the file system ignores case (macOS and Windows by default), since
lower-casing a name loses nothing (its letters are lower-case literals or the hex
digits of an escape). A name longer than a path component allows is cut into nested
``.d`` directories; a very long one is named by its hash in ``~long``, with the id in a
``.key`` file beside it.

Release 0.1.0 kept upper-case letters as they were (`legacy_name`): a store
still reads a file under that name, and renames it to its new name on its first write.
(On a file system that ignores case, that release kept ``Chat`` and ``chat`` in one
file; which thread it was cannot be told afterwards, and it is read as the thread its
name spells.)
"""

from __future__ import annotations

import functools
import hashlib
from urllib.parse import unquote_to_bytes

SUFFIX = ".jsonl"
SEGMENT = 200  # characters of an encoded name per path component
LONG = 1000  # an encoded name longer than this is stored under its hash, in LONG_DIR
LONG_DIR = "~long"  # "~" is never in an encoded name, so these never collide with one
_SAFE = frozenset(b"abcdefghijklmnopqrstuvwxyz0123456789_-")
_LEGACY_SAFE = _SAFE | frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _encode(raw: bytes, safe: frozenset[int]) -> str:
    encoded = "".join(chr(b) if b in safe else f"%{b:02X}" for b in raw)
    if len(encoded) > LONG:  # whole paths are limited (PATH_MAX): name it by its hash
        return f"{LONG_DIR}/{hashlib.sha256(raw).hexdigest()}{SUFFIX}"
    parts = [encoded[i : i + SEGMENT] for i in range(0, len(encoded), SEGMENT)] or [""]
    return "/".join([p + ".d" for p in parts[:-1]] + [parts[-1] + SUFFIX])


@functools.lru_cache(maxsize=1024)
def encode_name(key: str) -> str:
    """The relative path that holds `key` (reversible with `decode_name`, or for a very long
    key through the `.key` file beside it)."""
    return _encode(key.encode("utf-8", "surrogatepass"), _SAFE)


@functools.lru_cache(maxsize=1024)
def legacy_name(key: str) -> str | None:
    """The path release 0.1.0 gave `key` (upper-case letters kept as they were); None
    when it is `encode_name`'s."""
    raw = key.encode("utf-8", "surrogatepass")
    if not any(0x41 <= b <= 0x5A for b in raw):
        return None
    name = _encode(raw, _LEGACY_SAFE)
    return None if name == encode_name(key) else name


def names_key(relative: str, key: str) -> bool:
    """Whether `relative` is a path we write `key` at (its name, or its legacy name)."""
    return relative == encode_name(key) or relative == legacy_name(key)


def decode_name(relative: str) -> str | None:
    """The key stored at `relative`, or None when the path is not one we would write."""
    parts = relative.split("/")
    if not parts[-1].endswith(SUFFIX) or not all(p.endswith(".d") for p in parts[:-1]):
        return None
    encoded = "".join(p[:-2] for p in parts[:-1]) + parts[-1][: -len(SUFFIX)]
    try:
        key = unquote_to_bytes(encoded).decode("utf-8", "surrogatepass")
    except UnicodeError:
        return None
    return key if names_key(relative, key) else None
