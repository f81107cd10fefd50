"""The Plimsoll demo target's aiohttp application: the bundled system under test.

``create_app(db_path, items=..., knobs=...)`` builds the app. Pages:

* ``/``, ``/articles``, ``/articles/{id}``: realistic HTML pages (5-60 KB);
* ``/search?q=Area+042``: equality search on the custom field ``work_items.area``;
* ``/workitems/{id}``: one work item, served by a simulated web garden of
  ``web_garden.processes`` worker processes (``demo/webgarden.py``);
* ``/login``, ``/account``, ``/logout``: a form login with a CSRF token, as in Django;
* ``GET /documents`` (a list of links), ``GET /documents/{id}`` (download) and
  ``POST /documents`` (upload: a raw body, or multipart with one file; 201 with
  the new id as JSON; 413 above 10 MB): documents stored in the database or in
  a blob folder (``demo/documents.py``).

Pages that do database work (``/search?q=``, ``/articles/{id}``, the documents
pages) first allocate from the shared "tempdb files" (``demo/tempdb.py``).

Admin (under ``/_demo/``, plus ``/metrics``; never counted, never delayed):

* ``GET/POST /_demo/knobs`` and ``GET /_demo/knobs/schema``: configuration knobs;
* ``GET /_demo/config``: the knobs' values under the names the seeded ledger gives them
  (the index as ``db.index.work_items.area``), for Plimsoll's Verify;
* ``GET /_demo/counters``, ``POST /_demo/counters/reset``: exact counters (the
  reset also empties the security-token cache and the trace log);
* ``GET /_demo/traces``: the W3C trace ids seen per path (``demo/traces.py``);
* ``GET /metrics``: the counters, CPU, in-flight count, tempdb lock waits and
  token-cache size and clean-ups as Prometheus text.

One middleware does the cross-cutting work for every page: a token in the
security-token cache (``demo/tokencache.py``, which may stall the page behind
a clean-up), the ``latency_ms`` delay, HTML error pages, gzip of text bodies
for the ``compression`` knob, and the counters.
It writes the response itself, so the service time it measures includes
sending the body, and it compresses the body itself so that ``bytes_sent`` is
exactly the number of body bytes put on the wire.
"""

from __future__ import annotations

import asyncio
import gzip
import logging
import re
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import BodyPartReader, web

from demo import content
from demo.counters import Counters, prometheus_text
from demo.documents import MAX_UPLOAD_BYTES, Documents
from demo.knobs import KNOBS, KnobError, KnobRegistry
from demo.tempdb import TempDb
from demo.tokencache import TokenCache
from demo.traces import TraceLog
from demo.webgarden import WebGarden
from demo.workitems import WorkItems

log = logging.getLogger("demo")

USERS = {"demo": "demo", "alice": "alice", "bob": "bob"}
SESSION_COOKIE = "demo_sessionid"
CSRF_COOKIE = "csrftoken"
CSRF_FIELD = "csrfmiddlewaretoken"
MAX_SESSIONS = 100_000  # a load test creates many sessions; forget the oldest
GZIP_MIN_BYTES = 200  # like Django's GZipMiddleware: tiny bodies only grow
GZIP_TYPES = ("text/", "application/json")  # not documents that are already compressed
UPLOAD_READ_BYTES = 64 * 1024
_SAFE_TYPE = re.compile(r"[a-z0-9][a-z0-9!#$&^_.+-]*/[a-z0-9][a-z0-9!#$&^_.+-]*")
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._ -]")


@dataclass
class Session:
    csrf: str = field(default_factory=lambda: secrets.token_hex(32))
    user: str | None = None


class Sessions:
    """In-memory sessions, least recently used dropped first beyond a cap."""

    def __init__(self, cap: int = MAX_SESSIONS) -> None:
        self._cap = cap
        self._data: OrderedDict[str, Session] = OrderedDict()

    def __len__(self) -> int:
        return len(self._data)

    def get(self, sid: str | None) -> Session | None:
        session = self._data.get(sid) if sid else None
        if session is not None:
            self._data.move_to_end(sid)
        return session

    def create(self, user: str | None = None) -> tuple[str, Session]:
        sid = secrets.token_urlsafe(24)
        self._data[sid] = session = Session(user=user)
        while len(self._data) > self._cap:
            self._data.popitem(last=False)
        return sid, session

    def delete(self, sid: str | None) -> None:
        self._data.pop(sid or "", None)


