"""A real headless Chromium for the UI tests, and a real server for them to drive (a helper module, not tests).

tests/conftest.py imports the fixtures (once: a session fixture imported into two test modules
would be two fixtures, two Playwright instances in one process); a UI test module serves its app
with `serve_asgi`::

    from tests.browser import serve_asgi

    def test_something(page):  # noqa: F811 (the parameter is the imported fixture)
        with serve_asgi(app) as base_url:
            page.goto(base_url + "/")

`browser` is one Chromium per test process (session scope: per pytest-xdist worker), driven by
Playwright's sync API; `page` is a page in a new context of it for each test (viewport `VIEWPORT`),
closed after the test. Chromium is Debian's package (``apt-get install chromium``: /usr/bin/chromium,
or the path in ``TELAR_CHROMIUM``); no browser is downloaded (``playwright install`` cannot work on
this network). When Chromium or the playwright package is missing, the tests that use them skip, or
fail when ``CI=true``, saying what is missing and how to install it (as tests/stores.py does for the
servers).

Every wait is bounded: Chromium's launch (`LAUNCH_TIMEOUT_MS`), each Playwright action and navigation
(`ACTION_TIMEOUT_MS`), and the server's start and stop (`serve_asgi`'s arguments).
"""

from __future__ import annotations

import asyncio
import http.client
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import pytest

from tests.servers import unavailable

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

CHROMIUM = os.environ.get("TELAR_CHROMIUM", "/usr/bin/chromium")
# --no-sandbox: Chromium refuses to start as root with its sandbox (the tests run as root here). The
# --disable-* and --no-first-run flags stop Chromium's own connections to its services (updates,
# sync, QUIC probes), which this machine's closed network refuses.
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VIEWPORT = {"width": 1280, "height": 900}
LAUNCH_TIMEOUT_MS = 60_000  # Chromium starts in about a second; a loaded machine can take many times that
ACTION_TIMEOUT_MS = 30_000  # each click, wait, goto...: Playwright's own default, set here so it is seen


def chromium_problem(executable: str = CHROMIUM) -> str | None:
    """Why Chromium cannot be started from `executable`, or None when it can."""
    if os.path.isfile(executable) and os.access(executable, os.X_OK):
        return None
    where = "TELAR_CHROMIUM" if os.environ.get("TELAR_CHROMIUM") == executable else "the default path"
    return f"Chromium not found at {executable} ({where}; apt-get install chromium, or set TELAR_CHROMIUM to its path)"


