"""The viewer's pages over HTTP, on a real server (uvicorn) and real threads made by real graphs:
what each page says, that stored markup stays text, that huge values are cut and served whole,
that nothing is written, and the guards (Host check, token). The browser tests are in
tests/test_ui_browser.py."""

from __future__ import annotations

import hashlib
import html
import json
import re
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

pytest.importorskip("starlette")
pytest.importorskip("jinja2")

from telar_checkpoint import TelarSaver  # noqa: E402
from telar_checkpoint.errors import StoreError  # noqa: E402
from telar_checkpoint.inspection import diff_checkpoints, read_thread  # noqa: E402
from telar_checkpoint.stores import FileStore, Store  # noqa: E402
from telar_checkpoint.stores.opening import open_store  # noqa: E402
from telar_checkpoint.ui.app import make_app, parse_filter  # noqa: E402
from telar_checkpoint.ui.views import CUT, DEPTH, TIMELINE, tree  # noqa: E402
from tests.browser import serve_asgi  # noqa: E402
from tests.graphs import multi_step  # noqa: E402
from tests.servers import NO_REDIS_SERVER, unavailable  # noqa: E402
from tests.stores import make_store  # noqa: E402
from tests.ui_threads import make_big_thread, make_chat, make_fanout, make_ui_threads  # noqa: E402

HOSTILE = ("<script", "<img", "onerror=")  # in the hostile thread's id, metadata, messages and values


class Elements(HTMLParser):
    """The elements and attribute names of a page, as an HTML parser reads them."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.attributes: set[str] = set()
        self.scripts: list[dict[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.attributes.update(name for name, _ in attrs)
        if tag == "script":
            self.scripts.append(dict(attrs))


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, str, dict[str, str]]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode(), dict(response.headers)
    except urllib.error.HTTPError as exc:
        with exc:  # closes its connection (else a ResourceWarning)
            return exc.code, exc.read().decode(), dict(exc.headers)


def thread_url(base: str, thread_id: str, **params: Any) -> str:
    return f"{base}/thread?{urlencode({'id': thread_id, **params})}"


def text_of(page: str) -> str:
    """What a person reads: the page without its tags, entities resolved."""
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


def tree_bytes(path: Path) -> dict[str, tuple[int, str]]:
    return {str(p.relative_to(path)): (p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    """A file store holding the viewer's test threads (made once for the module)."""
    path = tmp_path_factory.mktemp("ui-store")
    with TelarSaver(str(path)) as saver:
        threads = make_ui_threads(saver)
    yield path, threads


@pytest.fixture(scope="module")
def site(stored: tuple[Path, dict[str, str]]) -> Iterator[tuple[str, dict[str, str]]]:
    path, threads = stored
    store = FileStore(path)
    with serve_asgi(make_app(store)) as base:
        yield base, threads
    store.close()


def test_the_list_shows_every_thread_with_its_status(site: tuple[str, dict[str, str]]) -> None:
    base, threads = site
    status, page, _ = get(base + "/")
    assert status == 200
    found = re.findall(r'<tr class="(?:\w+)"><td><a href="[^"]*">([^<]*)</a></td>\s*<td><span class="status (\w+)"', page)
    rows = {html.unescape(thread_id): status for thread_id, status in found}
    assert rows[threads["chat"]] == "paused"
    assert rows[threads["subgraph"]] == "paused"
    assert rows[threads["fanout"]] == "failed"
    assert set(threads.values()) <= set(rows)


def test_a_paused_chat_shows_its_conversation_and_question(site: tuple[str, dict[str, str]]) -> None:
    base, threads = site
    status, page, _ = get(thread_url(base, threads["chat"]))
    assert status == 200
    shown = text_of(page)
    assert "waiting for an answer" in shown
    question = re.search(r'<div class="waiting"><span class="label">[^<]*</span> <span class="question">([^<]*)</span>', page)
    assert question is not None and "?" in html.unescape(question[1])
    assert re.search(r'<li class="msg human">', page) and re.search(r'<li class="msg ai">', page)
    # a tool call and its result side by side, the result joined to its call
    call = re.search(r'<div class="call"><div class="ask"><span class="tool">([^<]+)</span>.*?'
                     r'<div class="result"><span class="role">result', page, re.S)
    assert call is not None


