"""Every parameter of the public API, given a value of a type its annotation does not admit, is refused
in our words: an `ArgumentTypeError` (a `TelarError` and a `TypeError`) naming the parameter (issue
"The first hour of a new user", "Every mistake in our words"). The parameters not checked are
listed in `EXEMPT`, each with its reason."""

from __future__ import annotations

import asyncio
import collections.abc as abc
import inspect
import types
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint

import telar_checkpoint
from telar_checkpoint import ArgumentTypeError, FileStore, MemoryStore, TelarError, TelarSaver
from telar_checkpoint.migration import export_thread, import_thread, migrate, open_source, reencode
from telar_checkpoint.stores.postgres import PostgresStore
from telar_checkpoint.stores.redis import RedisStore
from telar_checkpoint.stores.sqlite import SQLiteStore

WRONG = (object(), b"x", 5, 1.5, [])  # the first one an annotation does not admit is passed

HOT = "on the hot path (every step); its callers are the saver and LangGraph, which pass the right types"
EXEMPT: dict[str, str] = {
    # The store interface (every method of a store, not its constructor): driven by the saver on
    # every read and write, with the keys it made str.
    "Store.*": HOT,
    # The pure format, called by the saver for every put and read (the saver checks what it is given).
    "CheckpointCodec": HOT,
    "CheckpointRecord": HOT + " (made for every put)",
    "WriteRecord": HOT + " (made for every pending write)",
    "JsonSerializer.dumps_typed": "takes any value (its refusal is a SerializationError, by value not type)",
    "JsonSerializer.loads_typed": HOT + " (every stored value read)",
    "JsonSerializer.to_jsonable": "takes any value",
    "JsonSerializer.from_jsonable": "takes any JSON value",
    # LangGraph's own signatures, answered by LangGraph's base class.
    "TelarSaver.get": "LangGraph's BaseCheckpointSaver.get: calls get_tuple, which checks config",
    "TelarSaver.aget": "LangGraph's BaseCheckpointSaver.aget: calls aget_tuple, which checks config",
    "TelarSaver.config_specs": "a property of LangGraph's",
    "TelarSaver.get_next_version.channel": "LangGraph's signature: unused, and None whatever LangGraph passes",
    "TelarSaver.with_allowlist": "checked, but LangGraph calls it on a compiled graph: see test_with_allowlist",
    "TelarSaver.from_conn_string.options": "any option of the saver or the store, checked by them",
    "PostgresStore.connect_kwargs": "go to psycopg.connect, which checks them",
    "RedisStore.client_options": "go to redis-py's client, which checks them",
}

_LISTS = (abc.Sequence, abc.Collection, abc.Iterable)


def admits(annotation: Any, value: object) -> bool:
    """The test's own shallow reading of an annotation (independent of the library's)."""
    if annotation in (Any, object) or isinstance(annotation, typing.TypeVar):
        return True
    if annotation in (None, type(None)):
        return value is None
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(admits(a, value) for a in typing.get_args(annotation))
    if origin is typing.Literal:
        return value in typing.get_args(annotation)
    if origin is not None:
        return admits(origin, value)
    if annotation is float:
        return type(value) in (int, float)
    if annotation is int:
        return type(value) is int
    if isinstance(annotation, type) and issubclass(annotation, dict):  # TypedDicts too
        return isinstance(value, dict)
    if annotation is abc.Callable:
        return callable(value)
    if getattr(annotation, "_is_protocol", False):
        return all(hasattr(value, n) for n in dir(annotation) if not n.startswith("_"))
    return isinstance(value, annotation) if isinstance(annotation, type) else True


def hints(func: Callable[..., Any]) -> dict[str, Any]:
    func = inspect.unwrap(getattr(func, "__func__", func))
    namespace = {**vars(typing), **func.__globals__}
    return {
        name: eval(a, namespace) if isinstance(a, str) else a  # noqa: S307 - our own annotations
        for name, a in func.__annotations__.items() if name != "return"
    }


def public_callables() -> Iterator[tuple[str, Callable[..., Any]]]:
    """Every public callable: the functions of `telar_checkpoint.__all__` and of the migration
    package, the classes' constructors and their public methods (the stores' too)."""
    names = {name: getattr(telar_checkpoint, name) for name in telar_checkpoint.__all__}
    names.update(SQLiteStore=SQLiteStore, PostgresStore=PostgresStore, RedisStore=RedisStore)
    for func in (export_thread, import_thread, migrate, open_source, reencode):
        names[func.__name__] = func
    for name, obj in sorted(names.items()):
        if isinstance(obj, type) and issubclass(obj, BaseException):
            continue  # our errors: made by us, with a message
        if isinstance(obj, type):
            if obj.__init__ is not object.__init__:
                yield name, obj
            extra = ("get", "aget") if obj is TelarSaver else ()
            for attr in sorted({*vars(obj), *extra}):
                if not attr.startswith("_") and callable(inspect.getattr_static(obj, attr)):
                    yield f"{name}.{attr}", getattr(obj, attr)
        elif callable(obj):
            yield name, obj


