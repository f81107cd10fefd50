"""Correlations: values a response set (a hidden input, a JSON id, a ``Location``, a token in a link) that
a later request sends back, proposed as extractions with the later uses replaced by ``{{variable}}``."""

from __future__ import annotations

import json
import re
from urllib.parse import parse_qsl, quote, quote_plus, urlsplit

from workers.engine import safejson, variables

from .headers import _encode_form, _form_pairs, _json_replace, _variable_name
from .model import (
    Correlation,
    Entry,
    PreviewStep,
)

MAX_JSON_LEAVES = 500  # per response: more would propose noise
TOKEN_LIKE = re.compile(r"^(?=.*[0-9])(?=.*[A-Za-z])[A-Za-z0-9_\-.~%+/=]{8,}$")
_BOUNDARY = r"A-Za-z0-9_\-"


def _producers(final: Entry, followed: bool) -> list[tuple[str, str, str, str, str]]:
    """(name hint, source, expression, value, kind) of the values a response sets."""
    out = []
    text = final.response_text or ""
    if text and "<input" in text.lower():
        for m in variables._INPUT_TAG.finditer(text):
            attrs = variables.input_attributes(m.group(1))
            name, value = attrs.get("name", ""), attrs.get("value", "")
            hidden = attrs.get("type", "").lower() == "hidden" and name and len(value) >= 4
            # Only when the engine's extraction finds this very value (the first input of that name).
            if hidden and variables.form_field(text, name) == value:
                out.append((name, "form_field", name, value, "hidden form field"))
    if text and "json" in final.mime:
        try:
            doc = safejson.loads(text, max_depth=safejson.MAX_DEPTH)  # its leaves are walked recursively
        except ValueError:
            doc = None
        for path, value in _json_leaves(doc):
            out.append(
                (
                    str(path[-1]) if path and isinstance(path[-1], str) else "id",
                    "json",
                    variables.format_jsonpath(path),
                    value,
                    "JSON value",
                )
            )
    location = final.response_header("location")
    if location and not followed and len(location) >= 4:
        out.append(("location", "header", "Location", location, "Location header"))
    return out


def _json_leaves(doc: object, path: tuple = (), out: list | None = None) -> list[tuple[tuple, str]]:
    out = [] if out is None else out
    if len(out) >= MAX_JSON_LEAVES:
        return out
    if isinstance(doc, dict):
        for k, v in doc.items():
            _json_leaves(v, (*path, str(k)), out)
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:50]):
            _json_leaves(v, (*path, i), out)
    elif isinstance(doc, bool) or doc is None:
        pass
    elif isinstance(doc, int) and abs(doc) >= 10:
        out.append((path, str(doc)))
    elif isinstance(doc, str) and len(doc) >= 4 and not doc.isspace():
        out.append((path, doc))
    return out


def _request_texts(step: PreviewStep) -> list[str]:
    return [step.path, step.body, *step.headers.values()]


def _use_pattern(value: str) -> re.Pattern:
    forms = dict.fromkeys([value, quote_plus(value), quote(value, safe="")])
    alternatives = "|".join(re.escape(f) for f in sorted(forms, key=len, reverse=True))
    return re.compile(rf"(?<![{_BOUNDARY}])(?:{alternatives})(?![{_BOUNDARY}])")


def _url_tokens(step: PreviewStep) -> list[tuple[str, str]]:
    """(parameter, value) of the query parameters that look like server-made tokens."""
    query = urlsplit(step.path).query
    return [(k, v) for k, v in parse_qsl(query, keep_blank_values=True) if TOKEN_LIKE.match(v)]


def _regex_for(text: str, param: str, value: str) -> str | None:
    """A regex whose first group finds ``value`` in ``text`` (as the engine applies it), or None."""
    for pattern in (rf"[?&;]{re.escape(param)}=([^&\"'<>\s#]+)", rf"{re.escape(param)}=([^&\"'<>\s#]+)"):
        m = re.search(pattern, text)
        if m and m.group(1) in (value, value.replace("&", "&amp;")):
            return pattern
    return None


def _forms(value: str) -> list[str]:
    """The ways a value appears in a request: as it is, form-encoded, percent-encoded."""
    return list(dict.fromkeys([value, quote_plus(value), quote(value, safe="")]))


def correlate(steps: list[PreviewStep]) -> list[Correlation]:
    """Values that a step's response set and a later step sends back, earliest producer first.

    A substring test over the joined request texts weeds out the (many) values no later request
    sends before the exact, bounded regex runs: a 200-page recording stays well under a second.
    """
    found: list[Correlation] = []
    taken: set[str] = set()
    claimed: set[str] = set()
    texts = ["\n".join(_request_texts(s)) for s in steps]
    for i, step in enumerate(steps):
        if step.final is None:
            continue
        sent = "\n".join(texts[: i + 1])  # what the client sent up to this response: an echo is no correlation
        later = "\n".join(texts[i + 1 :])
        followed = step.final is not step.entry
        for hint, source, expression, value, kind in _producers(step.final, followed):
            if not any(f in later for f in _forms(value)):
                continue
            if any(value in known or known in value for known in claimed):
                continue  # one value, one variable: an id and the Location that contains it are one correlation
            pattern = _use_pattern(value)
            if pattern.search(sent):
                continue  # the client sent it first: an echo, not a value the server made
            uses = [k for k in range(i + 1, len(steps)) if pattern.search(texts[k])]
            if uses:
                claimed.add(value)
                found.append(Correlation(_variable_name(hint, taken), source, expression, value, i, uses, kind=kind))
        # Tokens in later URLs that this response's text contains (a link such as /report?token=…).
        text = step.final.response_text or ""
        for j in range(i + 1, len(steps)):
            for param, value in _url_tokens(steps[j]):
                if value not in text or value in sent or any(value in known or known in value for known in claimed):
                    continue
                regex = _regex_for(text, param, value)
                if regex is None:
                    continue
                pattern = _use_pattern(value)
                uses = [k for k in range(j, len(steps)) if pattern.search(texts[k])]
                claimed.add(value)
                found.append(
                    Correlation(_variable_name(param, taken), "regex", regex, value, i, uses, kind="token in a URL")
                )
    return found


def _apply(correlation: Correlation, steps: list[PreviewStep]) -> None:
    pattern = _use_pattern(correlation.value)
    placeholder = "{{" + correlation.name + "}}"
    steps[correlation.step].extract.append(
        {"name": correlation.name, "source": correlation.source, "expression": correlation.expression}
    )
    for k in correlation.uses:
        s = steps[k]
        s.path = pattern.sub(placeholder, s.path)
        s.headers = {name: pattern.sub(placeholder, v) for name, v in s.headers.items()}
        if s.body_type == "form":
            s.body = _encode_form([(n, placeholder if v == correlation.value else v) for n, v in _form_pairs(s.body)])
        elif s.body_type == "json":
            s.body = json.dumps(_json_replace(json.loads(s.body), {correlation.value: placeholder}))
        else:
            s.body = pattern.sub(placeholder, s.body)
