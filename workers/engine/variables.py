"""Variables of an iteration: ``{{name}}`` substitution and extraction from responses.

A virtual user's iteration carries a plain ``dict`` of values (its data-set row,
then whatever its steps extract). This module turns a step's texts into
templates once, when the run starts, and its extractions into small compiled
objects, so the hot path is a list join and a precompiled regex.

**Templates.** ``compile_template(text, kind)`` splits a text into literal parts
and placeholders, or returns None when it has none, so a step without ``{{``
costs nothing at run time. A placeholder is ``{{name}}`` (spaces inside the
braces allowed) where ``name`` is an identifier; any other ``{{...}}`` is
literal text. Each placeholder gets the escape its place needs:

* ``form`` bodies: the value is URL-encoded (``quote_plus``), as a browser posts it;
* ``json`` bodies: inside a JSON string, the value is JSON-string-escaped; outside
  one (``{"id": {{id}}}``) it is inserted as it is and the body is parsed after
  substitution: it must be valid JSON (``body_needs_json_check``);
* ``raw`` bodies: as it is;
* ``path``: characters a URL cannot carry (spaces, ``#``, non-ASCII, quotes...)
  are percent-encoded, but the URL's own delimiters (``/ ? & = %``...) are kept,
  so an extracted ``href`` keeps working;
* ``header`` values: as they are, line breaks replaced by spaces (a header cannot
  carry one).

A name with no value raises ``MissingVariable``: the runner reports it as
``extraction_failed`` and sends nothing.

**Extraction** (``Extractor``): ``regex`` (first capture group, else the whole
match), ``json`` (a small JSONPath: ``$.a.b[0].c``, ``$['a b']``, ``[-1]``),
``form_field`` (the ``value`` of ``<input name=...>``, attributes in any order,
any quoting, entities unescaped) and ``header``. A failure raises
``ExtractionError`` with a message that names the variable and the source.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Callable, Mapping
from typing import Any, NoReturn
from urllib.parse import quote, quote_plus

from . import safejson
from .errors import short

PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
TEMPLATE_KINDS = ("path", "header", "raw", "form", "json")
SOURCES = ("regex", "json", "form_field", "header")

# In a path, keep the URL's delimiters and '%' (an extracted href is usually encoded already).
_PATH_SAFE = "!$&'()*+,/:;=?@[]~%"


class VariableError(Exception):
    """A request could not be built from its templates; ``str(exc)`` is the sample message."""


class MissingVariable(VariableError):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


class ExtractionError(Exception):
    """An extraction found nothing; ``str(exc)`` names the variable and the source."""


# -- templates ---------------------------------------------------------------------------------------


def _escape_path(value: str) -> str:
    return quote(value, safe=_PATH_SAFE)


def _escape_header(value: str) -> str:
    return value.replace("\r", " ").replace("\n", " ") if ("\r" in value or "\n" in value) else value


def _escape_form(value: str) -> str:
    return quote_plus(value, safe="")


def _escape_json_string(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)[1:-1]


_ESCAPES: dict[str, Callable[[str], str] | None] = {
    "path": _escape_path,
    "header": _escape_header,
    "raw": None,
    "form": _escape_form,
}


class Template:
    """A text split into literal parts and named slots; ``render(values)`` fills the slots and joins."""

    __slots__ = ("text", "names", "_parts", "_slots")

    def __init__(self, text: str, parts: list[str], slots: list[tuple[int, str, Callable[[str], str] | None]]) -> None:
        self.text = text
        self._parts = tuple(parts)
        self._slots = tuple(slots)
        self.names = tuple(dict.fromkeys(name for _, name, _ in slots))

    def render(self, values: Mapping[str, str]) -> str:
        out = list(self._parts)
        for i, name, escape in self._slots:
            value = values.get(name)
            if value is None:
                raise MissingVariable(name)
            out[i] = value if escape is None else escape(value)
        return "".join(out)

    def __repr__(self) -> str:
        return f"Template({self.text!r})"


def placeholders(text: str) -> list[str]:
    """The names used in ``text``, in order of appearance (repeats included)."""
    return PLACEHOLDER.findall(text) if "{{" in text else []


def compile_template(text: str, kind: str) -> Template | None:
    """A template for ``text`` used as ``kind`` (see TEMPLATE_KINDS), or None when it has no placeholder."""
    if "{{" not in text:
        return None
    matches = list(PLACEHOLDER.finditer(text))
    if not matches:
        return None
    if kind == "json":
        in_string = _in_json_string(text, [m.start() for m in matches])
        escapes = [_escape_json_string if s else None for s in in_string]
    else:
        escapes = [_ESCAPES[kind]] * len(matches)
    parts: list[str] = []
    slots: list[tuple[int, str, Callable[[str], str] | None]] = []
    pos = 0
    for m, escape in zip(matches, escapes, strict=True):
        parts.append(text[pos : m.start()])
        slots.append((len(parts), m.group(1), escape))
        parts.append("")
        pos = m.end()
    parts.append(text[pos:])
    return Template(text, parts, slots)


def _in_json_string(text: str, positions: list[int]) -> list[bool]:
    """For each position (ascending), whether it lies inside a JSON string literal of ``text``."""
    out: list[bool] = []
    inside = False
    i = 0
    n = len(text)
    for target in positions:
        while i < target and i < n:
            c = text[i]
            if inside:
                if c == "\\":
                    i += 1
                elif c == '"':
                    inside = False
            elif c == '"':
                inside = True
            i += 1
        out.append(inside)
    return out


def body_needs_json_check(text: str) -> bool:
    """Whether a json body template has a placeholder outside a string: only then can a value break the JSON."""
    starts = [m.start() for m in PLACEHOLDER.finditer(text)] if "{{" in text else []
    return not all(_in_json_string(text, starts))


def json_body_problem(text: str) -> str | None:
    """Why a json body template can never be valid JSON, or None.

    Placeholders inside strings are replaced by a dummy value and the result
    must parse. A template with a placeholder outside a string
    (``{"id": {{id}}}``) depends on its values: it is checked after
    substitution, at run time, instead. An empty body is allowed (nothing is sent).
    """
    if not text.strip() or body_needs_json_check(text):
        return None
    try:
        safejson.loads(PLACEHOLDER.sub("x", text))
    except ValueError as exc:
        return f"not valid JSON ({exc})"
    return None


def check_json_body(body: str, template: Template) -> None:
    """Raise VariableError when a json body is not valid JSON after substitution."""
    try:
        safejson.loads(body)
    except ValueError as exc:
        names = ", ".join("{{%s}}" % n for n in template.names)  # noqa: UP031 - braces
        raise VariableError(f"the JSON body is not valid after substituting {names} ({exc})") from None


# -- responses -----------------------------------------------------------------------------------------


def decoded_text(body: bytes, headers: Mapping[str, str]) -> str:
    """The body as text, in the charset of its Content-Type (UTF-8 by default), bad bytes replaced."""
    content_type = headers.get("Content-Type", "") or ""
    charset = "utf-8"
    if ";" in content_type:
        for part in content_type.split(";")[1:]:
            name, _, value = part.partition("=")
            if name.strip().lower() == "charset" and value.strip():
                charset = value.strip().strip('"')
    try:
        return body.decode(charset, "replace")
    except LookupError:
        return body.decode("utf-8", "replace")


_UNSET = object()


class Page:
    """One response as the checks and extractions see it: text and JSON decoded once, on first use."""

    __slots__ = ("body", "headers", "_text", "_json", "_json_error")

    def __init__(self, body: bytes, headers: Mapping[str, str]) -> None:
        self.body = body
        self.headers = headers
        self._text: str | None = None
        self._json: Any = _UNSET
        self._json_error = ""

    @property
    def text(self) -> str:
        if self._text is None:
            self._text = decoded_text(self.body, self.headers)
        return self._text

    def json(self) -> Any:
        """The parsed body; raises ValueError (with a short reason) when it is not JSON."""
        if self._json is _UNSET and not self._json_error:
            try:
                self._json = safejson.loads(self.text)
            except ValueError as exc:
                self._json_error = short(str(exc))
        if self._json_error:
            raise ValueError(self._json_error)
        return self._json

    def header(self, name: str) -> str | None:
        value = self.headers.get(name)
        if value is None:
            lower = name.lower()
            for key, v in self.headers.items():
                if key.lower() == lower:
                    return v
        return value


# -- JSONPath (a small subset) ------------------------------------------------------------------------

_JP_NAME = re.compile(r"[^.\[\]\s'\"]+")
_JP_INDEX = re.compile(r"\[\s*(-?\d+)\s*\]")
_JP_QUOTED = re.compile(r"""\[\s*(?:'((?:[^'\\]|\\.)*)'|"((?:[^"\\]|\\.)*)")\s*\]""")


