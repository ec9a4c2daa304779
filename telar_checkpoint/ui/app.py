"""The viewer's web app: read-only pages of a store's threads (Starlette, Jinja2 templates).

Every route is a GET; none changes the store, which is opened as the CLI's read-only commands
open it (`stores.opening.open_store` with ``create=False``). Templates escape every string (autoescape), and the
pages load only the app's own script and style (a Content-Security-Policy forbids the rest), so
stored markup shows as text. Bound to a loopback address, the app answers only requests that
name such a host (a page elsewhere cannot reach it through DNS rebinding); bound to another, it
asks for the token it was given: as ``?token=`` once, then from a cookie.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode

from jinja2 import Environment, PackageLoader, select_autoescape
from langgraph.checkpoint.serde.base import SerializerProtocol
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from telar_checkpoint.codec import CheckpointCodec
from telar_checkpoint.errors import CheckpointDroppedError, StoredDataError, TelarError, UsageError
from telar_checkpoint.history import History
from telar_checkpoint.inspection import CheckpointNotFoundError
from telar_checkpoint.stores.base import Store
from telar_checkpoint.stores.common import stored_size
from telar_checkpoint.ui import views
from telar_checkpoint.ui.catalogue import PAGE, Catalogue

PARSED = 8  # threads kept parsed (see `Viewer._history`)...
PARSED_CHARACTERS = 64 * 2**20  # ...while their texts hold at most this many characters
LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")
TOKEN_COOKIE = "telar_ui_token"
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",  # a token in the address stays here
    "Cache-Control": "no-store",
}

Scope = MutableMapping[str, Any]
ASGI = Callable[[Scope, Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]], Awaitable[None]]


class ViewerApp:
    """The viewer's ASGI app: the Host check (loopback binding) or the token check (any other),
    then the pages, with `HEADERS` on every response."""

    def __init__(self, viewer: Viewer, app: ASGI, *, token: str | None, hosts: tuple[str, ...] | None) -> None:
        self.viewer, self.app, self.token, self.hosts = viewer, app, token, hosts

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        refusal, cookie = self._refusal(scope, headers)
        if refusal is not None:
            await refusal(scope, receive, send)
            return

        async def with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                extra = [(k.lower().encode(), v.encode()) for k, v in HEADERS.items()]
                if cookie:
                    extra.append((b"set-cookie", f"{TOKEN_COOKIE}={cookie}; HttpOnly; SameSite=Strict; Path=/".encode()))
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        await self.app(scope, receive, with_headers)

    def _refusal(self, scope: Scope, headers: dict[str, str]) -> tuple[Response | None, str | None]:
        if self.hosts is not None:
            host = headers.get("host", "")
            name = host.rsplit(":", 1)[0] if not host.startswith("[") else host.split("]")[0] + "]"
            if name not in self.hosts:
                return PlainTextResponse(f"refused: this viewer answers only {', '.join(self.hosts[:3])}", 421), None
        if self.token is None:
            return None, None
        given = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("token", [""])[0]
        if given and _same(given, self.token):
            return None, self.token
        cookies = dict(part.strip().split("=", 1) for part in headers.get("cookie", "").split(";") if "=" in part)
        if _same(cookies.get(TOKEN_COOKIE, ""), self.token):
            return None, None
        return PlainTextResponse("this viewer needs the token it printed when it started: open the address it printed", 401), None


class Viewer:
    """The pages of one store (`serde`: the serializer its threads were written with)."""

    def __init__(self, store: Store, *, serde: SerializerProtocol | None = None, refresh: float = 30.0) -> None:
        self.store = store
        self.codec = CheckpointCodec(serde)
        self.catalogue = Catalogue(store, refresh=refresh)
        self._parsed: dict[str, tuple[str, History]] = {}  # thread id -> (text, history), the PARSED last read
        self._lock = threading.Lock()
        self.templates = Environment(loader=PackageLoader("telar_checkpoint.ui", "templates"),
                                     autoescape=select_autoescape(default=True, default_for_string=True))
        self.templates.filters["json"] = lambda v: json.dumps(v, ensure_ascii=False)
        self.templates.globals["url"] = _url

    def routes(self) -> list[Any]:
        static = StaticFiles(directory=str(Path(__file__).parent / "static"))
        return [
            Route("/", self.threads, methods=["GET"]),
            Route("/thread", self.thread, methods=["GET"]),
            Route("/value", self.value, methods=["GET"]),
            Route("/version", self.version, methods=["GET"]),
            Mount("/static", static, name="static"),
        ]

    def _page(self, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        return HTMLResponse(self.templates.get_template(name).render(**context), status)

    def _missing(self, message: str, status: int = 404) -> HTMLResponse:
        return self._page("missing.html", status, message=message)

    # --- the list --------------------------------------------------------------------------------

    async def threads(self, request: Request) -> Response:
        query = request.query_params.get("q", "")
        meta = request.query_params.get("meta", "")
        try:
            offset = max(int(request.query_params.get("offset", "0")), 0)
            filter = parse_filter(meta)
        except ValueError as exc:
            return self._missing(f"bad search: {exc}", 400)
        page = await _in_thread(self.catalogue.page, query, filter or None, offset, PAGE)
        return self._page("threads.html", page=page, q=query, meta=meta)

    # --- a thread --------------------------------------------------------------------------------

    def _history(self, thread_id: str) -> tuple[History | None, str, str | None]:
        """(history, text, problem); history None when the thread is missing or damaged. The
        last threads read are kept parsed while their text stays the same (a page of a long
        thread asks for its checkpoints one by one)."""
        text = self.store.read(thread_id)
        if text is None:
            return None, "", None
        with self._lock:
            kept = self._parsed.get(thread_id)
        if kept is not None and kept[0] == text:
            history = kept[1]
        else:
            try:
                history = History.parse(thread_id, text)
            except StoredDataError as exc:
                return None, text, str(exc)
            self._keep(thread_id, text, history)
        if history.only_deleted:  # only the record of its deletion: no thread
            return None, "", None
        return history, text, None

    def _keep(self, thread_id: str, text: str, history: History) -> None:
        """Keep `history` parsed, dropping the oldest kept past PARSED threads or PARSED_CHARACTERS."""
        with self._lock:
            self._parsed.pop(thread_id, None)
            self._parsed[thread_id] = (text, history)
            while len(self._parsed) > PARSED or sum(len(t) for t, _ in self._parsed.values()) > PARSED_CHARACTERS:
                del self._parsed[next(iter(self._parsed))]

    async def thread(self, request: Request) -> Response:
        params = request.query_params
        thread_id = params.get("id")
        if thread_id is None:
            return self._missing("which thread? (a thread's address is /thread?id=THREAD)", 400)
        return await _in_thread(self._thread, thread_id, params.get("cp") or None, params.get("ns"),
                                params.get("before") or None, params.get("part"), params.get("after"))

    def _thread(self, thread_id: str, cp: str | None, ns: str | None, before: str | None, part: str | None,
                after: str | None) -> Response:
        stored = self._stored_version(thread_id) if part is None else None  # (only the whole page shows it)
        history, text, problem = self._history(thread_id)
        if problem is not None:
            return self._page("damaged.html", 200, thread_id=thread_id, problem=problem, size=stored_size(text))
        if history is None:
            return self._missing(f"no thread {thread_id!r} in this store")
        if part == "rows":  # the live page's new checkpoints of the root graph
            timeline = views.timeline(self.codec, history, "", after=after)
            return self._page("rows.html", thread_id=thread_id, timeline=timeline, selected=None)
        timeline = views.timeline(self.codec, history, ns or "" if before else "", before=before)
        try:
            detail = views.detail(self.codec, history, thread_id, cp, ns)
        except (CheckpointNotFoundError, CheckpointDroppedError) as exc:
            return self._missing(str(exc))
        if part == "detail":
            return self._page("detail.html", thread_id=thread_id, detail=detail)
        row = views.thread_row(thread_id, text, history)
        if part == "head":
            return self._page("head.html", thread_id=thread_id, row=row, questions=views.questions(self.codec, history))
        return self._page("thread.html", thread_id=thread_id, row=row, timeline=timeline, detail=detail,
                          following=cp is None, live=before is None, questions=views.questions(self.codec, history),
                          version=self._version(stored, text), latest=_latest_ids(history))

    async def value(self, request: Request) -> Response:
        p = request.query_params
        try:
            return await _in_thread(self._value, p["id"], p["cp"], p.get("ns", ""), p["channel"], p.get("path", ""))
        except KeyError as exc:
            return PlainTextResponse(f"missing: {exc}", 404)

    def _value(self, thread_id: str, cp: str, ns: str, channel: str, pointer: str) -> Response:
        history, _text, problem = self._history(thread_id)
        if history is None:
            return PlainTextResponse(problem or f"no thread {thread_id!r}", 404)
        try:
            value = views.whole_value(self.codec, history, thread_id, cp, ns, channel, pointer)
        except (CheckpointNotFoundError, CheckpointDroppedError) as exc:
            return PlainTextResponse(str(exc), 404)
        if isinstance(value, str):
            return PlainTextResponse(value)
        return PlainTextResponse(json.dumps(value, ensure_ascii=False, indent=1), media_type="application/json")

    # --- live ------------------------------------------------------------------------------------

    def _stored_version(self, thread_id: str) -> str | None:
        """The store's version of the thread, taken before its text is read (a write in between
        then shows as a change on the next poll, not as one already seen); None when the store
        keeps none."""
        return repr(self.store.version(thread_id)) if self.store.keeps_versions else None

    @staticmethod
    def _version(stored: str | None, text: str | None) -> str:
        """`stored`, or for a store without versions one made from the text read."""
        if stored is not None:
            return stored
        return "" if text is None else f"{len(text)}:{hash(text[-4096:])}"

    async def version(self, request: Request) -> Response:
        params = request.query_params
        return JSONResponse(await _in_thread(self._latest, params.get("id", ""), params.get("seen")))

    def _latest(self, thread_id: str, seen: str | None = None) -> dict[str, Any]:
        """The thread's version, and each namespace's latest checkpoint id: the page asks for
        new rows only when they changed. A store that versions its keys answers from the version
        alone while it is still `seen` (the page's), without reading the thread."""
        stored = self._stored_version(thread_id)
        if stored is not None and stored == seen:
            return {"version": stored, "latest": None, "problem": None}
        history, text, problem = self._history(thread_id)
        latest = {} if history is None else _latest_ids(history)
        return {"version": self._version(stored, text or None), "latest": latest, "problem": problem}


def _same(given: str, token: str) -> bool:
    """`given == token`, in time independent of where they differ (as bytes: any text may be given)."""
    return secrets.compare_digest(given.encode("utf-8", "surrogateescape"), token.encode())


def _latest_ids(history: History) -> dict[str, str]:
    return {ns: entry.line.id for ns in history.namespaces() if (entry := history.latest(ns)) is not None}


def parse_filter(text: str) -> dict[str, Any]:
    """`key=value` pairs (one a line or comma-separated) as a metadata filter; a value that reads
    as JSON is that value (``step=3`` is 3), else text."""
    filter: dict[str, Any] = {}
    for part in (p.strip() for p in text.replace("\n", ",").split(",")):
        if not part:
            continue
        key, sep, raw = part.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{part!r} is not key=value")
        try:
            value: Any = json.loads(raw)
        except ValueError:
            value = raw.strip()
        filter[key.strip()] = value
    return filter


def _url(path: str, **params: Any) -> str:
    kept = {k: v for k, v in params.items() if v is not None}
    return f"{path}?{urlencode(kept)}" if kept else path


async def _in_thread(fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)` off the event loop (the stores' reads block)."""
    return await run_in_threadpool(fn, *args)


def make_app(store: Store, *, host: str = "127.0.0.1", token: str | None = None,
             serde: SerializerProtocol | None = None, refresh: float = 30.0) -> ViewerApp:
    """The viewer of `store`, as an ASGI app, for a server bound to `host`: a loopback one
    answers only requests naming it; any other needs `token`."""
    loopback = host in LOOPBACK
    if not loopback and not token:
        raise UsageError(f"a viewer bound to {host} (not a loopback address) needs a token")
    viewer = Viewer(store, serde=serde, refresh=refresh)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        yield
        viewer.catalogue.close()

    async def unreachable(_request: Request, exc: Exception) -> Response:
        return viewer._missing(f"the store could not be read: {exc}", 503)

    app = Starlette(routes=viewer.routes(), lifespan=lifespan, exception_handlers={TelarError: unreachable})
    return ViewerApp(viewer, app, token=None if loopback else token, hosts=LOOPBACK if loopback else None)
