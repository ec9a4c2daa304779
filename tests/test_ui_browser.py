"""The viewer in a real headless Chromium, on real threads made by real graphs: what a person sees
and does (open a thread from the list, read the conversation and the question it waits on, see
what a step changed, open a huge value whole, watch a run go on), and that stored markup never
runs. Skipped without Chromium, failed on CI (tests/browser.py)."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

pytest.importorskip("starlette")

from langgraph.types import Command  # noqa: E402

from telar_checkpoint import TelarSaver  # noqa: E402
from telar_checkpoint.stores import FileStore  # noqa: E402
from telar_checkpoint.ui.app import make_app  # noqa: E402
from tests.browser import serve_asgi  # noqa: E402  (its fixtures, browser and page, are in conftest.py)
from tests.ui_threads import QUESTION, chat_agent, config_of, make_chat, make_ui_threads  # noqa: E402

SCREENSHOT = os.environ.get("TELAR_UI_SCREENSHOT")  # also write the thread page's picture there (docs/ui-thread.png)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    path = tmp_path_factory.mktemp("ui-browser")
    with TelarSaver(str(path)) as saver:
        threads = make_ui_threads(saver)
    store = FileStore(path)
    with serve_asgi(make_app(store)) as base:
        yield base, threads
    store.close()


def until(tab: Any, done: Callable[[], bool], seconds: float = 15.0) -> None:
    """Wait until `done()` (asked every 100 ms in the page's time), at most `seconds`. (Not
    `wait_for_function`: older Playwright evaluates its text with eval, which the viewer's
    Content-Security-Policy refuses, as it should.)"""
    deadline = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < deadline, f"not done within {seconds} s"
        tab.wait_for_timeout(100)


def link(tab: Any, text: str) -> Any:
    """The link whose whole text is `text` (a name pattern: `exact=` is newer than our floor; "/"
    escaped too, which older Playwright's selector text would read as the pattern's end)."""
    return tab.get_by_role("link", name=re.compile("^" + re.escape(text).replace("/", "\\/") + "$"))


def _no_dialogs(tab: Any) -> list[str]:
    opened: list[str] = []
    tab.on("dialog", lambda dialog: (opened.append(dialog.message), dialog.dismiss()))
    return opened


def test_a_person_opens_a_paused_chat_and_reads_it(site: tuple[str, dict[str, str]], page: Any, tmp_path: Path) -> None:
    base, threads = site
    page.goto(base + "/")
    link(page, threads["chat"]).click()
    page.wait_for_selector("#timeline li.row")
    waiting = page.locator(".head .waiting")
    assert QUESTION in waiting.inner_text()
    conversation = page.locator("ol.chat").last
    roles = conversation.locator(":scope > li .role").all_inner_texts()
    assert roles[0].lower().startswith("human") and any(r.lower().startswith("ai") for r in roles)
    call = conversation.locator(".call").first  # a tool call beside its result
    assert call.locator(".ask .tool").inner_text() and "result" in call.locator(".result").inner_text().lower()
    ask, result = call.locator(".ask").bounding_box(), call.locator(".result").bounding_box()
    assert ask is not None and result is not None and result["x"] > ask["x"] + ask["width"] - 1  # side by side
    picture = Path(SCREENSHOT) if SCREENSHOT else tmp_path / "thread.png"
    page.screenshot(path=str(picture))
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # an earlier step: what it changed
    rows = page.locator("#timeline > li.row")
    rows.nth(1).locator("a").first.click()
    page.wait_for_selector(".changes")
    assert page.locator(".changes .change").count() >= 1
    assert page.locator("#timeline > li.row.selected").count() == 1


def test_stored_markup_shows_as_text_and_never_runs(site: tuple[str, dict[str, str]], page: Any) -> None:
    base, threads = site
    dialogs = _no_dialogs(page)
    page.goto(base + "/")
    hostile = link(page, threads["hostile"])
    assert hostile.count() == 1  # the id, read as text
    hostile.click()
    page.wait_for_selector("h1")
    assert page.locator("h1").inner_text() == threads["hostile"]
    assert page.locator("main img, main b, main i").count() == 0
    assert page.evaluate("() => document.querySelectorAll('script').length") == 1  # ours only
    page.locator("#timeline > li.row a").first.click()
    page.wait_for_selector("h3")
    assert dialogs == []


def test_a_huge_value_is_cut_and_opens_whole(site: tuple[str, dict[str, str]], page: Any) -> None:
    base, threads = site
    page.goto(f"{base}/thread?" + urlencode({"id": threads["hostile"]}))
    cut = page.locator(".state .cut", has_text="more characters").first
    total = int(re.search(r"of (\d+)", cut.inner_text())[1])  # type: ignore[index]
    with page.expect_navigation():
        cut.locator("a.whole").click()
    assert len(page.locator("body").inner_text()) >= total - 10  # the whole string, as text


def test_a_failed_branch_and_a_paused_subgraph_are_seen(site: tuple[str, dict[str, str]], page: Any) -> None:
    base, threads = site
    page.goto(base + "/")
    link(page, threads["fanout"]).click()
    page.wait_for_selector("#timeline li.row")  # the thread's page, not the list any more
    assert "failed" in page.locator("#timeline .error").first.inner_text()
    page.goto(base + "/")
    link(page, threads["subgraph"]).click()
    page.wait_for_selector("#timeline li.row")  # the thread's page, not the list any more
    assert page.locator("#timeline details.call-ns").count() >= 1
    assert "in subgraph" in page.locator(".head .waiting").inner_text()


def test_a_fork_is_marked(site: tuple[str, dict[str, str]], page: Any) -> None:
    base, threads = site
    page.goto(base + "/")
    link(page, threads["forked"]).click()
    page.wait_for_selector("#timeline li.row")  # the thread's page, not the list any more
    assert page.locator("#timeline .fork").count() >= 1


def test_an_open_page_follows_the_run(tmp_path: Path, page: Any) -> None:
    with TelarSaver(str(tmp_path)) as saver:
        make_chat(saver, "live")
        store = FileStore(tmp_path)
        with serve_asgi(make_app(store)) as base:
            page.goto(f"{base}/thread?id=live")
            page.wait_for_selector("#timeline li.row")
            before = page.locator("#timeline > li.row").count()
            page.evaluate("() => document.querySelectorAll('#timeline > li.row').forEach(r => r.dataset.kept = 'yes')")
            assert QUESTION in page.locator(".head").inner_text()
            chat_agent(saver).invoke(Command(resume="yes, send it"), config_of("live"))  # the run goes on
            until(page, lambda: page.locator("#timeline > li.row").count() > before)
            until(page, lambda: page.locator(".head .waiting").count() == 0)
            kept = page.evaluate("() => [...document.querySelectorAll('#timeline > li.row')].filter(r => r.dataset.kept).length")
            assert kept == before  # the rows it had were not loaded again
            last_step = page.locator("#timeline > li.row .step").last.inner_text()
            until(page, lambda: page.locator("#detail h2").inner_text().startswith(last_step))
        store.close()
