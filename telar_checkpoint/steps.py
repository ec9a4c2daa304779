"""Operations written once, as generators of calls, and run sync or async by a small driver.

An operation that needs a store (or the saver's own methods that wait) yields `Call`s and is
sent back each call's result. A call names both methods it may make, the sync one and its async
twin (`call(store.read, store.aread, key)`), so a reader, a type checker and "go to definition"
follow either; `run` makes the sync calls, `arun` awaits the async ones. So the logic of an
operation is written once and only the waiting differs, as in `h11` or any sans-IO protocol
library.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Generator, Iterator
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
    return Call(sync, async_, args, kwargs)


class Emit(NamedTuple):
    """A value a streaming operation gives out as it goes (see `stream`)."""

    value: Any


Steps = Generator[Call, Any, R]
Stream = Generator["Call | Emit", Any, None]


def run(steps: Steps[R]) -> R:
    """Run an operation, making each call it asks for; its result. A call's error is raised
    inside the operation, where it may handle it."""
    return _complete(_result(steps, _call))  # type: ignore[no-any-return]


async def arun(steps: Steps[R]) -> R:
    """`run`, awaiting the async twin of each call."""
    return await _result(steps, _acall)  # type: ignore[no-any-return]


def stream(steps: Stream) -> Iterator[Any]:
    """Run a streaming operation, making each call it asks for; the values it emits, as they
    come (the operation stops where its reader stops)."""
    values = _emitted(steps, _call)
    try:
        while True:
            try:
                value = _complete(values.__anext__())
            except StopAsyncIteration:
                return
            yield value
    finally:
        _complete(values.aclose())


def astream(steps: Stream) -> AsyncIterator[Any]:
    """`stream`, awaiting the async twin of each call."""
    return _emitted(steps, _acall)


# --- the one driver: an async loop, which `run` and `stream` complete without an event loop,
# as their calls never suspend it --------------------------------------------------------------


async def _call(step: Call) -> Any:
    return step.sync(*step.args, **step.kwargs)


async def _acall(step: Call) -> Any:
    return await step.async_(*step.args, **step.kwargs)


async def _result(steps: Generator[Any, Any, Any], invoke: Callable[[Call], Awaitable[Any]]) -> Any:
    """Run `steps`, each call through `invoke`; their result."""
    reply, error = None, None
    while True:
        done, step = _advance(steps, reply, error)
        if done:
            return step
        reply, error = await _invoke(invoke, step)


async def _emitted(steps: Generator[Any, Any, Any], invoke: Callable[[Call], Awaitable[Any]]) -> AsyncGenerator[Any, None]:
    """Run `steps`, each call through `invoke`; what they emit."""
    reply, error = None, None
    while True:
        done, step = _advance(steps, reply, error)
        if done:
            return
        if isinstance(step, Emit):
            reply, error = None, None
            yield step.value
        else:
            reply, error = await _invoke(invoke, step)


async def _invoke(invoke: Callable[[Call], Awaitable[Any]], step: Call) -> tuple[Any, BaseException | None]:
    """A call's (result, None), or (None, its error) to raise inside the operation."""
    try:
        return await invoke(step), None
    except BaseException as exc:
        return None, exc


def _advance(steps: Generator[Any, Any, Any], reply: Any, error: BaseException | None) -> tuple[bool, Any]:
    """Resume the operation with a call's result (or error): (True, its result) when it is
    done, else (False, its next step)."""
    try:
        return False, steps.throw(error) if error is not None else steps.send(reply)
    except StopIteration as stop:
        return True, stop.value


_SUSPENDED = "an operation run without an event loop awaited something that suspends"


def _complete(awaitable: Any) -> Any:
    """Run a coroutine (or one step of an async generator) that never suspends to its end:
    its result (the value the step yielded)."""
    try:
        awaitable.send(None)
    except StopIteration as stop:
        return stop.value
    awaitable.close()
    raise RuntimeError(_SUSPENDED)
