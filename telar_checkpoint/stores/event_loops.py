"""`PerLoop`: one resource (a client, a set of connections) for each running event loop, closed when
that loop shuts down.

Async drivers tie connections to the loop that opened them, and every `asyncio.run` is a new loop.
A resource is made on a loop's first use and closed inside that loop when it shuts down:
`asyncio.run` (and `asyncio.Runner`, pytest-asyncio, uvloop) closes the loop's async generators
after cancelling its tasks, and each resource is held by one such generator whose ``finally``
closes it. Resources must have no tasks of their own, so that cancelling a loop's tasks never waits
on them (psycopg_pool's workers swallowed that cancellation and hung the loop's shutdown, issue 17).
A loop closed without that step (``loop.close()`` by hand) leaves its resource to `abandon`, called
when another loop next asks, or on `close`.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Generic, TypeVar

Resource = TypeVar("Resource")

CLOSE_TIMEOUT = 5.0
"""Seconds a loop's shutdown waits for its resource to close before abandoning it."""


class PerLoop(Generic[Resource]):
    """The running loop's `Resource`, made by `make`, closed by `aclose` at the loop's shutdown."""

    def __init__(
        self,
        make: Callable[[], Resource],
        aclose: Callable[[Resource], Awaitable[None]],
        abandon: Callable[[Resource], None],
    ) -> None:
        """`aclose` closes a resource in its own loop; `abandon` lets go of one whose loop is
        closed (synchronously: closing what can be closed without the loop)."""
        self._make, self._aclose, self._abandon = make, aclose, abandon
        self._lock = threading.Lock()
        self._held: dict[asyncio.AbstractEventLoop, tuple[Resource, AsyncGenerator[None, None]]] = {}
        self._last: tuple[asyncio.AbstractEventLoop, Resource] | None = None  # the hot path's lookup

    def current(self) -> Resource | None:
        """The running loop's resource if it was the last one asked for (no lock, no await)."""
        last = self._last
        return last[1] if last is not None and last[0] is asyncio.get_running_loop() else None

    async def get(self) -> Resource:
        """The running loop's resource, made on first use."""
        loop = asyncio.get_running_loop()
        last = self._last
        if last is not None and last[0] is loop:
            return last[1]
        with self._lock:
            held = self._held.get(loop)
            if held is None:
                resource = self._make()
                held = self._held[loop] = (resource, self._until_shutdown(loop, resource))
                started = False
            else:
                started = True
            ended = [self._held.pop(other)[1] for other in list(self._held) if other.is_closed()]
        for watcher in ended:
            _end(watcher)
        if not started:
            await held[1].__anext__()  # runs to its yield: the loop now closes it at shutdown
        self._last = (loop, held[0])
        return held[0]

    async def _until_shutdown(self, loop: asyncio.AbstractEventLoop, resource: Resource) -> AsyncGenerator[None, None]:
        try:
            yield
        finally:
            with self._lock:
                if self._held.get(loop, (None,))[0] is resource:
                    del self._held[loop]
                if self._last is not None and self._last[1] is resource:
                    self._last = None
            if loop.is_closed():  # ended by `_end`, outside its loop
                self._abandon(resource)
            else:
                try:
                    await asyncio.wait_for(self._aclose(resource), CLOSE_TIMEOUT)
                except (Exception, asyncio.CancelledError):  # a loop's shutdown must end: let go instead
                    self._abandon(resource)

    async def aclose(self) -> None:
        """Close the running loop's resource now (the next use makes a new one), and let go of
        those of closed loops."""
        loop = asyncio.get_running_loop()
        with self._lock:
            held = self._held.get(loop)
        if held is not None:
            await held[1].aclose()  # its finally closes the resource
        self.close()

    def close(self) -> None:
        """Let go of the resources of closed loops (those of running loops close with their loop)."""
        with self._lock:
            ended = [self._held.pop(other)[1] for other in list(self._held) if other.is_closed()]
            if self._last is not None and self._last[0].is_closed():
                self._last = None
        for watcher in ended:
            _end(watcher)

    def forget(self) -> None:
        """Start afresh in a forked child, never closing what the parent holds: the child shares
        its parent's sockets, and closing one would end the parent's connection."""
        INHERITED.append(self._held)  # kept for ever: never collected, so never closed
        self._lock, self._held, self._last = threading.Lock(), {}, None  # the parent's lock may be held


def _end(watcher: AsyncGenerator[None, None]) -> None:
    """Run the ``finally`` of a closed loop's `_until_shutdown` here, without the loop (it then
    abandons its resource): left to the collector, it would ask the closed loop to run it."""
    try:
        watcher.aclose().send(None)
    except StopIteration:
        pass


INHERITED: list[object] = []
"""What forked children took over from their parents and must never close."""
