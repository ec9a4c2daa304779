"""Operations written once, as generators of calls, and run sync or async by a small driver.

An operation that needs a store (or the saver's own methods that wait) yields `Call`s and is
sent back each call's result. A call names both methods it may make, the sync one and its async
twin (`call(store.read, store.aread, key)`), so a reader, a type checker and "go to definition"
follow either; `run` makes the sync calls, `arun` awaits the async ones. So the logic of an
operation is written once and only the waiting differs, as in `h11` or any sans-IO protocol
library.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterator
from typing import Any, NamedTuple, ParamSpec, TypeVar

R = TypeVar("R")
P = ParamSpec("P")


class Call(NamedTuple):
    """One call an operation asks for: `sync(*args, **kwargs)`, or `await async_(*args, **kwargs)`."""

    sync: Callable[..., Any]
    async_: Callable[..., Awaitable[Any]]
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = {}  # never changed: a default shared by every call is safe


def call(sync: Callable[P, R], async_: Callable[P, Awaitable[R]], *args: P.args, **kwargs: P.kwargs) -> Call:
    """The call of `sync` (run sync) or `async_` (run async), with the same arguments."""
    return _new_tuple(Call, (sync, async_, args, kwargs))  # `Call(...)` less its `__new__` (every write makes one)


_new_tuple = tuple.__new__


class Emit(NamedTuple):
    """A value a streaming operation gives out as it goes (see `stream`)."""

    value: Any


Steps = Generator[Call, Any, R]
Stream = Generator["Call | Emit", Any, None]


def run(steps: Steps[R]) -> R:
    """Run an operation, making each call it asks for; its result. A call's error is raised
    inside the operation, where it may handle it. (`stream` for an operation that emits nothing,
    driven directly: every write runs one, and one generator less costs a third of the driver.)"""
    reply: Any = None
    error: BaseException | None = None
    try:
        while True:
            try:
                step = steps.throw(error) if error is not None else steps.send(reply)
            except StopIteration as stop:
                result: R = stop.value
                return result
            if isinstance(step, Emit):  # what it emits goes unread
                reply, error = None, None
                continue
            try:  # (`_made`, inline: every write runs this loop)
                reply, error = step.sync(*step.args, **step.kwargs), None
            except BaseException as exc:
                reply, error = None, exc
    finally:
        steps.close()


def _made(step: Call) -> tuple[Any, BaseException | None]:
    """The result of the sync call `step`, or the error it raised."""
    try:
        return step.sync(*step.args, **step.kwargs), None
    except BaseException as exc:
        return None, exc


async def arun(steps: Steps[R]) -> R:
    """`run`, awaiting the async twin of each call."""
    done: list[R] = []
    async for _ in astream(_returning(steps, done)):
        pass
    return done[0]


def _returning(steps: Steps[R], done: list[R]) -> Stream:
    """`steps` as a stream that emits nothing, its result put in `done`."""
    done.append((yield from steps))


def stream(steps: Stream) -> Iterator[Any]:
    """Run a streaming operation, making each call it asks for; the values it emits, as they
    come (the operation stops where its reader stops)."""
    reply: Any = None
    error: BaseException | None = None
    try:
        while True:
            try:
                step = steps.throw(error) if error is not None else steps.send(reply)
            except StopIteration:
                return
            if isinstance(step, Emit):
                reply, error = None, None
                yield step.value
                continue
            reply, error = _made(step)
    finally:
        steps.close()


async def astream(steps: Stream) -> AsyncIterator[Any]:
    """`stream`, awaiting the async twin of each call."""
    reply: Any = None
    error: BaseException | None = None
    try:
        while True:
            try:
                step = steps.throw(error) if error is not None else steps.send(reply)
            except StopIteration:
                return
            if isinstance(step, Emit):
                reply, error = None, None
                yield step.value
                continue
            try:
                reply, error = await step.async_(*step.args, **step.kwargs), None
            except BaseException as exc:
                reply, error = None, exc
    finally:
        steps.close()
