"""The driver that runs an operation written once, sync or async (`telar_checkpoint.steps`)."""

from __future__ import annotations

import asyncio

import pytest

from telar_checkpoint.steps import Emit, Steps, Stream, arun, astream, call, run, stream


class Target:
    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple, dict]] = []

    def read(self, key: str, *, default: str = "") -> str:
        self.calls.append(("read", (key,), {"default": default}))
        return f"sync {key}{default}"

    async def aread(self, key: str, *, default: str = "") -> str:
        self.calls.append(("aread", (key,), {"default": default}))
        return f"async {key}{default}"

    def _fail(self) -> None:
        raise LookupError("sync")

    async def _afail(self) -> None:
        raise LookupError("async")


def operation(target: Target) -> Steps[list[str]]:
    got = [(yield call(target.read, target.aread, "a")), (yield call(target.read, target.aread, "b", default="!"))]
    try:
        yield call(target._fail, target._afail)
    except LookupError as exc:  # a call's error is raised inside the operation
        got.append(f"caught {exc}")
    return got


def test_run_makes_the_calls_and_returns_the_result() -> None:
    target = Target()
    assert run(operation(target)) == ["sync a", "sync b!", "caught sync"]
    assert target.calls == [("read", ("a",), {"default": ""}), ("read", ("b",), {"default": "!"})]


def test_arun_awaits_the_async_twins() -> None:
    target = Target()
    assert asyncio.run(arun(operation(target))) == ["async a", "async b!", "caught async"]
    assert [name for name, _args, _kwargs in target.calls] == ["aread", "aread"]


def test_an_error_the_operation_does_not_handle_reaches_the_caller() -> None:
    def failing(target: Target) -> Steps[None]:
        yield call(target._fail, target._afail)

    with pytest.raises(LookupError, match="sync"):
        run(failing(Target()))
    with pytest.raises(LookupError, match="async"):
        asyncio.run(arun(failing(Target())))


def counting(target: Target, log: list[str]) -> Stream:
    """Emits the reads of keys a, b, c as it makes them, and notes when it stops."""
    try:
        for key in "abc":
            yield Emit((yield call(target.read, target.aread, key)))
    finally:
        log.append("stopped")


def test_stream_emits_as_it_goes_and_stops_where_its_reader_stops() -> None:
    target, log = Target(), []
    values = stream(counting(target, log))
    assert next(values) == "sync a" and len(target.calls) == 1, "nothing is read before it is asked for"
    values.close()
    assert log == ["stopped"] and len(target.calls) == 1
    assert list(stream(counting(Target(), []))) == ["sync a", "sync b", "sync c"]


def test_astream_awaits_the_async_twins() -> None:
    async def first_two() -> list[str]:
        got = []
        async for value in astream(counting(Target(), [])):
            got.append(value)
            if len(got) == 2:
                break
        return got

    assert asyncio.run(first_two()) == ["async a", "async b"]


def test_a_stream_raises_the_errors_it_does_not_handle() -> None:
    def failing(target: Target) -> Stream:
        yield Emit(1)
        yield call(target._fail, target._afail)

    values = stream(failing(Target()))
    assert next(values) == 1
    with pytest.raises(LookupError, match="sync"):
        next(values)
