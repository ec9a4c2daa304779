"""tests/browser.py works: a tiny Starlette app served by `serve_asgi`, driven in a real Chromium by `page`.

The page's button changes a text through a script file the same app serves, so the text changes
only when the page, its script and the click all went through the browser and the server.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from tests.browser import VIEWPORT, chromium_problem, serve_asgi  # (its fixtures, browser and page, are in conftest.py)

HTML = """<!doctype html>
<html><head><title>fixture check</title><script src="/static/app.js" defer></script></head>
<body><button id="go" type="button">Count</button> <p id="out">not clicked</p></body></html>
"""
SCRIPT = """document.getElementById("go").addEventListener("click", () => {
  const out = document.getElementById("out");
  out.dataset.clicks = String(Number(out.dataset.clicks || 0) + 1);
  out.textContent = "clicked " + out.dataset.clicks + " times";
});
"""


def tiny_app(requests: list[str]) -> Starlette:
    async def index(request: Request) -> HTMLResponse:
        requests.append(request.url.path)
        return HTMLResponse(HTML)

    async def script(request: Request) -> Response:
        requests.append(request.url.path)
        return Response(SCRIPT, media_type="text/javascript")

    return Starlette(routes=[Route("/", index), Route("/static/app.js", script)])


def png_size(data: bytes) -> tuple[int, int]:
    """The width and height of a PNG, from its IHDR chunk (the first, right after the signature)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", data[:8]
    assert data[12:16] == b"IHDR", data[12:16]
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_a_page_served_by_uvicorn_runs_its_script_on_a_click_and_is_screenshotted(page, tmp_path: Path) -> None:
    requests: list[str] = []
    with serve_asgi(tiny_app(requests)) as base_url:
        assert base_url.startswith("http://127.0.0.1:")
        response = page.goto(base_url + "/")
        assert response is not None and response.status == 200
        assert page.title() == "fixture check"
        assert page.text_content("#out") == "not clicked"

        button = page.get_by_role("button", name="Count")
        button.click()
        button.click()
        page.wait_for_function("document.getElementById('out').dataset.clicks === '2'", timeout=10_000)
        assert page.text_content("#out") == "clicked 2 times"
        assert page.viewport_size == VIEWPORT
        assert page.evaluate("[window.innerWidth, window.innerHeight]") == [VIEWPORT["width"], VIEWPORT["height"]]

        shot = tmp_path / "page.png"
        page.screenshot(path=str(shot))
    assert png_size(shot.read_bytes()) == (VIEWPORT["width"], VIEWPORT["height"])
    # serve_asgi's probe (GET /), then the page and its script, each served by this app.
    assert requests == ["/", "/", "/static/app.js"], requests
    host, port = base_url.removeprefix("http://").split(":")
    with pytest.raises(OSError):  # stopped on exit: its port no longer accepts connections
        socket.create_connection((host, int(port)), timeout=2).close()


@pytest.fixture
def browser_started(request: pytest.FixtureRequest) -> None:
    """The session's browser, started (or already running) without this test taking `browser`."""
    request.getfixturevalue("browser")


# Playwright's sync API marks its loop as the thread's running loop; tests/browser.py sets that mark
# only while the browser is driven. These two run while this worker's browser is up.
def test_a_test_beside_the_browser_runs_asyncio_run(browser_started: None) -> None:
    assert asyncio._get_running_loop() is None
    assert asyncio.run(asyncio.sleep(0, result="ran")) == "ran"


async def test_an_async_test_runs_beside_the_browser(browser_started: None) -> None:
    assert await asyncio.sleep(0, result="ran") == "ran"


@pytest.fixture
def loop_ran() -> Iterator[str]:
    """Runs an event loop in its setup and its teardown, here in a test that drives the browser."""
    yield asyncio.run(asyncio.sleep(0, result="ran"))
    asyncio.run(asyncio.sleep(0))


@pytest.fixture
def served_page(page) -> Iterator[Any]:
    """Drives the browser in its setup and its teardown."""
    with serve_asgi(tiny_app([])) as base_url:
        page.goto(base_url + "/")
        yield page
        assert page.text_content("#out") == "clicked 1 times"


def test_the_fixtures_of_a_browser_test_can_drive_it_or_run_event_loops(loop_ran: str, served_page) -> None:
    assert loop_ran == "ran"
    served_page.get_by_role("button", name="Count").click()
    served_page.wait_for_function("document.getElementById('out').dataset.clicks === '1'", timeout=10_000)


def test_serve_asgi_reports_an_app_that_cannot_start() -> None:
    async def failing(scope, receive, send) -> None:
        assert scope["type"] == "lifespan"
        await receive()
        await send({"type": "lifespan.startup.failed", "message": "refused on purpose"})

    with pytest.raises(RuntimeError, match="stopped before it served the app"):
        with serve_asgi(failing, start_timeout=20):
            pass


def test_a_missing_chromium_is_named_with_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TELAR_CHROMIUM", "/nonexistent/chromium")
    assert chromium_problem("/nonexistent/chromium") == (
        "Chromium not found at /nonexistent/chromium (TELAR_CHROMIUM; apt-get install chromium, or set TELAR_CHROMIUM to its path)"
    )
    monkeypatch.delenv("TELAR_CHROMIUM")
    assert "(the default path; apt-get install chromium" in str(chromium_problem("/nonexistent/chromium"))