def test_the_change_shown_is_the_cli_diff(stored: tuple[Path, dict[str, str]], site: tuple[str, dict[str, str]]) -> None:
    path, threads = stored
    base, _ = site
    store = FileStore(path)
    text = read_thread(store, threads["forked"])
    store.close()
    ids = re.findall(r'data-id="([^"]+)" data-ns=""', get(thread_url(base, threads["forked"]))[1])
    assert len(ids) >= 3
    for parent, child in zip(ids, ids[1:]):
        _, page, _ = get(thread_url(base, threads["forked"], cp=child, ns=""))
        changes = re.findall(r'<li class="change (\w+)"><span class="key">([^<]*)</span>', page)
        page_parent = re.search(r'parent <a href="[^"]*">([^<]+)</a>', page)
        assert page_parent is not None
        expected = diff_checkpoints(threads["forked"], text, page_parent[1], child, ns="")
        # every change of the CLI's diff, the graph's channels first and LangGraph's own apart
        assert sorted((k, html.unescape(c)) for k, c in changes) == sorted((c.kind, c.channel) for c in expected)
        own = page.split('<details class="own">', 1)[1] if '<details class="own">' in page else ""
        own_channels = re.findall(r'<li class="change \w+"><span class="key">([^<]*)</span>', own)
        assert all(c.startswith(("__", "branch:")) for c in own_channels)


def test_subgraph_calls_are_nested_under_their_step(site: tuple[str, dict[str, str]]) -> None:
    base, threads = site
    _, page, _ = get(thread_url(base, threads["subgraph"]))
    nested = re.search(r'<details class="call-ns" open><summary>subgraph ([^<]+)</summary>', page)
    assert nested is not None and ":" in nested[1]
    assert "in subgraph" in text_of(page)  # the question is asked inside it


def test_a_failed_branch_is_named(site: tuple[str, dict[str, str]]) -> None:
    base, threads = site
    _, page, _ = get(thread_url(base, threads["fanout"]))
    assert re.search(r'<span class="error">failed: [^<]+</span>', page)
    assert '<tr class="error">' in page  # the pending write of the failure


def test_stored_markup_stays_text(site: tuple[str, dict[str, str]]) -> None:
    base, threads = site
    hostile = threads["hostile"]
    assert any(h in hostile for h in HOSTILE)  # the thread id itself is markup
    pages = [get(base + "/")[1], get(base + "/?" + urlencode({"q": hostile[:12]}))[1], get(thread_url(base, hostile))[1]]
    for page in pages:
        elements = Elements()
        elements.feed(page)  # what a browser reads as markup
        assert [a for a in elements.scripts if a.get("src") != "/static/ui.js"] == []
        assert not {"img", "b", "i"} & elements.tags
        assert not [name for name in elements.attributes if name.startswith("on")]
    assert hostile in text_of(pages[2])  # shown, as text


def test_a_huge_value_is_cut_and_served_whole(stored: tuple[Path, dict[str, str]], site: tuple[str, dict[str, str]]) -> None:
    base, threads = site
    _, page, _ = get(thread_url(base, threads["hostile"]))
    assert len(page) < 400_000  # the state holds a string of about a million characters
    link = re.search(r'more characters of (\d+) · <a class="whole" href="([^"]+)"', page)
    assert link is not None
    size = int(link[1])
    assert size > 100 * CUT
    status, whole, headers = get(base + html.unescape(link[2]))
    assert status == 200 and len(whole) == size
    assert headers["content-type"].startswith("text/plain")  # served as text, never as a page


def test_the_store_is_only_read(stored: tuple[Path, dict[str, str]]) -> None:
    path, threads = stored
    before = tree_bytes(path)
    store = FileStore(path)
    with serve_asgi(make_app(store)) as base:
        get(base + "/")
        for thread_id in threads.values():
            _, page, _ = get(thread_url(base, thread_id))
            for cp in re.findall(r'data-id="([^"]+)"', page)[:5]:
                get(thread_url(base, thread_id, cp=cp))
            get(f"{base}/version?{urlencode({'id': thread_id})}")
        for method in ("POST", "PUT", "DELETE", "PATCH"):
            request = urllib.request.Request(thread_url(base, threads["chat"]), method=method, data=b"")
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(request, timeout=10)
            refused.value.close()  # its connection
            assert refused.value.code == 405
    store.close()
    assert tree_bytes(path) == before


def test_a_loopback_viewer_answers_only_its_own_host(site: tuple[str, dict[str, str]]) -> None:
    base, _ = site
    assert get(base + "/", {"Host": "attacker.example"})[0] == 421
    assert get(base + "/", {"Host": "localhost"})[0] == 200


