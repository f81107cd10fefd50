"""Reading a HAR file: its limits (size, JSON values, bodies kept) and its entries, or a HarError saying why not."""

from __future__ import annotations

import base64
import binascii
import json
import re
from datetime import datetime
from urllib.parse import quote_plus, urlsplit

from .model import (
    Entry,
    HarError,
)
from .websocket import _ws_messages

MAX_HAR_BYTES = 50 * 1024 * 1024  # the upload limit; Chromium's "Save all as HAR" of a long session stays below
# JSON values (objects, arrays, members, items) a HAR may hold: parsed, each costs 32 to 64 bytes, so 50 MB of
# "[],[],…" took 1.3 GB and 15 s (a recording: 4.6 times its size). Playwright's compact HAR of 50 MB holds 4.7 M.
MAX_JSON_VALUES = 6_000_000
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
MAX_BODY_CHARS = 64 * 1024  # a request body larger than this (binary, base64, a file upload) is dropped, with a note
MAX_RESPONSE_CHARS = 5 * 1024 * 1024  # response text searched for correlations
TEXT_TYPES = ("text/", "application/json", "application/javascript", "application/xml", "+json", "+xml")


def load(raw: bytes, *, max_bytes: int = MAX_HAR_BYTES, max_values: int = MAX_JSON_VALUES) -> list[Entry]:
    """The entries of a HAR file, in the order they started; HarError says why a file is refused."""
    if len(raw) > max_bytes:
        raise HarError(
            f"The file is {len(raw) / 1024 / 1024:.1f} MB; the limit is {max_bytes // 1024 // 1024} MB. "
            "Record only the journey you want to test (start recording just before it)."
        )
    if not raw.strip():
        raise HarError("The file is empty. Save the recording with your browser's “Save all as HAR”.")
    if (values := _json_values(raw, max_values)) > max_values:
        raise HarError(
            f"The file holds {values:,} JSON values, more than {max_values:,}, the limit (a recording of 50 MB holds "
            "about 5 million); nothing was imported. Record only the journey you want to test."
        )
    try:
        doc = json.loads(raw.decode("utf-8-sig"))
    except UnicodeDecodeError:
        raise HarError("The file is not UTF-8 text, so it is not a HAR file (HAR is JSON).") from None
    except RecursionError:  # "[[[[…" nested deeper than the parser goes: no HAR nests more than a few levels
        raise HarError("The file's JSON is nested too deep to be a HAR (a HAR nests a few levels).") from None
    except json.JSONDecodeError as exc:
        raise HarError(
            f"The file is not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}). A HAR file is JSON: "
            "save it with “Save all as HAR” in the browser's network panel, or Playwright's record_har_path."
        ) from None
    log = doc.get("log") if isinstance(doc, dict) else None
    if not isinstance(log, dict) or not isinstance(log.get("entries"), list):
        raise HarError(
            "This JSON is not a HAR: a HAR has a “log” object with a list of “entries”. "
            "Save the recording with “Save all as HAR” in the browser's network panel."
        )
    if not log["entries"]:
        raise HarError("The HAR has no requests (its log has no entries): record the journey again.")
    entries = [_entry(i, e) for i, e in enumerate(log["entries"])]
    entries.sort(key=lambda e: (e.started, e.index))
    return entries


def _json_values(raw: bytes, limit: int) -> int:
    """The JSON values and members ``raw`` holds (``{``, ``[``, ``,`` and ``:`` outside strings), before parsing it;
    0 when its bytes alone show it is under ``limit``.

    The marks are counted in the bytes first, strings included: a file under the limit that way needs no
    more. Only over it are the strings taken out (a regex, in C) and the marks counted again.
    """
    if len(raw) <= limit:
        return 0  # a value takes at least one byte
    marks = (b"{", b"[", b",", b":")
    if sum(raw.count(mark) for mark in marks) <= limit:
        return 0
    structure = _JSON_STRING.sub(b"", raw)
    return sum(structure.count(mark) for mark in marks)


