"""The closed registry of classes a stored value may name.

A stored object names its class by a short alias for the types we ship support
for (``"AIMessage"``, ``"Send"``, ``"ValueError"``) or by ``"module:qualname"``
for anything else. Loading looks the name up in a dict; nothing is imported and
no attribute named by the data is fetched. A ``(module, name)`` pair given by
the program (LangGraph derives them from the state schema) is resolved to a
class once, from modules already imported, when the pair is added.
"""

from __future__ import annotations

import builtins
import sys
from collections.abc import Iterable
from typing import Any

from telar_checkpoint.errors import SerializationError

# alias -> class, for the types every JsonSerializer loads.
BUILTIN_CLASSES: dict[str, type] = {}
# class -> alias, the inverse, used when writing.
BUILTIN_NAMES: dict[type, str] = {}
# Built-in pydantic classes rebuilt with model_construct: their stored fields are
# already the validated values, and some (RemoveMessage) refuse their own fields
# in __init__.
CONSTRUCT_WITHOUT_VALIDATION: set[type] = set()


def _add_builtin(alias: str, cls: type, *, construct: bool = False) -> None:
    BUILTIN_CLASSES[alias] = cls
    BUILTIN_NAMES[cls] = alias
    if construct:
        CONSTRUCT_WITHOUT_VALIDATION.add(cls)


def _register_builtins() -> None:
    for name, obj in vars(builtins).items():
        if isinstance(obj, type) and issubclass(obj, BaseException):
            _add_builtin(name, obj)
    import asyncio
    import concurrent.futures

    # What LangGraph stores for a task cancelled when a sibling failed.
    _add_builtin("asyncio.CancelledError", asyncio.CancelledError)
    _add_builtin("asyncio.InvalidStateError", asyncio.InvalidStateError)
    _add_builtin("concurrent.futures.CancelledError", concurrent.futures.CancelledError)
    _add_builtin("concurrent.futures.InvalidStateError", concurrent.futures.InvalidStateError)

    from langchain_core import messages

    for name in (
        "AIMessage", "AIMessageChunk", "HumanMessage", "HumanMessageChunk",
        "SystemMessage", "SystemMessageChunk", "ToolMessage", "ToolMessageChunk",
        "FunctionMessage", "FunctionMessageChunk", "ChatMessage", "ChatMessageChunk",
        "RemoveMessage",
    ):  # fmt: skip
        cls = getattr(messages, name, None)
        if cls is not None:
            _add_builtin(name, cls, construct=True)

    from langchain_core import agents, documents, prompt_values

    for module, names in (
        (documents, ("Document",)),
        (prompt_values, ("StringPromptValue", "ChatPromptValue", "ChatPromptValueConcrete")),
        (agents, ("AgentAction", "AgentActionMessageLog", "AgentFinish", "AgentStep")),
    ):
        for name in names:
            cls = getattr(module, name, None)
            if cls is not None:
                _add_builtin(name, cls, construct=True)

    from langgraph.checkpoint.serde.types import _DeltaSnapshot

    _add_builtin("DeltaSnapshot", _DeltaSnapshot)

    try:  # the `langgraph` package itself is optional for a checkpointer
        from langgraph import errors as lg_errors
        from langgraph import types as lg_types
    except ImportError:  # pragma: no cover - langgraph is installed in tests
        return
    for name in ("Send", "Interrupt", "Command", "Overwrite", "TimeoutPolicy", "RetryPolicy"):
        cls = getattr(lg_types, name, None)
        if cls is not None:
            _add_builtin(name, cls)
    for name, obj in vars(lg_errors).items():
        if (
            isinstance(obj, type)
            and issubclass(obj, Exception)
            and obj.__module__ == lg_errors.__name__
        ):
            _add_builtin(name, obj)


_register_builtins()


def class_name(cls: type) -> str:
    """The name a stored value uses for `cls`: its alias, or ``module:qualname``."""
    alias = BUILTIN_NAMES.get(cls)
    return alias if alias is not None else f"{cls.__module__}:{cls.__qualname__}"


def _nested_classes(root: Any, module: str, depth: int) -> Iterable[type]:
    """Classes defined in `module`, reachable from `root` by class attributes."""
    seen: set[int] = set()
    stack = [(vars(root), depth)]
    while stack:
        namespace, left = stack.pop()
        for obj in list(namespace.values()):
            if isinstance(obj, type) and obj.__module__ == module and id(obj) not in seen:
                seen.add(id(obj))
                yield obj
                if left > 0:
                    stack.append((vars(obj), left - 1))


class Allowlist:
    """The classes one serializer may load, keyed by the name stored values use."""

    def __init__(self) -> None:
        self._by_name: dict[str, type] = dict(BUILTIN_CLASSES)
        self._pending: set[tuple[str, str]] = set()  # (module, name) not yet importable
        # stored `$model` class name -> function building that class from its
        # decoded fields, kept by the decoder once `lookup` and the kind check
        # passed for the name; emptied whenever a name is (re)bound.
        self.model_builders: dict[str, Any] = {}

    def copy(self) -> Allowlist:
        clone = Allowlist.__new__(Allowlist)
        clone._by_name = dict(self._by_name)
        clone._pending = set(self._pending)
        clone.model_builders = {}
        return clone

    def add_class(self, cls: type) -> None:
        if not isinstance(cls, type):
            raise TypeError(f"allowed_classes takes classes, not {cls!r}")
        self._by_name[f"{cls.__module__}:{cls.__qualname__}"] = cls
        self.model_builders.clear()  # clear, not rebind: decoders hold this dict

    def add_name(self, key: tuple[str, ...] | type) -> None:
        """Allow a class given by the program as ``(module, name)``, or a class."""
        if isinstance(key, type):
            self.add_class(key)
            return
        if len(key) < 2 or not all(isinstance(part, str) for part in key):
            raise TypeError(f"an allowlist entry is (module, name), not {key!r}")
        module, name = (key[0], key[1]) if len(key) == 2 else (".".join(key[:-1]), key[-1])
        if not self._resolve(module, name):
            self._pending.add((module, name))

    def _resolve(self, module: str, name: str) -> bool:
        """Register the classes `(module, name)` names, from modules already imported."""
        mod = sys.modules.get(module)
        if mod is None:
            return False
        obj: Any = mod
        for part in name.split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                break
        if isinstance(obj, type):
            self.add_class(obj)
            return True
        # LangGraph names classes by __name__, which for a nested class is not
        # a module attribute: look for it among the module's own classes.
        found = [cls for cls in _nested_classes(mod, module, 3) if cls.__name__ == name]
        for cls in found:
            self.add_class(cls)
        return bool(found)

    def lookup(self, name: Any, tag: str) -> type:
        """The class stored name `name` refers to; SerializationError if not allowed."""
        cls = self._by_name.get(name) if isinstance(name, str) else None
        if cls is None and self._pending and isinstance(name, str):
            for module, short in list(self._pending):
                if self._resolve(module, short):
                    self._pending.discard((module, short))
            cls = self._by_name.get(name)
        if cls is None:
            raise SerializationError(
                f"stored value {tag} names class {name!r}, which is not on the allowlist; "
                "if you trust it, pass it in JsonSerializer(allowed_classes=[...])"
            )
        return cls