@dataclass
class DemoState:
    workitems: WorkItems
    documents: Documents
    counters: Counters = field(default_factory=Counters)
    sessions: Sessions = field(default_factory=Sessions)
    traces: TraceLog = field(default_factory=TraceLog)
    knobs: KnobRegistry = None  # type: ignore[assignment]  # set in create_app
    knob_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # The ``errors_pct`` knob's running share: each page adds the knob's value, and a page that takes it
    # to 100 or more is answered 503 (and 100 taken off), so the share of errors is exact, not random.
    error_credit: int = 0
    tempdb: TempDb = field(init=False)
    token_cache: TokenCache = field(init=False)
    web_garden: WebGarden = field(init=False)

    def __post_init__(self) -> None:
        self.tempdb = TempDb(self.counters)
        self.token_cache = TokenCache(self.counters)
        self.web_garden = WebGarden(self.counters)

    async def allocate(self) -> None:
        """Allocate from the "tempdb files" before database work (the ``tempdb.files`` knob)."""
        await self.tempdb.allocate(self.knobs["tempdb.files"])


STATE = web.AppKey("demo_state", DemoState)


def is_admin(path: str) -> bool:
    return path.startswith("/_demo/") or path == "/metrics"


def route_template(request: web.Request) -> str:
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "<unmatched>"


def accepts_gzip(request: web.Request) -> bool:
    for part in request.headers.get("Accept-Encoding", "").split(","):
        coding, _, params = part.strip().partition(";")
        if coding.strip().lower() in ("gzip", "*"):
            return params.replace(" ", "") not in ("q=0", "q=0.0", "q=0.00", "q=0.000")
    return False


def html(text: str, status: int = 200) -> web.Response:
    return web.Response(text=text, status=status, content_type="text/html")


def redirect(location: str) -> web.Response:
    return web.Response(status=302, headers={"Location": location})


def _error_response(exc: web.HTTPException) -> web.Response:
    """Turn a raised HTTP error (aiohttp's are plain text) into an HTML page."""
    if exc.status < 400:
        return web.Response(status=exc.status, headers=exc.headers)
    response = html(content.error_page(exc.status, exc.reason), exc.status)
    if "Allow" in exc.headers:  # 405 Method Not Allowed
        response.headers["Allow"] = exc.headers["Allow"]
    return response


@web.middleware
async def demo_middleware(request: web.Request, handler) -> web.StreamResponse:
    if is_admin(request.path):
        return await handler(request)
    state = request.app[STATE]
    counters = state.counters
    started = time.perf_counter()
    counters.in_flight += 1
    status, sent = 500, 0
    try:
        await state.token_cache.on_page_request()
        if delay := state.knobs["latency_ms"]:
            await asyncio.sleep(delay / 1000)
        try:
            state.error_credit += state.knobs["errors_pct"]
            if state.error_credit >= 100:
                state.error_credit -= 100
                raise web.HTTPServiceUnavailable(reason="Service Unavailable (the errors_pct knob)")
            response = await handler(request)
        except web.HTTPException as exc:
            response = _error_response(exc)
        except Exception:
            log.exception("error in %s %s", request.method, request.path)
            response = html(content.error_page(500, "Internal Server Error"), 500)

        body = response.body if isinstance(response, web.Response) else None
        if (
            isinstance(body, bytes)
            and len(body) >= GZIP_MIN_BYTES
            and state.knobs["compression"] == "on"
            and response.content_type.startswith(GZIP_TYPES)
            and "Content-Encoding" not in response.headers
        ):
            response.headers["Vary"] = "Accept-Encoding"
            if accepts_gzip(request):
                # mtime=0 makes the output deterministic, so byte counts are exact.
                response.body = body = gzip.compress(body, compresslevel=6, mtime=0)
                response.headers["Content-Encoding"] = "gzip"

        status = response.status
        try:
            await response.prepare(request)
            await response.write_eof()
        except ConnectionError:  # client went away; aiohttp finishes the clean-up
            return response
        empty = request.method == "HEAD" or status in (204, 304) or status < 200
        sent = 0 if empty or not isinstance(body, bytes) else len(body)
        return response
    finally:
        counters.in_flight -= 1
        path = route_template(request)
        counters.record(path, status, sent, time.perf_counter() - started)
        state.traces.record(path, request.headers.get("traceparent"))