def test_beyond_loopback_the_token_is_asked_for(stored: tuple[Path, dict[str, str]]) -> None:
    path, _ = stored
    store = FileStore(path)
    token = "s3cret-token"
    with serve_asgi(make_app(store, host="0.0.0.0", token=token)) as base:
        assert get(base + "/")[0] == 401
        assert get(base + "/?token=wrong")[0] == 401
        assert get(base + "/?token=%C3%A9t%C3%A9")[0] == 401  # not ASCII: refused, not an error
        assert get(base + "/", {"Cookie": "telar_ui_token=\u00e9"})[0] == 401
        status, _, headers = get(f"{base}/?token={token}")
        assert status == 200
        cookie = headers["set-cookie"].split(";")[0]
        assert "HttpOnly" in headers["set-cookie"]
        assert get(base + "/", {"Cookie": cookie})[0] == 200
        assert get(base + "/static/ui.css", {"Cookie": "telar_ui_token=wrong"})[0] == 401
    store.close()
    with pytest.raises(ValueError, match="needs a token"):
        make_app(FileStore(path), host="0.0.0.0")


def test_every_page_forbids_other_scripts(site: tuple[str, dict[str, str]]) -> None:
    base, threads = site
    _, _, headers = get(thread_url(base, threads["chat"]))
    policy = headers["content-security-policy"]
    assert "script-src 'self'" in policy and "default-src 'none'" in policy
    assert headers["x-content-type-options"] == "nosniff"


def test_search_by_id_and_by_metadata(site: tuple[str, dict[str, str]], stored: tuple[Path, dict[str, str]]) -> None:
    base, threads = site
    _, page, _ = get(base + "/?" + urlencode({"q": threads["fanout"].upper()}))
    assert html.escape(threads["fanout"]) in page and html.escape(threads["chat"]) not in page
    path, _ = stored
    with TelarSaver(str(path)) as saver:
        metadata = next(iter(saver.list({"configurable": {"thread_id": threads["hostile"]}}))).metadata
    key, value = next((k, v) for k, v in metadata.items() if k.startswith("<"))
    _, page, _ = get(base + "/?" + urlencode({"meta": f"{key}={value}"}))
    listed = [html.unescape(t) for t in re.findall(r'<td><a href="[^"]*">([^<]*)</a></td>', page)]
    assert listed == [threads["hostile"]]
    assert get(base + "/?" + urlencode({"meta": "no equals sign"}))[0] == 400


def test_metadata_filters_read_as_list_reads_them() -> None:
    assert parse_filter("step=3, source=loop") == {"step": 3, "source": "loop"}
    assert parse_filter('user="42"\nflag=true') == {"user": "42", "flag": True}
    with pytest.raises(ValueError, match="key=value"):
        parse_filter("=3")


def test_values_are_cut_where_a_page_must_stop() -> None:
    node = tree({"a": ["x" * (CUT + 5)] * 250, "b/c": {"d": 1}})
    items = node.children[0][1]
    assert items.more == 50 and len(items.children) == 200
    assert items.children[0][1].more == 5 and items.children[0][1].pointer == "/a/0"
    assert node.children[1][1].children[0][1].pointer == "/b~1c/d"
    deep: Any = 1
    for _ in range(40):
        deep = [deep]
    level = tree(deep)
    for _ in range(DEPTH):
        assert level.kind == "list"
        level = level.children[0][1]
    assert level.kind == "cut" and level.pointer == "/0" * DEPTH


def test_a_long_thread_shows_its_newest_checkpoints(tmp_path: Path) -> None:
    with TelarSaver(str(tmp_path)) as saver:
        make_big_thread(saver, "long", 1_000)
    store = FileStore(tmp_path)
    with serve_asgi(make_app(store)) as base:
        _, page, _ = get(thread_url(base, "long"))
        ids = re.findall(r'<li class="row[^"]*" data-id="([^"]+)"', page)
        assert len(ids) == TIMELINE and ids == sorted(ids)
        earlier = re.search(r'<a class="earlier" href="([^"]+)">(\d+) earlier checkpoints</a>', page)
        assert earlier is not None and int(earlier[2]) == 1_000 - TIMELINE
        _, older, _ = get(base + html.unescape(earlier[1]))
        older_ids = re.findall(r'<li class="row[^"]*" data-id="([^"]+)"', older)
        assert len(older_ids) == TIMELINE and max(older_ids) < min(ids)
    store.close()