def _entry(index: int, e: object) -> Entry:
    """One HAR entry; any field of the wrong shape is a HarError naming the entry, never a crash."""
    try:
        return _entry_fields(index, e)
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise HarError(
            f"This is not a valid HAR: entry {index + 1} lacks a request method and URL, a response or a "
            f"start time, or has one of the wrong type ({type(exc).__name__}: {exc})."
        ) from None


def _entry_fields(index: int, e: dict) -> Entry:
    request, response = e["request"], e["response"]
    method, url = str(request["method"]).upper(), str(request["url"])
    started = datetime.fromisoformat(str(e["startedDateTime"]).replace("Z", "+00:00")).timestamp()
    scheme = urlsplit(url).scheme
    messages = e.get("_webSocketMessages")
    websocket = scheme in ("ws", "wss") or (
        str(e.get("_resourceType") or "") == "websocket" and scheme in ("http", "https")
    )
    if websocket:
        # Chrome records the session's URL as ws:// or wss:// (some tools keep http(s)): one spelling.
        url = {"http": "ws", "https": "wss"}.get(scheme, scheme) + url[len(scheme) :]
    elif scheme not in ("http", "https"):
        url = ""  # data:, blob:, chrome-extension: ... dropped below
    post_text, post_note, post_mime = _post_body(request.get("postData"))
    content = response.get("content") or {}
    if not isinstance(content, dict):
        content = {}
    return Entry(
        index=index,
        started=started,
        duration=max(float(e.get("time") or 0), 0) / 1000,
        method=method,
        url=url,
        request_headers=_headers(request.get("headers")),
        post_mime=post_mime,
        post_text=post_text,
        post_note=post_note,
        status=int(response.get("status") or 0),
        response_headers=_headers(response.get("headers")),
        response_text=_response_text(content),
        redirect_url=str(response.get("redirectURL") or ""),
        resource_type=str(e.get("_resourceType") or ""),
        pageref=str(e.get("pageref") or ""),
        mime=str(content.get("mimeType") or "").lower(),
        http_version=_protocol(request.get("httpVersion") or response.get("httpVersion")),
        ws_messages=_ws_messages(messages) if websocket else None,
    )


def _protocol(version: object) -> str:
    """A HAR ``httpVersion`` in the engine's words: "h2", "http/1.1", "h3" ("" when absent or unknown)."""
    v = str(version or "").strip().lower()
    if v in ("h2", "http/2", "http/2.0", "h2c"):
        return "h2"
    if v in ("h3", "http/3", "http/3.0") or v.startswith("h3-"):
        return "h3"
    if v in ("http/1.1", "http/1.0"):
        return v
    return ""


def _headers(raw: object) -> list[tuple[str, str]]:
    if not isinstance(raw, list):
        return []
    return [(str(h.get("name", "")), str(h.get("value", ""))) for h in raw if isinstance(h, dict) and h.get("name")]


def _post_body(post: object) -> tuple[str | None, str, str]:
    """(body text or None, a note when it was dropped, its MIME type)."""
    if not isinstance(post, dict):
        return None, "", ""
    mime = str(post.get("mimeType") or "")
    text = post.get("text")
    if text is None and isinstance(post.get("params"), list):
        text = "&".join(
            f"{quote_plus(str(p.get('name', '')))}={quote_plus(str(p.get('value', '')))}" for p in post["params"]
        )
    if not isinstance(text, str):
        return None, "", mime
    if post.get("encoding") == "base64" or "\x00" in text:
        return None, f"its {len(text):,}-character binary body was dropped (a step's body is text)", mime
    if len(text) > MAX_BODY_CHARS:
        return None, f"its {len(text):,}-character body was dropped (over {MAX_BODY_CHARS // 1024} KB)", mime
    return text, "", mime


def _response_text(content: dict) -> str | None:
    text, mime = content.get("text"), str(content.get("mimeType") or "").lower()
    if not isinstance(text, str) or not any(t in mime for t in TEXT_TYPES):
        return None
    if content.get("encoding") == "base64":
        if len(text) > MAX_RESPONSE_CHARS * 4 // 3:
            return None
        try:
            return base64.b64decode(text).decode("utf-8", "replace")
        except (binascii.Error, ValueError):
            return None
    return text[:MAX_RESPONSE_CHARS]
