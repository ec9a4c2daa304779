"""Operations written once, as generators of calls, and run sync or async by a small driver.

An operation that needs a store (or the saver's own methods that wait) yields `Call`s and is
sent back each call's result; `run` makes the calls as they are, `arun` awaits their async
twins, named by the project's rule (``read`` → ``aread``, ``_history`` → ``_ahistory``). So
the logic of an operation is written once and only the waiting differs, as in `h11` or any
sans-IO protocol library.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, NamedTuple, TypeVar

R = TypeVar("R")


class Call(NamedTuple):
    """One call an operation asks for: `target.name(*args, **kwargs)`."""

    target: Any
    name: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = {}  # never changed: a default shared by every call is safe


def call(target: Any, name: str, *args: Any, **kwargs: Any) -> Call:
    return Call(target, name, args, kwargs)


Steps = Generator[Call, Any, R]


def async_name(name: str) -> str:
    """The async twin of a method: ``read`` → ``aread``, ``_history`` → ``_ahistory``."""
    return f"_a{name[1:]}" if name.startswith("_") else f"a{name}"


def _advance(steps: Steps[R], reply: Any, error: BaseException | None) -> tuple[bool, Any]:
    """Resume the operation with a call's result (or error): (True, its result) when it is
    done, else (False, the next call)."""
    try:
        return False, steps.throw(error) if error is not None else steps.send(reply)
    except StopIteration as stop:
        return True, stop.value


def run(steps: Steps[R]) -> R:
    """Run an operation, making each call it asks for; its result. A call's error is raised
    inside the operation, where it may handle it."""
    reply, error = None, None
    while True:
        done, step = _advance(steps, reply, error)
        if done:
            return step  # type: ignore[no-any-return]
        reply, error = None, None
        try:
            reply = getattr(step.target, step.name)(*step.args, **step.kwargs)
        except BaseException as exc:
            error = exc


async def arun(steps: Steps[R]) -> R:
    """`run`, awaiting the async twin of each call."""
    reply, error = None, None
    while True:
        done, step = _advance(steps, reply, error)
        if done:
            return step  # type: ignore[no-any-return]
        reply, error = None, None
        try:
            reply = await getattr(step.target, async_name(step.name))(*step.args, **step.kwargs)
        except BaseException as exc:
            error = exc
