"""Stand-ins for the issue-14 fixes, to see what LangGraph's suite would find once they land.

Used by telar_lgsuite_plugin when `TELAR_LGSUITE_SAVER=telar_emulate14` (a diagnosis aid,
not a fix: it patches telar_checkpoint in this test process only). Three of issue 14's bugs
make 32 of LangGraph's tests fail before they reach their other checks; with these stand-ins
in place, whatever still fails (beyond by_design.txt) is a bug of another kind:

- user classes refused on read: every class but an exception that the encoder meets is
  remembered, and a read that names a class off the allowlist gets the remembered class
  (remembering exceptions too would make reads of a pydantic_core ValidationError fail,
  since it cannot be rebuilt from its args: five test_interruption.py tests show it);
- `str`/`int`/`float`/`list`/`dict` subclasses refused on write: stored as their base type;
- task errors read back as exception objects: pending `__error__` writes read as `repr`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple

from telar_checkpoint import TelarSaver
from telar_checkpoint.errors import SerializationError
from telar_checkpoint.serializer import _encode, _registry

_seen_classes: dict[str, type] = {}
_BASE_TYPES = (str, int, float, list, dict)


def _install() -> None:
    """Patch the encoder and the allowlist (once per process)."""
    if getattr(_encode, "_lgsuite_emulated", False):
        return
    original_encoder_for_class = _encode._encoder_for_class
    original_lookup = _registry.Allowlist.lookup

    def encoder_for_class(cls: type) -> Callable[[Any], Any]:
        if not issubclass(cls, BaseException):  # data kinds only: errors have rules of their own
            _seen_classes[f"{cls.__module__}:{cls.__qualname__}"] = cls
        try:
            return original_encoder_for_class(cls)
        except SerializationError:
            base = next((base for base in _BASE_TYPES if issubclass(cls, base)), None)
            if base is None:
                raise
            return lambda obj: _encode.to_jsonable(base(obj))

    def lookup(self: _registry.Allowlist, name: Any, tag: str) -> type:
        try:
            return original_lookup(self, name, tag)
        except SerializationError:
            if isinstance(name, str) and name in _seen_classes:
                return _seen_classes[name]
            raise

    _encode._encoder_for_class = encoder_for_class
    _registry.Allowlist.lookup = lookup
    _encode._lgsuite_emulated = True


def _error_as_repr(found: CheckpointTuple | None) -> CheckpointTuple | None:
    if found is None:
        return None
    writes = [
        (task_id, channel, repr(value) if channel == "__error__" and isinstance(value, BaseException) else value)
        for task_id, channel, value in found.pending_writes or ()
    ]
    return found._replace(pending_writes=writes)


class EmulatedFixesTelarSaver(TelarSaver):
    """TelarSaver with the stand-ins of the module docstring."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        _install()
        super().__init__(*args, **kwargs)

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return _error_as_repr(super().get_tuple(config))

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return _error_as_repr(await super().aget_tuple(config))

    def list(self, config: RunnableConfig | None, **options: Any) -> Iterator[CheckpointTuple]:
        for found in super().list(config, **options):
            yield _error_as_repr(found)

    async def alist(self, config: RunnableConfig | None, **options: Any) -> AsyncIterator[CheckpointTuple]:
        async for found in super().alist(config, **options):
            yield _error_as_repr(found)
