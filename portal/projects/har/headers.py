"""The headers and bodies of a recorded request: which header is kept and by what rule, the body's type,
form bodies and the names of ``{{variables}}``."""

from __future__ import annotations

import re
from collections.abc import Callable
from urllib.parse import parse_qsl, quote_plus

from workers.engine import safejson, variables

from .model import (
    Entry,
    HeaderRule,
)

# Header rules, in the order they are tried; each says why a header is kept or dropped.
SECRET_HEADERS = {"cookie", "authorization", "proxy-authorization"}
ENGINE_HEADERS = {"host", "content-length", "connection", "keep-alive", "transfer-encoding", "te", "upgrade"}
BROWSER_HEADERS = {"upgrade-insecure-requests", "cache-control", "pragma", "purpose", "dnt", "priority"}
CONDITIONAL_HEADERS = {"if-none-match", "if-modified-since", "if-match", "if-unmodified-since", "if-range"}
ORIGIN_HEADERS = {"referer", "origin"}
RULE_SECRET = "secret: removed unless you keep it (the engine's cookie jar sends each user's own cookies)"
RULE_ENGINE = "set by the engine for each request"
RULE_PSEUDO = "HTTP/2 pseudo-header, not a header"
RULE_BROWSER = "browser-specific (fetch metadata, client hints, cache control)"
RULE_CONDITIONAL = "conditional request: would measure the browser's cache, not the server"
RULE_ORIGIN = "names the recorded site; the engine sends requests to the environment's base URL"
RULE_BODY_TYPE = "set by the step's body type"
RULE_ENCODING = "set by the engine (it asks for gzip itself)"
RULE_KEPT = "sent by the application"
RULE_KEPT_SECRET = "secret, kept because you chose to keep it"


def header_rules(e: Entry, body_type: str, keep: set[str]) -> list[HeaderRule]:
    rules = []
    for name, value in e.request_headers:
        low = name.lower()
        if low.startswith(":"):
            rules.append(HeaderRule(name, value, False, RULE_PSEUDO))
        elif low in SECRET_HEADERS:
            rules.append(HeaderRule(name, value, low in keep, RULE_KEPT_SECRET if low in keep else RULE_SECRET))
        elif low in ENGINE_HEADERS:
            rules.append(HeaderRule(name, value, False, RULE_ENGINE))
        elif low == "accept-encoding":
            rules.append(HeaderRule(name, value, False, RULE_ENCODING))
        elif low.startswith("sec-") or low in BROWSER_HEADERS:
            rules.append(HeaderRule(name, value, False, RULE_BROWSER))
        elif low in CONDITIONAL_HEADERS:
            rules.append(HeaderRule(name, value, False, RULE_CONDITIONAL))
        elif low in ORIGIN_HEADERS:
            rules.append(HeaderRule(name, value, False, RULE_ORIGIN))
        elif low == "content-type" and body_type != "raw":
            rules.append(HeaderRule(name, value, False, RULE_BODY_TYPE))
        elif not re.fullmatch(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+", name):
            rules.append(HeaderRule(name, value, False, "not a valid header name"))
        else:
            rules.append(HeaderRule(name, value, True, RULE_KEPT))
    return rules


def _body_type(e: Entry) -> str:
    mime = e.post_mime.lower()
    if "application/x-www-form-urlencoded" in mime:
        return "form"
    if "json" in mime and e.post_text is not None:
        try:
            safejson.loads(e.post_text, max_depth=safejson.MAX_DEPTH)  # walked recursively below
            return "json"
        except ValueError:
            return "raw"
    return "raw"


def _form_pairs(text: str) -> list[tuple[str, str]]:
    return parse_qsl(text, keep_blank_values=True)


def _encode_form(pairs: list[tuple[str, str]]) -> str:
    """A form body where values that are ``{{placeholders}}`` stay as they are (the engine encodes their value)."""
    return "&".join(f"{quote_plus(k)}={v if variables.PLACEHOLDER.fullmatch(v) else quote_plus(v)}" for k, v in pairs)


def _variable_name(hint: str, taken: set[str]) -> str:
    base = re.sub(r"[^A-Za-z0-9_]", "_", hint).strip("_") or "value"
    if base[0].isdigit():
        base = "v_" + base
    base = base[:40]
    name, n = base, 2
    while name in taken:
        name, n = f"{base}_{n}", n + 1
    taken.add(name)
    return name


def _json_replace(doc: object, replacements: dict[str, str], secret: Callable[[str], str | None] | None = None):
    if isinstance(doc, dict):
        out = {}
        for k, v in doc.items():
            swap = secret(k) if secret and isinstance(v, str | int | float) and not isinstance(v, bool) else None
            out[k] = swap if swap is not None else _json_replace(v, replacements, secret)
        return out
    if isinstance(doc, list):
        return [_json_replace(v, replacements, secret) for v in doc]
    if isinstance(doc, str | int) and not isinstance(doc, bool) and str(doc) in replacements:
        return replacements[str(doc)]
    return doc
