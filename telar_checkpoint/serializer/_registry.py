"""The classes a stored value may name, and how a name becomes a class.

A stored object names its class by a short alias for the types we ship support
for (``"AIMessage"``, ``"Send"``) or by ``"module:qualname"`` for anything else.
The allowlist holds those aliases, the classes a program names, and the
``(module, name)`` pairs LangGraph derives from a state schema (resolved from
modules already imported). Outside strict mode, a name not on it may still
resolve to a class of a module the program has already imported (`imported_class`):
by dict lookups only, so nothing is imported and no attribute hook runs.
"""

from __future__ import annotations

import builtins
import logging
import os
import sys
from collections.abc import Iterable
from typing import Any

from langchain_core.runnables import Runnable

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


def strict_by_default() -> bool:
    """Whether LangGraph's strict deserialization (``LANGGRAPH_STRICT_MSGPACK``) is on.

    Read from LangGraph's own flag, so that we are strict exactly when LangGraph
    derives the allowlist from the state schema (it does so only then)."""
    try:
        from langgraph.checkpoint.serde import _msgpack
    except ImportError:  # pragma: no cover - the flag moved: read the variable as LangGraph does
        return os.getenv("LANGGRAPH_STRICT_MSGPACK", "false").lower() in ("1", "true", "yes")
    return bool(_msgpack.STRICT_MSGPACK_ENABLED)


_logger = logging.getLogger("telar_checkpoint.serializer")
_warned: set[tuple[str, str]] = set()
_MAX_WARNED = 1000  # as LangGraph: bounds the memory if class names are generated


def warn_once(kind: str, name: str, message: str, *args: object) -> None:
    """Log `message` once per process for each (kind, class name), as LangGraph's serializer does."""
    key = (kind, name)
    if key in _warned or len(_warned) >= _MAX_WARNED:
        return
    _warned.add(key)
    _logger.warning(message, *args)


def imported_class(name: str) -> type | None:
    """The class ``"module:qualname"`` names, if its module is already imported.

    Each step is a lookup in a namespace dict (the module's, then a class's), so
    no module is imported and no ``__getattr__`` or descriptor runs. A class
    defined inside a function (``f.<locals>.C``) cannot be reached this way. The
    class found must carry exactly that name (not an alias bound to another class).
    """
    module, colon, qualname = name.partition(":")
    found: Any = sys.modules.get(module) if colon and qualname else None
    for part in qualname.split(".") if found is not None else ():
        try:
            namespace = vars(found)
        except TypeError:
            return None
        found = namespace.get(part)
        if not isinstance(found, type):
            return None
    if found is None or f"{found.__module__}:{found.__qualname__}" != name:
        return None
    return found


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

    def __init__(self, *, strict: bool) -> None:
        # strict: only listed classes are rebuilt; otherwise also `imported_class` ones.
        self.strict = strict
        self._by_name: dict[str, type] = dict(BUILTIN_CLASSES)
        self._imported: dict[str, type] = {}  # names `imported_class` resolved, not listed
        self._pending: set[tuple[str, str]] = set()  # (module, name) not yet importable
        # stored `$model` class name -> function building that class from its
        # decoded fields, kept by the decoder once the class was found and the kind check
        # passed for the name; emptied whenever a name is (re)bound.
        self.model_builders: dict[str, Any] = {}

    def copy(self) -> Allowlist:
        clone = Allowlist.__new__(Allowlist)
        clone.strict = self.strict
        clone._by_name = dict(self._by_name)
        clone._imported = dict(self._imported)
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

    def listed(self, name: str) -> type | None:
        """The class on the allowlist that stored name `name` refers to, if any."""
        cls = self._by_name.get(name)
        if cls is None and self._pending:
            for module, short in list(self._pending):
                if self._resolve(module, short):
                    self._pending.discard((module, short))
            cls = self._by_name.get(name)
        return cls

    def unlisted(self, name: str, tag: str, is_kind: Any) -> type | None:
        """The class to rebuild a stored object with whose name is not listed, or None
        for its plain data: outside strict mode, a class of the kind `is_kind` accepts
        whose module is already imported (LangChain runnables, such as chat models,
        chains and tools, excepted: they are code, not state). Each outcome is logged once per class."""
        cls = None if self.strict else self._imported.get(name) or imported_class(name)
        if cls is not None and is_kind(cls) and not issubclass(cls, Runnable):
            self._imported[name] = cls
            warn_once(
                "loaded", name,
                "Loading %s from a checkpoint although it is not on the allowlist (its module "
                "was already imported). To load it without this warning, pass the class in "
                "JsonSerializer(allowed_classes=[...]).", name,
            )  # fmt: skip
            return cls
        if self.strict:
            why = "strict deserialization is on (LANGGRAPH_STRICT_MSGPACK) and it is not on the allowlist"
        elif cls is not None:
            why = f"it is not a {tag} class that loading builds"
        elif "<locals>" in name:
            why = "it is defined inside a function, so it cannot be found by its name"
        else:
            why = "its module is not imported (loading never imports one)"
        warn_once(
            "plain", name,
            "Loading %s from a checkpoint as plain data: %s. To load it as the class, pass the "
            "class in JsonSerializer(allowed_classes=[...]).", name, why,
        )  # fmt: skip
        return None