def test_the_list_pages_through_many_threads(tmp_path: Path) -> None:
    with TelarSaver(str(tmp_path)) as saver:
        graph = multi_step().compile(checkpointer=saver)
        for i in range(120):
            graph.invoke({"log": []}, {"configurable": {"thread_id": f"t{i:03d}"}})
    store = FileStore(tmp_path)
    with serve_asgi(make_app(store)) as base:
        _, first, _ = get(base + "/")
        assert "120 threads" in text_of(first)
        listed = re.findall(r'<td><a href="[^"]*">(t\d+)</a></td>', first)
        assert listed[:2] == ["t119", "t118"] and len(listed) == 50  # newest first
        older = re.search(r'<a rel="next" href="([^"]+)">', first)
        assert older is not None
        _, last, _ = get(base + html.unescape(older[1]).replace("offset=50", "offset=100"))
        assert re.findall(r'<td><a href="[^"]*">(t\d+)</a></td>', last)[-1] == "t000"
        assert '<a rel="next"' not in last
    store.close()


@pytest.mark.parametrize("kind", ["sqlite", "postgres", "redis", "redis-cluster"])
def test_every_store_is_shown(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    store: Store = make_store(kind, tmp_path, request)
    saver = TelarSaver(store)
    threads = {"chat": "ui-chat", "fanout": "ui-fanout"}
    make_chat(saver, threads["chat"])
    make_fanout(saver, threads["fanout"])
    with serve_asgi(make_app(store)) as base:
        _, page, _ = get(base + "/")
        assert html.escape(threads["chat"]) in page and '<span class="status failed">' in page
        _, chat, _ = get(thread_url(base, threads["chat"]))
        assert "waiting for an answer" in text_of(chat)


def test_a_damaged_thread_and_one_of_a_development_build_say_so(tmp_path: Path) -> None:
    golden = Path(__file__).parent / "golden"
    with FileStore(tmp_path) as writing:
        writing.write("old", (golden / "v3.jsonl").read_text())  # lines a development build wrote
        writing.write("broken", (golden / "v1.jsonl").read_text() + '{"format": 1, "kind": "checkpoint", "id": 5}\n')
    before = tree_bytes(tmp_path)
    store = FileStore(tmp_path)
    with serve_asgi(make_app(store)) as base:
        _, page, _ = get(base + "/")
        rows = dict(re.findall(r'<td><a href="[^"]*">(\w+)</a></td>\s*<td>(.*?)</td>', page))
        assert '<span class="status dev"' in rows["old"] and "damaged" not in rows["old"]
        assert '<span class="status damaged">' in rows["broken"] and "line" in rows["broken"]
        status, broken, _ = get(thread_url(base, "broken"))
        assert status == 200 and "telar-checkpoint repair" in broken
        assert get(thread_url(base, "nothing-here"))[0] == 404
    store.close()
    assert tree_bytes(tmp_path) == before  # read, never rewritten (an upgrade or a repair would write)


def test_a_store_that_cannot_be_read_is_named_on_the_page(tmp_path: Path) -> None:
    """A Redis server of the test's own, stopped while the viewer serves it."""
    server = shutil.which("redis-server")
    if server is None:
        unavailable(NO_REDIS_SERVER, "redis-server")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen([server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                                "--dir", str(tmp_path)], stdout=subprocess.DEVNULL)
    try:
        url = f"redis://127.0.0.1:{port}/0"
        deadline = time.monotonic() + 10
        while True:
            try:
                store = open_store(url).store
                store.setup()
                break
            except StoreError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        make_fanout(TelarSaver(store), "ui-fanout")
        app = make_app(store, refresh=0.0)
        with serve_asgi(app) as base:
            assert get(thread_url(base, "ui-fanout"))[0] == 200
            process.terminate()  # the server goes away: every read now fails
            process.wait(10)
            status, page, _ = get(thread_url(base, "ui-fanout"))
            assert status == 503 and "could not be read" in page
            app.viewer.catalogue.start()
            assert app.viewer.catalogue.wait(60)
            assert "could not be read" in get(base + "/")[1]
    finally:
        process.kill()
        process.wait(10)


def test_the_live_poll_reads_the_thread_only_when_its_version_moved(site: tuple[str, dict[str, str]]) -> None:
    base, threads = site
    url = f"{base}/version?{urlencode({'id': threads['chat']})}"
    first = json.loads(get(url)[1])
    assert first["latest"][""] and first["version"]
    same = json.loads(get(f"{url}&{urlencode({'seen': first['version']})}")[1])
    assert same == {"version": first["version"], "latest": None, "problem": None}  # answered from the version alone
    moved = json.loads(get(f"{url}&{urlencode({'seen': 'an older version'})}")[1])
    assert moved["latest"] == first["latest"]
