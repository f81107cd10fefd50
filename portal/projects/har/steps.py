"""A page of the recording into a step (its redirects, resources, expected status), and the password-like
fields of its body replaced by ``{{variables}}`` unless the user keeps them."""

from __future__ import annotations

import json
import re
from urllib.parse import urljoin, urlsplit

from workers.engine import variables

from .headers import _body_type, _encode_form, _form_pairs, _json_replace, _variable_name, header_rules
from .model import (
    MAX_PATH,
    Choices,
    Entry,
    PreviewStep,
    SecretField,
)
from .websocket import _ws_step

USER_LIKE = re.compile(r"user|e-?mail|login|account", re.IGNORECASE)
PASSWORD_LIKE = re.compile(r"pass(word|wd|phrase|code)?|pwd|secret|\bpin\b|otp", re.IGNORECASE)


def _step(page: list[Entry], choices: Choices, site: str) -> PreviewStep:
    main = page[0]
    if main.websocket:
        return _ws_step(main, choices, site)
    chain = [main]
    for e in page[1:]:
        previous = chain[-1]
        location = previous.redirect_url or previous.response_header("location") or ""
        if 300 <= previous.status < 400 and location and e.url == urljoin(previous.url, location):
            chain.append(e)
        else:
            break
    final = chain[-1]
    body_type = _body_type(main)
    rules = header_rules(main, body_type, choices.keep_headers)
    path = main.path
    notes = []
    if len(chain) > 1:
        hops = " → ".join(e.path for e in chain[1:])
        notes.append(f"follows the redirect to {hops} (the engine follows redirects itself)")
    if main.post_note:
        notes.append(main.post_note)
    if len(path) > MAX_PATH:
        notes.append(f"its {len(path):,}-character URL was cut to {MAX_PATH}")
        path = path[:MAX_PATH]
    # A dict, kept in order: a list's ``in`` made a page of 16,000 sub-requests quadratic.
    found: dict[str, None] = {}
    for e in page[len(chain) :]:
        if e.method == "GET" and (sub := e.path) != path and len(sub) <= MAX_PATH and " " not in sub:
            found[sub] = None
    resources = list(found)
    if len(resources) > 100:
        notes.append(f"{len(resources) - 100} resources beyond the first 100 dropped")
        resources = resources[:100]
    status = final.status if 200 <= final.status <= 599 else None
    if final.status == 304:  # the browser's cache answered; without its conditional headers the server sends 200
        status = None
        notes.append("recorded as 304 Not Modified (the browser's cache): any 2xx/3xx is accepted")
    elif status is None:
        notes.append(f"recorded with status {final.status or 'none'} (blocked or cancelled): any 2xx/3xx is accepted")
    name = (urlsplit(main.url).path or "/")[:80]  # with "OPTIONS " and " (123)" within the Step's 100
    if main.http_version == "h2":
        notes.append("recorded over HTTP/2")
    return PreviewStep(
        name=f"{main.method} {name}" if main.method != "GET" else name,
        method=main.method,
        path=path,
        headers={r.name: r.value for r in rules if r.kept},
        body_type=body_type,
        body=main.post_text or "",
        think_time=0.0,
        expect_status=status,
        resources=resources,
        header_rules=rules,
        notes=notes,
        entry=main,
        final=final,
        recorded_protocol=main.http_version,
    )


def _secret_fields(steps: list[PreviewStep], choices: Choices) -> list[SecretField]:
    """Password-like form and JSON fields become ``{{variable}}`` unless the user keeps the recorded value.

    In a body that posts a password, the user-name field (``username``, ``email``, ``login`` …) is
    offered too, kept as recorded unless the user asks for a variable: a data set of many users
    then logs each virtual user in as someone else.
    """
    found: list[SecretField] = []
    for i, step in enumerate(steps):
        if step.body_type == "form":
            pairs = _form_pairs(step.body)
            login = any(PASSWORD_LIKE.search(name) for name, _ in pairs)
            out = []
            for name, value in pairs:
                swap = _field_choice(i, name, login, choices, found)
                out.append((name, value if swap is None else swap))
            step.body = _encode_form(out)
        elif step.body_type == "json":
            doc = json.loads(step.body)
            login = _has_password_key(doc)

            def swap(key: str, i=i, login=login) -> str | None:
                return _field_choice(i, key, login, choices, found)

            step.body = json.dumps(_json_replace(doc, {}, swap))
    return found


def _has_password_key(doc: object) -> bool:
    if isinstance(doc, dict):
        return any(PASSWORD_LIKE.search(str(k)) or _has_password_key(v) for k, v in doc.items())
    if isinstance(doc, list):
        return any(_has_password_key(v) for v in doc)
    return False


def _field_choice(step: int, name: str, login: bool, choices: Choices, found: list[SecretField]) -> str | None:
    """The placeholder a field is posted as, or None to post the recorded value; records the field for the preview."""
    if PASSWORD_LIKE.search(name):
        kept = name in choices.keep_fields
    elif login and USER_LIKE.search(name):
        kept = name not in choices.vary_fields
    else:
        return None
    variable = _chosen_variable(name, choices)
    found.append(SecretField(step, name, variable, kept, secret=bool(PASSWORD_LIKE.search(name))))
    return None if kept else "{{" + variable + "}}"


def _chosen_variable(field_name: str, choices: Choices) -> str:
    chosen = choices.variables.get(field_name, "").strip()
    if chosen and re.fullmatch(variables.NAME.pattern, chosen):
        return chosen
    return _variable_name(field_name, set())