def browser_problem(executable: str = CHROMIUM) -> str | None:
    """Why the tests cannot drive Chromium at `executable`, or None when they can."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[test]')"
    return chromium_problem(executable)


class _PlaywrightLoop:
    """Marks Playwright's event loop as this thread's running loop only while the browser is driven.

    Playwright's sync API keeps its asyncio loop marked as the thread's running loop between its
    calls (it sets it back after each one). Left so for the rest of the session, that would break
    every later test of this worker that runs an event loop: asyncio.run() and pytest-asyncio refuse
    to start one while another is running. So `browser` clears the mark once Chromium is up, and
    this plugin (registered by `browser` for the session) sets it only around what may call
    Playwright: the body of a test that uses `browser` (`page` uses it), and the setup and the
    teardown of each fixture that depends on `browser`, however indirectly (`page`, or a test's
    fixture that takes `page`). The other fixtures of such a test, and the other tests, run without
    it: they may run event loops of their own; a test body that drives the browser cannot (as with
    any use of Playwright's sync API). While the mark is cleared nothing runs on Playwright's loop:
    each sync call runs it, and returns once the loop is waiting again.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.drivers = {"browser"}  # the fixtures that depend on `browser`, as they are set up

    def attach(self) -> None:
        asyncio._set_running_loop(self.loop)  # what Playwright's sync API itself calls after each call

    @staticmethod
    def detach() -> None:
        asyncio._set_running_loop(None)

    @pytest.hookimpl(wrapper=True)
    def pytest_fixture_setup(self, fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest) -> Iterator[Any]:
        if fixturedef.argname == "browser" or not self.drivers.intersection(fixturedef.argnames):
            return (yield)
        self.drivers.add(fixturedef.argname)
        # A fixture's finalizers run last added first: these two enclose its own teardown (added
        # while it is set up), so its teardown runs with the mark set, and clears it after.
        fixturedef.addfinalizer(self.detach)
        self.attach()
        try:
            return (yield)
        finally:
            self.detach()
            fixturedef.addfinalizer(self.attach)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Iterator[None]:
        if "browser" not in getattr(item, "fixturenames", ()):
            return (yield)
        self.attach()
        try:
            return (yield)
        finally:
            self.detach()


@pytest.fixture(scope="session")
def browser(request: pytest.FixtureRequest) -> Iterator[Browser]:
    """Headless Chromium (`CHROMIUM`, with `CHROMIUM_FLAGS`), one per test process, closed at its end."""
    problem = browser_problem()
    if problem:
        unavailable(problem, "Chromium")
    from playwright.sync_api import sync_playwright

    playwright = sync_playwright().start()
    try:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS, headless=True, timeout=LAUNCH_TIMEOUT_MS)
    except BaseException:
        playwright.stop()
        _PlaywrightLoop.detach()
        raise
    running = asyncio._get_running_loop()
    assert running is not None, "Playwright's sync API left no running loop: see _PlaywrightLoop"
    loop = _PlaywrightLoop(running)
    loop.detach()
    request.config.pluginmanager.register(loop, f"telar-playwright-loop-{id(loop)}")
    try:
        yield chromium
    finally:
        request.config.pluginmanager.unregister(loop)
        loop.attach()
        try:
            chromium.close()
        finally:
            playwright.stop()
            loop.detach()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A page of a new browser context (viewport `VIEWPORT`), for one test; the context is closed after it."""
    context = browser.new_context(viewport=VIEWPORT)
    try:
        context.set_default_timeout(ACTION_TIMEOUT_MS)
        context.set_default_navigation_timeout(ACTION_TIMEOUT_MS)
        yield context.new_page()
    finally:
        context.close()


def _answers(host: str, port: int, timeout: float) -> bool:
    """Whether an HTTP server at host:port answers a GET / (its status line, whatever the status)."""
    connection = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        connection.request("GET", "/")
        connection.getresponse()  # not its body: a page that streams would keep it open
        return True
    except (OSError, http.client.HTTPException):
        return False
    finally:
        connection.close()


@contextmanager
def serve_asgi(app: Callable[..., Any], *, start_timeout: float = 30.0, stop_timeout: float = 10.0) -> Iterator[str]:
    """Serve the ASGI `app` with a real uvicorn server on 127.0.0.1, in a background thread; yield its base URL.

    The port is a free one: the socket is bound (port 0) here and handed to uvicorn, so no other
    process can take it in between. Returns once the server answers a GET / (any status: the app
    sees that request), or raises RuntimeError when it has not within `start_timeout` seconds or
    stopped before. On exit the server is asked to stop, then forced (open connections closed: a
    browser keeps some open) after `stop_timeout` seconds; one still running `stop_timeout` seconds
    after that is an error (unless the with-block raised: then that error is the one raised, and a
    server that would not stop is left to its daemon thread).
    """
    import uvicorn

    host = "127.0.0.1"
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    port = sock.getsockname()[1]
    # loop="asyncio": "auto" would pick uvloop where it is installed, and older uvicorn sets it as the
    # process's event loop policy. log_config=None: leave the process's logging as pytest set it up.
    config = uvicorn.Config(app, host=host, port=port, loop="asyncio", log_level="warning", access_log=False, log_config=None)
    server = uvicorn.Server(config)
    failure: list[BaseException] = []

    def run() -> None:
        try:
            server.run(sockets=[sock])
        except BaseException as error:  # reported by the waits below
            failure.append(error)

    thread = threading.Thread(target=run, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + start_timeout
        while not (server.started and _answers(host, port, timeout=5.0)):
            if not thread.is_alive():
                cause = failure[0] if failure else None
                raise RuntimeError(f"uvicorn on {host}:{port} stopped before it served the app (see its captured log)") from cause
            if time.monotonic() > deadline:
                raise RuntimeError(f"uvicorn on {host}:{port} did not answer within {start_timeout} s")
            time.sleep(0.05)
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(stop_timeout)
        if thread.is_alive():
            server.force_exit = True
            thread.join(stop_timeout)
        sock.close()
    # Reached only when the with-block did not raise: its error is not hidden behind this one.
    if thread.is_alive():
        raise RuntimeError(f"uvicorn on {host}:{port} did not stop within {2 * stop_timeout} s")
