"""The viewer's pages at size (issue 42): a thread of 10,000 checkpoints, and a store of 100,000 threads.

    python -m benchmarks.ui [--checkpoints 10000] [--threads 100000] [--runs 5] [--browser] [--out FILE]

On a file store in a temporary directory: the time of the thread page of a thread with
`--checkpoints` checkpoints, opened first by a new viewer once its list has read the store (the
whole HTTP response; and with
--browser, in a new viewer again, the time until headless Chromium has loaded it and drawn its
timeline) and asked for again, and for a store of `--threads` threads the time of the first
list page, and of the catalogue's whole reading. Every run's figure is printed and kept, with
the median. The goal: a 10,000-checkpoint thread opens in under a second; 100,000 threads list
at once (their first page before they are all read).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from telar_checkpoint import TelarSaver
from telar_checkpoint.stores import FileStore
from telar_checkpoint.ui.app import make_app
from tests.browser import serve_asgi
from tests.ui_threads import make_big_thread, make_chat


def _timed_get(url: str) -> tuple[float, int]:
    start = time.perf_counter()
    with urllib.request.urlopen(url, timeout=120) as response:
        size = len(response.read())
    return time.perf_counter() - start, size


def _browser_loads(url: str, runs: int) -> list[float]:
    """Seconds from a click on the thread in the list to its timeline drawn (as a person opens it)."""
    from playwright.sync_api import sync_playwright

    from tests.browser import CHROMIUM, CHROMIUM_FLAGS

    times = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        for _ in range(runs):
            page = browser.new_page()
            page.goto(url.split("/thread")[0] + "/version?id=", wait_until="load")  # the tab is open on the viewer
            start = time.perf_counter()
            page.goto(url, wait_until="load")
            page.wait_for_selector("#timeline li.row")
            times.append(time.perf_counter() - start)
            page.close()
        browser.close()
    return times


def thread_page(where: Path, checkpoints: int, runs: int, browser: bool) -> dict[str, Any]:
    with TelarSaver(str(where)) as saver:
        make_big_thread(saver, "big", checkpoints)
    size = (where / "big.jsonl").stat().st_size if (where / "big.jsonl").exists() else None
    store = FileStore(where)
    first, again, loads = [], [], []
    for _ in range(runs):  # a new viewer each run: the thread is read and parsed anew
        app = make_app(store)
        with serve_asgi(app) as base:
            url = f"{base}/thread?id=big"
            app.viewer.catalogue.wait(120)  # the list, open first, has read the store (as a person opens a thread from it)
            first.append(_timed_get(url))
            again.append(_timed_get(url)[0])
        if browser:
            app = make_app(store)
            with serve_asgi(app) as base:
                app.viewer.catalogue.wait(120)
                loads += _browser_loads(f"{base}/thread?id=big", 1)
    store.close()
    return {"checkpoints": checkpoints, "stored_bytes": size, "http_s": [t for t, _ in first], "again_s": again,
            "html_bytes": first[0][1], "browser_s": loads}


def thread_list(where: Path, threads: int) -> dict[str, Any]:
    with TelarSaver(str(where)) as saver:
        make_chat(saver, "model")
        text = saver.store.read("model")
    assert text is not None
    store = FileStore(where)
    start = time.perf_counter()
    for i in range(threads):
        store.write(f"thread-{i:06d}", text)
    written = time.perf_counter() - start
    app = make_app(store)
    with serve_asgi(app) as base:
        first, size = _timed_get(f"{base}/")
        catalogue = app.viewer.catalogue
        start = time.perf_counter()
        catalogue.wait(1800)
        reading = time.perf_counter() - start + first
        again, _ = _timed_get(f"{base}/?offset=50000")
    store.close()
    return {"threads": threads, "write_s": written, "first_page_s": first, "first_page_bytes": size,
            "whole_reading_s": reading, "a_later_page_s": again}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoints", type=int, default=10_000)
    parser.add_argument("--threads", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--browser", action="store_true", help="also time the page in headless Chromium")
    parser.add_argument("--out", help="append the figures as one JSON line")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as one, tempfile.TemporaryDirectory() as many:
        page = thread_page(Path(one), args.checkpoints, args.runs, args.browser)
        listing = thread_list(Path(many), args.threads) if args.threads else {}
    row = {"at": time.strftime("%Y-%m-%d %H:%M:%S"), "thread": page, "list": listing}
    print(f"thread of {page['checkpoints']} checkpoints: HTTP {', '.join(f'{t * 1000:.0f}' for t in page['http_s'])} ms "
          f"(median {statistics.median(page['http_s']) * 1000:.0f} ms, {page['html_bytes']:,} B of HTML); "
          f"again, kept parsed: median {statistics.median(page['again_s']) * 1000:.0f} ms")
    if page["browser_s"]:
        print(f"  in Chromium, loaded and drawn: {', '.join(f'{t * 1000:.0f}' for t in page['browser_s'])} ms "
              f"(median {statistics.median(page['browser_s']) * 1000:.0f} ms)")
    if listing:
        print(f"{listing['threads']:,} threads: first page {listing['first_page_s'] * 1000:.0f} ms, all read in "
              f"{listing['whole_reading_s']:.1f} s, page 1,001 {listing['a_later_page_s'] * 1000:.0f} ms "
              f"(writing them took {listing['write_s']:.1f} s)")
    if args.out:
        with open(args.out, "a") as f:
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
