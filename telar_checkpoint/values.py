"""How state values become JSON inside a line, and back.

A serializer that can hand us JSON values (`to_jsonable` / `from_jsonable`,
as `telar_checkpoint.JsonSerializer` does) is used directly, so state stays
readable. Any other LangGraph `SerializerProtocol` (`JsonPlusSerializer`,
`EncryptedSerializer`, ...) is wrapped: what it returns as bytes is stored as
``{"$serde": [type, base64]}`` and read back through it, once the types the
stored value names are found on the serde allowlist (`telar_checkpoint.serde_allowlist`).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Iterable
from typing import Any, Protocol, runtime_checkable

from langgraph.checkpoint.serde.base import SerializerProtocol

from telar_checkpoint.errors import SerializationError, TelarError
from telar_checkpoint.serde_allowlist import guarded

SERDE_TAG = "$serde"


@runtime_checkable
class JsonValueSerializer(Protocol):
    """A serializer that maps values to JSON-compatible data and back."""

    def to_jsonable(self, obj: Any) -> Any: ...

    def from_jsonable(self, data: Any) -> Any: ...


class ValueCodec:
    """Turns one state value into JSON-compatible data and back, through `serde`.

    `allowlist` (``(module, name)`` pairs or classes, as LangGraph derives them from a
    state schema) adds to the types a stored ``$serde`` value may name."""

    def __init__(self, serde: SerializerProtocol, *, allowlist: Iterable[tuple[str, ...] | type] = ()) -> None:
        self.serde = serde
        self.allowlist = tuple(allowlist)
        self._json = serde if isinstance(serde, JsonValueSerializer) else None
        self._load = guarded(serde, self.allowlist)  # reads $serde values: refuses types not allowed
        # One value as JSON-compatible data: the JSON serializer's own method when it has one
        # (no call of ours on the way: every put encodes its changed channels through it).
        self.encode: Callable[[Any], Any] = self._json.to_jsonable if self._json is not None else self._encode_bytes

    def _encode_bytes(self, value: Any) -> Any:
        """`value` through a serializer of bytes, stored as ``{"$serde": [type, base64]}``."""
        try:
            type_, data = self.serde.dumps_typed(value)
        except Exception as exc:  # the serializer's own error, whatever its class
            raise SerializationError(f"cannot serialize a {type(value).__name__}: {exc}") from exc
        return {SERDE_TAG: [type_, base64.b64encode(data).decode("ascii")]}

    def decode(self, data: Any) -> Any:
        if isinstance(data, dict) and len(data) == 1 and SERDE_TAG in data:
            tagged = data[SERDE_TAG]
            if not (isinstance(tagged, list) and len(tagged) == 2 and all(isinstance(x, str) for x in tagged)):
                raise SerializationError(f"malformed {SERDE_TAG} value: {tagged!r:.80}")
            try:
                data = base64.b64decode(tagged[1], validate=True)
            except (binascii.Error, ValueError) as exc:
                raise SerializationError(f"malformed base64 in a {SERDE_TAG} value: {exc}") from None
            try:
                return self._load.loads_typed((tagged[0], data))
            except TelarError:
                raise
            except Exception as exc:  # the serializer's own error (a failed decryption...), whatever its class
                raise SerializationError(f"cannot load a stored {SERDE_TAG} value of type {tagged[0]!r:.80}: {exc!r:.200}") from exc
        if self._json is not None:
            return self._json.from_jsonable(data)
        if data is None or isinstance(data, (str, int, float, bool)):
            return data
        raise SerializationError(
            f"a stored value is JSON ({type(data).__name__}) but the serializer "
            f"{type(self.serde).__name__} cannot read JSON values; open the thread with the "
            "serializer that wrote it"
        )
