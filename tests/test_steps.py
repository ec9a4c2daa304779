"""The driver that runs an operation written once, sync or async (`telar_checkpoint.steps`)."""

from __future__ import annotations

import asyncio

import pytest

from telar_checkpoint.steps import Steps, arun, async_name, call, run


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
    got = [(yield call(target, "read", "a")), (yield call(target, "read", "b", default="!"))]
    try:
        yield call(target, "_fail")
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
        yield call(target, "_fail")

    with pytest.raises(LookupError, match="sync"):
        run(failing(Target()))
    with pytest.raises(LookupError, match="async"):
        asyncio.run(arun(failing(Target())))


@pytest.mark.parametrize(("name", "twin"), [("read", "aread"), ("_history", "_ahistory"), ("index_ready", "aindex_ready")])
def test_async_names(name: str, twin: str) -> None:
    assert async_name(name) == twin