def parse_jsonpath(expression: str) -> tuple[str | int, ...]:
    """``$.a.b[0]['c d']`` -> ``("a", "b", 0, "c d")``; raises ValueError naming the position.

    Supported: ``$``, ``.name``, ``[index]`` (negative counts from the end),
    ``['name']`` / ``["name"]`` (with ``\\`` escapes). Not supported: wildcards,
    recursive descent, slices, filters.
    """
    text = expression.strip()
    if not text.startswith("$"):
        raise ValueError("must start with '$'")
    steps: list[str | int] = []
    i = 1
    while i < len(text):
        c = text[i]
        if c == ".":
            if text.startswith("..", i):
                raise ValueError(f"recursive descent '..' is not supported (position {i})")
            m = _JP_NAME.match(text, i + 1)
            if not m:
                raise ValueError(f"expected a name after '.' at position {i}")
            if m.group() == "*":
                raise ValueError(f"wildcards are not supported (position {i + 1})")
            steps.append(m.group())
            i = m.end()
        elif c == "[":
            m = _JP_INDEX.match(text, i)
            if m:
                steps.append(int(m.group(1)))
                i = m.end()
                continue
            m = _JP_QUOTED.match(text, i)
            if m:
                raw = m.group(1) if m.group(1) is not None else m.group(2)
                steps.append(re.sub(r"\\(.)", r"\1", raw))
                i = m.end()
                continue
            raise ValueError(
                f"expected [number] or ['name'] at position {i} (wildcards, slices and filters are not supported)"
            )
        else:
            raise ValueError(f"unexpected {c!r} at position {i}")
    return tuple(steps)


