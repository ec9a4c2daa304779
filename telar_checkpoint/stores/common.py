"""What the stores do alike, written once: text as stored bytes (and their count), driver errors as `StoreError`,
the schema check, when an update appends, and the attempts of an optimistic update."""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from telar_checkpoint.errors import StoredDataError, StoreError

COMPACT_AT = 256
"""An update that extends a value held in this many chunks or more rewrites it as one chunk
(SQLite and PostgreSQL, which keep a value as chunks)."""

MAX_ATTEMPTS = 1000
"""Attempts of an optimistic update before it gives up (each is lost only to another writer)."""


def encode(text: str) -> bytes:
    """`text` as stored: UTF-8, lone surrogates kept (``surrogatepass``), so every string maps back."""
    return text.encode("utf-8", "surrogatepass")


def stored_size(text: str) -> int:
    """The bytes `text` takes in a store (`encode`: a lone surrogate takes three). The size the
    CLI, the viewer, inspection and the saver's reports give."""
    return len(encode(text))


def decode_value(raw: bytes, key: str) -> str:
    """The stored value `raw` of thread `key` as text; StoredDataError when it is not UTF-8."""
    try:
        return raw.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError as exc:
        raise StoredDataError(f"the stored value is not UTF-8 text: {exc}", thread_id=key) from exc


def decode_key(raw: bytes) -> str | None:
    """The stored key `raw` as text, or None when it is not UTF-8 (not written by us)."""
    try:
        return raw.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return None


def decoded_keys(raw_keys: Iterable[bytes]) -> list[str]:
    """The keys of `raw_keys` that are UTF-8 text (another tool's are not ours to list)."""
    return [key for key in map(decode_key, raw_keys) if key is not None]


def driver_error(where: str, exc: BaseException) -> StoreError:
    """A driver's error `exc` as the StoreError to raise, naming the server or file (`where`)."""
    return StoreError(f"{where}: {exc}".rstrip())


@contextmanager
def driver_errors(where: str, errors: type[BaseException] | tuple[type[BaseException], ...]) -> Iterator[None]:
    """Raise the driver's `errors` as `driver_error`s."""
    try:
        yield
    except errors as exc:
        raise driver_error(where, exc) from exc


def check_schema(where: str, version: int, known: int) -> None:
    """Refuse a store whose recorded schema `version` is newer than the `known` one."""
    if version > known:
        raise StoreError(
            f"{where}: store schema version {version} is newer than this telar-checkpoint knows "
            f"({known}); upgrade telar-checkpoint"
        )


def extension(old: str | None, new: str, pieces: int = 0) -> str | None:
    """What to append to `old` to make `new` ("" when they are equal), or None when `new` must
    be written whole: it does not extend `old`, or `old` is held in `COMPACT_AT` pieces or more."""
    if old is None or pieces >= COMPACT_AT or not new.startswith(old):
        return None
    return new[len(old) :]


def attempts() -> Iterator[float]:
    """For each of the `MAX_ATTEMPTS` attempts of an optimistic update, the seconds to wait
    before it: none for the first few, then a random wait that grows. Each attempt is lost
    only to another writer; raise `gave_up` once they are all lost."""
    for attempt in range(MAX_ATTEMPTS):
        yield random.uniform(0, 0.001 * min(attempt - 1, 20)) if attempt > 3 else 0.0


def gave_up(key: str, where: str) -> StoreError:
    """The error of an update of `key` in the store at `where` that lost every one of its `attempts`."""
    return StoreError(f"thread {key!r}: gave up after {MAX_ATTEMPTS} conflicting updates on {where}")