# -- pages ------------------------------------------------------------------------
def current_session(request: web.Request) -> Session | None:
    return request.app[STATE].sessions.get(request.cookies.get(SESSION_COOKIE))


def current_user(request: web.Request) -> str | None:
    session = current_session(request)
    return session.user if session else None


async def home(request: web.Request) -> web.Response:
    return html(content.home_page(current_user(request)))


async def articles(request: web.Request) -> web.Response:
    return html(content.articles_page(current_user(request)))


async def article(request: web.Request) -> web.Response:
    raw = request.match_info["id"]
    if not (raw.isascii() and raw.isdigit() and 1 <= int(raw) <= content.ARTICLE_COUNT):
        raise web.HTTPNotFound(reason="No such article")
    await request.app[STATE].allocate()
    return html(content.article_page(int(raw), current_user(request)))


async def search(request: web.Request) -> web.Response:
    query = request.query.get("q", "").strip()
    if not query:
        return html(content.search_page("", None, [], current_user(request)))
    state = request.app[STATE]
    await state.allocate()
    started = time.perf_counter()
    total, rows = await state.workitems.asearch(query)
    query_ms = (time.perf_counter() - started) * 1000
    response = html(content.search_page(query, total, rows, current_user(request)))
    # In a header, not the page, so pages are byte-identical with or without index.
    response.headers["X-Demo-Query-Ms"] = f"{query_ms:.3f}"
    return response


async def work_item(request: web.Request) -> web.Response:
    """One work item, served by a web-garden process (``demo/webgarden.py``)."""
    raw = request.match_info["id"]
    if not (raw.isascii() and raw.isdigit() and 1 <= int(raw) <= request.app[STATE].workitems.items):
        raise web.HTTPNotFound(reason="No such work item")
    await request.app[STATE].web_garden.serve()
    return html(content.work_item_page(int(raw), current_user(request)))


def _set_session_cookies(response: web.StreamResponse, sid: str, session: Session) -> None:
    response.set_cookie(SESSION_COOKIE, sid, path="/", httponly=True, samesite="Lax")
    response.set_cookie(CSRF_COOKIE, session.csrf, path="/", samesite="Lax")


async def login_form(request: web.Request) -> web.Response:
    sessions = request.app[STATE].sessions
    sid = request.cookies.get(SESSION_COOKIE)
    session = sessions.get(sid)
    if session is None:
        sid, session = sessions.create()
    response = html(content.login_page(session.csrf))
    _set_session_cookies(response, sid, session)
    return response


async def login_submit(request: web.Request) -> web.Response:
    sessions = request.app[STATE].sessions
    form = await request.post()
    sid = request.cookies.get(SESSION_COOKIE)
    session = sessions.get(sid)
    token = str(form.get(CSRF_FIELD, ""))
    if session is None or not secrets.compare_digest(token.encode(), session.csrf.encode()):
        message = (
            "CSRF verification failed: the form's csrfmiddlewaretoken is missing or does not"
            " match this session. Load GET /login first and post its token with the cookies."
        )
        return html(content.error_page(403, message), 403)
    username, password = str(form.get("username", "")), str(form.get("password", ""))
    if USERS.get(username) != password or not username:
        response = html(content.login_page(session.csrf, "Invalid user name or password.", username), 403)
        _set_session_cookies(response, sid, session)
        return response
    sessions.delete(sid)  # a new session id and token on login, as Django does
    new_sid, new_session = sessions.create(user=username)
    response = redirect("/account")
    _set_session_cookies(response, new_sid, new_session)
    return response