def format_jsonpath(steps: tuple[str | int, ...]) -> str:
    out = ["$"]
    for s in steps:
        if isinstance(s, int):
            out.append(f"[{s}]")
        elif _JP_NAME.fullmatch(s) and s != "*":
            out.append(f".{s}")
        else:
            out.append("['" + s.replace("\\", "\\\\").replace("'", "\\'") + "']")
    return "".join(out)


def jsonpath_lookup(doc: Any, steps: tuple[str | int, ...]) -> Any:
    """The value at ``steps``; raises LookupError saying where the path stops matching."""
    node = doc
    for depth, step in enumerate(steps):
        where = format_jsonpath(steps[:depth])
        if isinstance(node, list):
            index = step if isinstance(step, int) else (int(step) if step.isdigit() else None)
            if index is None:
                raise LookupError(f"{where} is a list, not an object with {step!r}")
            if not -len(node) <= index < len(node):
                raise LookupError(f"{where} has {len(node)} item{'s' if len(node) != 1 else ''}, no [{index}]")
            node = node[index]
        elif isinstance(node, dict):
            key = str(step)
            if key not in node:
                raise LookupError(f"{where} has no key {key!r}")
            node = node[key]
        else:
            raise LookupError(f"{where} is {_json_kind(node)}, not a list or an object")
    return node


def _json_kind(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, str):
        return "a string"
    return "a number"


def json_value_text(v: Any) -> str:
    """A JSON value as a variable: strings as they are, anything else as its JSON text (42, true, null, [1])."""
    if isinstance(v, str):
        return v
    return json.dumps(v, ensure_ascii=False, separators=(",", ":"))


# -- form fields ---------------------------------------------------------------------------------------

# An <input ...> tag; quoted attribute values may contain '>' (an unrolled loop, fast in re).
_INPUT_TAG = re.compile(r"""<input\b([^>"']*(?:(?:"[^"]*"|'[^']*')[^>"']*)*)>""", re.IGNORECASE)
_ATTRIBUTE = re.compile(r"""([^\s=/>"']+)(?:\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s>"'=<`]+)))?""")


def input_attributes(attributes: str) -> dict[str, str]:
    """The attributes of a tag (the text after its name): lower-case names, first one wins, entities unescaped."""
    out: dict[str, str] = {}
    for m in _ATTRIBUTE.finditer(attributes):
        name = m.group(1).lower()
        if name in out:
            continue
        value = m.group(2) if m.group(2) is not None else m.group(3) if m.group(3) is not None else m.group(4)
        out[name] = html.unescape(value) if value else ""
    return out


def form_field(text: str, name: str) -> str | None:
    """The ``value`` of the first ``<input>`` named ``name`` ("" when it has none), or None when there is none."""
    if name not in text and not any(c in name for c in "&<>\"'"):  # a quick no (unless entity-encoded)
        return None
    for m in _INPUT_TAG.finditer(text):
        attributes = input_attributes(m.group(1))
        if attributes.get("name") == name:
            return attributes.get("value", "")
    return None


# -- extractors ----------------------------------------------------------------------------------------


class Extractor:
    """One compiled extraction: ``extract(page)`` returns the value or raises ExtractionError."""

    __slots__ = ("name", "source", "expression", "_regex", "_path")

    def __init__(self, name: str, source: str, expression: str) -> None:
        if source not in SOURCES:
            raise ValueError(f"unknown extraction source {source!r}")
        self.name = name
        self.source = source
        self.expression = expression
        self._regex = re.compile(expression) if source == "regex" else None
        self._path = parse_jsonpath(expression) if source == "json" else ()

    def extract(self, page: Page) -> str:
        source = self.source
        if source == "form_field":
            value = form_field(page.text, self.expression)
            if value is None:
                self._fail(f'no <input name="{self.expression}"> in the page')
            return value
        if source == "regex":
            m = self._regex.search(page.text)
            if m is None:
                self._fail(f"regex {self.expression!r} found no match")
            value = m.group(1) if self._regex.groups else m.group(0)
            if value is None:
                self._fail(f"regex {self.expression!r} matched, but not its group 1")
            return value
        if source == "json":
            try:
                doc = page.json()
            except ValueError as exc:
                self._fail(f"the body is not JSON ({exc})")
            try:
                return json_value_text(jsonpath_lookup(doc, self._path))
            except LookupError as exc:
                self._fail(f"{self.expression} not found: {exc.args[0]}")
        value = page.header(self.expression)
        if value is None:
            self._fail(f"no {self.expression} header in the response")
        return value

    def _fail(self, why: str) -> NoReturn:
        raise ExtractionError(short(f"{{{{{self.name}}}}} ({self.source}): {why}"))

    def __repr__(self) -> str:
        return f"Extractor({self.name!r}, {self.source!r}, {self.expression!r})"