def exemption(qualified: str, parameter: str) -> str | None:
    owner = qualified.split(".")[0]
    for key in (f"{qualified}.{parameter}", qualified, owner):
        if key in EXEMPT:
            return EXEMPT[key]
    if "." in qualified and owner.endswith("Store"):
        return EXEMPT["Store.*"]
    return None


def cases() -> Iterator[Any]:
    for qualified, func in public_callables():
        target = func.__init__ if isinstance(func, type) else func
        annotations = hints(target)
        for parameter in inspect.signature(func).parameters.values():
            if parameter.name in ("self", "cls") or parameter.kind is parameter.VAR_POSITIONAL:
                continue
            if exemption(qualified, parameter.name) or parameter.kind is parameter.VAR_KEYWORD:
                continue
            annotation = annotations.get(parameter.name, Any)
            wrong = next((v for v in WRONG if not admits(annotation, v)), None)
            if wrong is None:
                continue  # Any, object: no wrong type
            yield pytest.param(qualified, func, parameter.name, wrong, id=f"{qualified}-{parameter.name}")


def _valid(tmp_path: Path) -> dict[str, Any]:
    """A valid argument for each parameter name (the one under test is then replaced)."""
    store = MemoryStore()
    saver = TelarSaver(store)
    config = saver.put({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, empty_checkpoint(), {"source": "input", "step": -1}, {})
    return {
        "store": store, "saver": saver, "target": saver, "source": TelarSaver(MemoryStore()), "config": config,
        "checkpoint": empty_checkpoint(), "metadata": {"source": "loop", "step": 0}, "new_versions": {},
        "writes": [("c", 1)], "task_id": "task", "task_path": "", "thread_id": "t", "source_thread_id": "t",
        "target_thread_id": "u", "thread_ids": ["t"], "run_ids": ["r"], "channels": ["c"], "change": lambda old: old,
        "text": "x\n", "filter": None, "before": None, "limit": None, "current": 1, "strategy": "keep_latest",
        "extra_allowlist": [], "url": "memory://", "directory": tmp_path / "dir", "path": tmp_path / "x.db",
        "conninfo": "postgresql://127.0.0.1:5432/test", "serde": None, "dry_run": True, "progress": None,
        "backup": None, "raw": False, "replace": False, "channel": None, "minutes": 60,
    }


def _call(owner: Any, func: Callable[..., Any], arguments: dict[str, Any]) -> Any:
    result = func(**arguments) if owner is None else func(owner, **arguments)
    if inspect.iscoroutine(result):
        return asyncio.run(result)
    if inspect.isasyncgen(result):
        async def drain() -> list[Any]:
            return [item async for item in result]
        return asyncio.run(drain())
    if hasattr(result, "__enter__"):
        with result:
            return None
    if isinstance(result, Iterator):
        return list(result)
    return result


@pytest.mark.parametrize("qualified, func, parameter, wrong", list(cases()))
def test_a_wrong_type_is_refused_in_our_words(tmp_path, qualified, func, parameter, wrong) -> None:
    valid = _valid(tmp_path)
    signature = inspect.signature(func)
    arguments = {}
    for p in signature.parameters.values():
        if p.name in ("self", "cls") or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.name == parameter:
            arguments[p.name] = wrong
        elif p.default is p.empty:
            arguments[p.name] = valid[p.name]
    owner = None
    if "." in qualified:  # a method: called on an instance, unless a classmethod (bound already)
        cls_name, attr = qualified.split(".")
        if inspect.isfunction(inspect.getattr_static(getattr(telar_checkpoint, cls_name), attr)):
            owner = {"TelarSaver": valid["saver"], "JsonSerializer": telar_checkpoint.JsonSerializer()}[cls_name]
    with pytest.raises(ArgumentTypeError) as raised:
        _call(owner, func, arguments)
    assert isinstance(raised.value, TelarError) and isinstance(raised.value, TypeError)
    assert parameter in str(raised.value), str(raised.value)


def test_the_walk_covers_the_saver_stores_and_migration() -> None:
    walked = {c.values[0] for c in cases()}
    for name in ("TelarSaver", "TelarSaver.put", "TelarSaver.aput_writes", "TelarSaver.list", "FileStore",
                 "SQLiteStore", "PostgresStore", "RedisStore", "JsonSerializer", "migrate", "repair", "export_thread"):
        assert name in walked, name
    assert len(EXEMPT) < 50


def test_with_allowlist(tmp_path) -> None:
    with pytest.raises(ArgumentTypeError, match="extra_allowlist"):
        TelarSaver(MemoryStore()).with_allowlist(5)  # type: ignore[arg-type]


def test_one_string_for_a_list_of_ids_is_refused() -> None:
    saver = TelarSaver(MemoryStore())
    with pytest.raises(ArgumentTypeError, match="thread_ids must be a list of str, not one string"):
        saver.prune("t")
    with pytest.raises(ArgumentTypeError, match="run_ids"):
        saver.delete_for_runs("run-1")


def test_a_store_given_a_wrong_type_creates_nothing(tmp_path) -> None:
    with pytest.raises(ArgumentTypeError, match="FileStore: mode must be an int, not str"):
        FileStore(tmp_path / "d", mode="0600")  # type: ignore[arg-type]
    assert not (tmp_path / "d").exists()