async def account(request: web.Request) -> web.Response:
    user = current_user(request)
    if user is None:
        return redirect("/login")
    return html(content.account_page(user))


async def logout(request: web.Request) -> web.Response:
    request.app[STATE].sessions.delete(request.cookies.get(SESSION_COOKIE))
    response = redirect("/")
    response.del_cookie(SESSION_COOKIE, path="/")
    response.del_cookie(CSRF_COOKIE, path="/")
    return response


# -- documents --------------------------------------------------------------------
async def documents_list(request: web.Request) -> web.Response:
    state = request.app[STATE]
    await state.allocate()
    docs = await asyncio.to_thread(state.documents.listing)
    return html(content.documents_page(docs, state.knobs["documents.storage"], current_user(request)))


async def document_download(request: web.Request) -> web.Response:
    raw = request.match_info["id"]
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 18):
        raise web.HTTPNotFound(reason="No such document")
    state = request.app[STATE]
    await state.allocate()
    started = time.perf_counter()
    found = await asyncio.to_thread(state.documents.read, int(raw))
    if found is None:
        raise web.HTTPNotFound(reason="No such document")
    info, body = found
    response = web.Response(body=body, content_type=info.content_type)
    filename = _UNSAFE_NAME.sub("_", info.name) or "document"
    response.headers["Content-Disposition"] = f'attachment; filename="{filename}"'
    response.headers["X-Demo-Storage"] = info.storage
    response.headers["X-Demo-Read-Ms"] = f"{(time.perf_counter() - started) * 1000:.3f}"
    return response


async def _read_capped(read_chunk) -> bytes:
    """Read a body through ``read_chunk(n)`` (b"" at the end); 413 beyond MAX_UPLOAD_BYTES."""
    parts, size = [], 0
    while chunk := await read_chunk(UPLOAD_READ_BYTES):
        size += len(chunk)
        if size > MAX_UPLOAD_BYTES:
            raise web.HTTPRequestEntityTooLarge(MAX_UPLOAD_BYTES, size)
        parts.append(chunk)
    return b"".join(parts)


def _clean_type(value: str) -> str:
    value = value.split(";", 1)[0].strip().lower()
    return value if len(value) <= 100 and _SAFE_TYPE.fullmatch(value) else "application/octet-stream"


async def document_upload(request: web.Request) -> web.Response:
    """Store the body (raw, named by ``?name=``) or the first file of a multipart form."""
    if (request.content_length or 0) > MAX_UPLOAD_BYTES:
        raise web.HTTPRequestEntityTooLarge(MAX_UPLOAD_BYTES, request.content_length)
    if request.content_type == "multipart/form-data":
        body = None
        async for part in await request.multipart():
            if isinstance(part, BodyPartReader) and part.filename:
                name, content_type = part.filename, _clean_type(part.headers.get("Content-Type", ""))
                body = await _read_capped(part.read_chunk)
                break
        if body is None:
            raise web.HTTPBadRequest(reason="The multipart form has no file")
    else:
        name = request.query.get("name", "upload.bin")
        content_type = _clean_type(request.content_type)
        body = await _read_capped(request.content.read)
    state = request.app[STATE]
    await state.allocate()
    storage = state.knobs["documents.storage"]
    info = await asyncio.to_thread(state.documents.create, name[:200] or "upload.bin", content_type, body, storage)
    url = f"/documents/{info.id}"
    return web.json_response(
        {"id": info.id, "name": info.name, "size": info.size, "storage": info.storage, "url": url},
        status=201,
        headers={"Location": url},
    )


# -- admin ------------------------------------------------------------------------
async def knobs_get(request: web.Request) -> web.Response:
    return web.json_response(request.app[STATE].knobs.values)


# The configuration as its administrators write it down (the seeded ledger's names, what Plimsoll's
# Verify reads: portal/projects/drift.py): the knobs' values, the index under its database name.
CONFIG_NAMES = {"search.index": "db.index.work_items.area"}


