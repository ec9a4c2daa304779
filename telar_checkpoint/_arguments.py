"""Arguments of the public API checked against their annotations, and refused in our words.

`check` runs before a call that is not on the hot path; `explain` runs only after a hot
method failed with the error a wrong argument raises anyway (TypeError, AttributeError,
KeyError), to say which argument was wrong. Both raise `ArgumentTypeError`. The check is
shallow: the outer type of each argument (a dict for a config, a list for a sequence).
"""

from __future__ import annotations

import collections.abc as abc
import os
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

from telar_checkpoint.errors import ArgumentTypeError, UsageError

_IDS = frozenset({"thread_id", "source_thread_id", "target_thread_id"})
"""Thread ids: an int is taken as its str, as LangGraph's own savers do."""

_WORDS: dict[Any, str] = {
    str: "a str", bytes: "bytes", int: "an int", float: "a number", bool: "True or False",
    dict: "a dict", list: "a list", tuple: "a tuple", type(None): "None",
    abc.Mapping: "a dict", abc.MutableMapping: "a dict", abc.Sequence: "a list", abc.Collection: "a list",
    abc.Iterable: "a list", abc.Callable: "a function", os.PathLike: "a path",
}
_LISTS = (abc.Sequence, abc.Collection, abc.Iterable, list, tuple)
_HINTS: dict[Callable[..., Any], dict[str, Any]] = {}


def _hints(func: Callable[..., Any]) -> dict[str, Any]:
    """The resolved annotations of `func`'s parameters (one that does not resolve: Any)."""
    func = getattr(func, "__func__", func)
    found = _HINTS.get(func)
    if found is None:
        found = {}
        namespace = {**vars(typing), **getattr(func, "__globals__", {})}
        for name, annotation in getattr(func, "__annotations__", {}).items():
            if name == "return":
                continue
            try:
                found[name] = eval(annotation, namespace) if isinstance(annotation, str) else annotation
            except Exception:  # a name imported only for the type checker
                found[name] = Any
        _HINTS[func] = found
    return found


def _typeddict(annotation: Any) -> bool:
    """Whether `annotation` is a TypedDict, of `typing` or of `typing_extensions` (LangChain's)."""
    return isinstance(annotation, type) and issubclass(annotation, dict) and hasattr(annotation, "__total__")


def admits(annotation: Any, value: object) -> bool:
    """Whether `value` is of the outer type `annotation` names (shallow: a list's items are not looked at)."""
    if annotation is Any or annotation is object or isinstance(annotation, typing.TypeVar):
        return True
    if annotation is None or annotation is type(None):
        return value is None
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(admits(arg, value) for arg in typing.get_args(annotation))
    if origin is typing.Literal:
        return value in typing.get_args(annotation)
    if origin is not None:
        return admits(origin, value)
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if _typeddict(annotation):
        return isinstance(value, Mapping)
    if annotation is abc.Callable:
        return callable(value)
    if getattr(annotation, "_is_protocol", False) and not getattr(annotation, "_is_runtime_protocol", False):
        methods = [name for name in dir(annotation) if not name.startswith("_") and callable(getattr(annotation, name))]
        return all(callable(getattr(value, name, None)) for name in methods)
    if isinstance(annotation, type):
        return isinstance(value, annotation)
    return True  # a form we do not check


def words(annotation: Any) -> str:
    """`annotation` said to a person: "a str or None", "a config dict ..."."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(dict.fromkeys(words(arg) for arg in typing.get_args(annotation)))
    if origin is typing.Literal:
        return " or ".join(repr(arg) for arg in typing.get_args(annotation))
    if origin is not None:
        return words(origin)
    if getattr(annotation, "__name__", "") == "RunnableConfig":
        return 'a config dict, such as {"configurable": {"thread_id": "..."}}'
    if _typeddict(annotation):
        return f"a dict (a {annotation.__name__})"
    if annotation in _WORDS:
        return _WORDS[annotation]
    name = getattr(annotation, "__name__", str(annotation))
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def _one_string(annotation: Any, value: object) -> bool:
    """Whether `value` is one str where the annotation asks for a list (of ids, say) and no str."""
    if not isinstance(value, str):
        return False
    args = typing.get_args(annotation) if typing.get_origin(annotation) in (typing.Union, types.UnionType) else (annotation,)
    return not any(arg is str for arg in args) and any(typing.get_origin(arg) in _LISTS for arg in args)


def _refusal(where: str, name: str, annotation: Any, value: object) -> ArgumentTypeError | None:
    if _one_string(annotation, value):
        return ArgumentTypeError(f"{where}: {name} must be a list of str, not one string (put it in a list)")
    if admits(annotation, value) or (name in _IDS and isinstance(value, int) and not isinstance(value, bool)):
        return None
    return ArgumentTypeError(f"{where}: {name} must be {words(annotation)}, not {type(value).__name__}")


def check(func: Callable[..., Any], values: Mapping[str, object], where: str | None = None) -> None:
    """Refuse the first of `values` (parameter name: argument) that the annotation of that
    parameter of `func` does not admit; `where` names the call in the message."""
    hints = _hints(func)
    where = where or _name(func)
    for name, value in values.items():
        if name in hints and (refused := _refusal(where, name, hints[name], value)) is not None:
            raise refused
        if name in ("config", "before") and isinstance(value, Mapping):
            check_config(where, name, value, required=False)


def check_config(where: str, name: str, config: Mapping[str, Any], *, required: bool = True) -> None:
    """Refuse a config whose ``configurable`` is not a dict, or (when `required`) lacks a thread id."""
    configurable = config.get("configurable")
    if configurable is not None and not isinstance(configurable, Mapping):
        raise ArgumentTypeError(
            f'{where}: {name}["configurable"] must be a dict, such as {{"thread_id": "..."}}, not {type(configurable).__name__}'
        )
    if required and "thread_id" not in (configurable or {}):
        raise UsageError(
            f'{where}: {name} has no "thread_id" in "configurable"; pass a config such as '
            '{"configurable": {"thread_id": "..."}} (as graph.invoke(input, config) takes)'
        )


def explain(func: Callable[..., Any], values: Mapping[str, object]) -> None:
    """After `func` failed: raise `ArgumentTypeError` for the argument that was wrong, if one was
    (the caller then re-raises the original error, which the refusal otherwise carries as its context)."""
    check(func, values)


def _name(func: Callable[..., Any]) -> str:
    qualname = getattr(func, "__qualname__", getattr(func, "__name__", "call"))
    return qualname.replace(".__init__", "")
