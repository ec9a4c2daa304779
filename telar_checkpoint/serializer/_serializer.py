"""`JsonSerializer`: LangGraph's SerializerProtocol over readable JSON (see the package docs)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from typing import Any

import orjson

from telar_checkpoint._arguments import check
from telar_checkpoint.errors import SerializationError
from telar_checkpoint.serializer._decode import make_decoder
from telar_checkpoint.serializer._encode import to_jsonable
from telar_checkpoint.serializer._registry import Allowlist, strict_by_default

TYPE_NAME = "json"


class JsonSerializer:
    """Serializes graph state to JSON: plain values as they are, other types as one-key tags.

    Loading builds the standard, LangChain and LangGraph types listed in the
    package docs, the classes allowed here (`allowed_classes`, class objects, and
    `allowlist`, ``(module, name)`` pairs as LangGraph derives them from a state
    schema) and, unless `strict`, the data classes (pydantic models, dataclasses,
    enums, NamedTuples) of modules the program has already imported. Any other
    stored object loads as its plain data, with a warning. It never imports a
    module or calls a function the data names. `strict` defaults to LangGraph's
    ``LANGGRAPH_STRICT_MSGPACK``.
    """

    def __init__(
        self,
        *,
        allowed_classes: Iterable[type] = (),
        allowlist: Collection[tuple[str, ...]] | None = None,
        strict: bool | None = None,
    ) -> None:
        check(JsonSerializer.__init__, locals())
        self._allowlist = Allowlist(strict=strict_by_default() if strict is None else strict)
        for cls in allowed_classes:
            self._allowlist.add_class(cls)
        for key in allowlist or ():
            self._allowlist.add_name(key)
        self.from_jsonable = make_decoder(self._allowlist)

    # The walks themselves, no call of ours around them (every put and read goes through them):
    to_jsonable = staticmethod(to_jsonable)
    """`obj` as a value made only of JSON types (str-keyed dicts, lists, str, 64-bit ints,
    finite floats, bools, None); SerializationError if a part cannot be stored."""
    from_jsonable: Callable[[Any], Any]
    """The value `to_jsonable` was given (see the package docs for what loads as plain data);
    SerializationError for data we did not write. Set per serializer: its allowlist's decoder."""

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        return TYPE_NAME, orjson.dumps(self.to_jsonable(obj))

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        type_name, payload = data
        if type_name != TYPE_NAME:
            raise SerializationError(
                f"cannot load a value of serialization type {type_name!r}: JsonSerializer "
                f"reads only {TYPE_NAME!r}; open this data with the serializer that wrote it"
            )
        try:
            value = orjson.loads(payload)
        except orjson.JSONDecodeError as exc:
            raise SerializationError(f"stored value is not valid JSON: {exc}") from None
        return self.from_jsonable(value)

    def with_msgpack_allowlist(
        self, extra_allowlist: Iterable[tuple[str, ...] | type]
    ) -> JsonSerializer:
        """A copy that also loads the classes in `extra_allowlist`.

        LangGraph calls this (through the saver's `with_allowlist`) with the
        ``(module, name)`` pairs of the classes in a graph's state schema.
        """
        check(self.with_msgpack_allowlist, {"extra_allowlist": extra_allowlist})
        clone = JsonSerializer.__new__(JsonSerializer)
        clone._allowlist = self._allowlist.copy()
        for key in extra_allowlist:
            clone._allowlist.add_name(key)
        clone.from_jsonable = make_decoder(clone._allowlist)
        return clone

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