async def config_get(request: web.Request) -> web.Response:
    values = request.app[STATE].knobs.values
    return web.json_response({CONFIG_NAMES.get(key, key): value for key, value in values.items()})


async def knobs_schema(request: web.Request) -> web.Response:
    return web.json_response(request.app[STATE].knobs.schema())


async def knobs_post(request: web.Request) -> web.Response:
    state = request.app[STATE]
    try:
        changes = await request.json()
    except ValueError:
        return web.json_response({"error": "body must be a JSON object"}, status=400)
    async with state.knob_lock:  # one change at a time: applying may take a while
        try:
            values = await state.knobs.set(changes)
        except KnobError as exc:
            return web.json_response({"error": str(exc)}, status=400)
    log.info("knobs set: %s", changes)
    return web.json_response(values)


async def counters_get(request: web.Request) -> web.Response:
    return web.json_response(request.app[STATE].counters.snapshot())


async def counters_reset(request: web.Request) -> web.Response:
    state = request.app[STATE]
    state.counters.reset()
    state.traces.reset()
    state.token_cache.clear()  # like DBCC FREESYSTEMCACHE: the story's short-lived cure
    return web.json_response(state.counters.snapshot())


async def traces_get(request: web.Request) -> web.Response:
    return web.json_response(request.app[STATE].traces.snapshot())


async def metrics(request: web.Request) -> web.Response:
    state = request.app[STATE]
    text = prometheus_text(state.counters, state.knobs.values, len(state.sessions))
    return web.Response(
        text=text, content_type="text/plain", charset="utf-8", headers={"X-Content-Type-Options": "nosniff"}
    )


# -- the factory -----------------------------------------------------------------
def create_app(db_path: str | Path, items: int = 200_000, knobs: dict[str, Any] | None = None) -> web.Application:
    """Build the demo target.

    ``db_path`` is the SQLite file (created and filled with ``items`` work items
    and the seeded documents at start-up unless it already holds them; blob
    storage is the folder ``<db_path>-blobs``). ``knobs`` overrides knob defaults;
    every knob is applied at start-up, so a reused database starts in the state
    the knobs say (for example without the index, documents in the database).
    """
    workitems = WorkItems(db_path, items)
    state = DemoState(workitems=workitems, documents=Documents(workitems.connection, db_path))
    state.knobs = KnobRegistry(KNOBS, state)
    state.knobs.values.update(state.knobs.validate(knobs or {}))

    app = web.Application(middlewares=[demo_middleware])
    app[STATE] = state

    async def startup(app: web.Application) -> None:
        started = time.perf_counter()
        created = await asyncio.to_thread(state.workitems.ensure_populated)
        await asyncio.to_thread(state.documents.ensure_seeded)
        await state.knobs.apply_all()
        verb = "generated" if created else "reused"
        log.info("%s %d work items in %s (%.2fs)", verb, items, db_path, time.perf_counter() - started)

    async def cleanup(app: web.Application) -> None:
        state.workitems.close()

    app.on_startup.append(startup)
    app.on_cleanup.append(cleanup)

    app.router.add_get("/", home)
    app.router.add_get("/articles", articles)
    app.router.add_get("/articles/{id}", article)
    app.router.add_get("/search", search)
    app.router.add_get("/workitems/{id}", work_item)
    app.router.add_get("/login", login_form)
    app.router.add_post("/login", login_submit)
    app.router.add_get("/account", account)
    app.router.add_get("/logout", logout)
    app.router.add_get("/documents", documents_list)
    app.router.add_post("/documents", document_upload)
    app.router.add_get("/documents/{id}", document_download)
    app.router.add_get("/_demo/knobs", knobs_get)
    app.router.add_post("/_demo/knobs", knobs_post)
    app.router.add_get("/_demo/knobs/schema", knobs_schema)
    app.router.add_get("/_demo/config", config_get)
    app.router.add_get("/_demo/counters", counters_get)
    app.router.add_post("/_demo/counters/reset", counters_reset)
    app.router.add_get("/_demo/traces", traces_get)
    app.router.add_get("/metrics", metrics)
    return app
