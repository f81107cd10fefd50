"""The text fields of the projects' forms: a line per header, extraction, resource or configuration item,
parsed into the values the models keep and written back for editing."""

import re

from django import forms

from workers.engine import variables

from ..models import Step

# Header field names are RFC 9110 tokens.
HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
# Variable and column names: what a ``{{name}}`` placeholder can hold (the engine's rule).
IDENTIFIER = re.compile(rf"^{variables.NAME.pattern}$")
NOT_AN_IDENTIFIER = "use letters, digits and _, not starting with a digit"

MAX_EXTRACTIONS = 50
MAX_RESOURCES = 100


def parse_configuration(text: str) -> list[dict]:
    """``key = value`` lines into the ordered [{"key", "value"}] list; blank and # lines are skipped."""
    entries, errors, seen = [], [], {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            errors.append(f"line {number}: expected key = value")
        elif any(c.isspace() for c in key):
            errors.append(f"line {number}: the key “{key}” has a space; write keys without spaces, e.g. sql.max_dop")
        elif key in seen:
            errors.append(f"line {number}: key {key} appears twice (first on line {seen[key]})")
        else:
            seen[key] = number
            entries.append({"key": key, "value": value})
    if errors:
        raise forms.ValidationError(errors)
    return entries


def format_configuration(configuration: list[dict]) -> str:
    return "\n".join(f"{item['key']} = {item['value']}" for item in configuration)


def parse_headers(text: str) -> dict[str, str]:
    """``Name: value`` lines into a dict; blank lines are skipped."""
    headers, errors, seen = {}, [], {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        name, sep, value = line.partition(":")
        name, value = name.strip(), value.strip()
        if not sep or not name:
            errors.append(f"line {number}: expected Name: value")
        elif not HEADER_NAME.match(name):
            errors.append(f"line {number}: “{name}” is not a valid header name")
        elif name.lower() in seen:
            errors.append(f"line {number}: header {name} appears twice (first on line {seen[name.lower()]})")
        else:
            seen[name.lower()] = number
            headers[name] = value
    if errors:
        raise forms.ValidationError(errors)
    return headers


def format_headers(headers: dict) -> str:
    return "\n".join(f"{name}: {value}" for name, value in headers.items())


def parse_extractions(text: str) -> list[dict]:
    """``name = source: expression`` lines into [{"name", "source", "expression"}]; blank lines are skipped."""
    items, errors, seen = [], [], {}
    sources = Step.Source.values
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        name, sep, rest = line.partition("=")
        source, colon, expression = rest.partition(":")
        name, expression = name.strip(), expression.strip()
        source = source.strip().lower().replace(" ", "_").replace("-", "_")
        if not sep or not colon or not name:
            errors.append(
                f"line {number}: expected name = source: expression, e.g. csrf = form_field: csrfmiddlewaretoken"
            )
        elif not IDENTIFIER.match(name):
            errors.append(f"line {number}: “{name}” is not a valid variable name ({NOT_AN_IDENTIFIER})")
        elif name in seen:
            errors.append(f"line {number}: {name} is already extracted on line {seen[name]}")
        elif source not in sources:
            errors.append(f"line {number}: the source must be one of {', '.join(sources)}, not “{source}”")
        elif not expression:
            errors.append(f"line {number}: give the {dict(Step.Source.choices)[source]} to extract after the colon")
        elif error := _expression_error(source, expression):
            errors.append(f"line {number}: {error}")
        else:
            seen[name] = number
            items.append({"name": name, "source": source, "expression": expression})
    if not errors and len(items) > MAX_EXTRACTIONS:
        errors.append(f"at most {MAX_EXTRACTIONS} extractions per step")
    if errors:
        raise forms.ValidationError(errors)
    return items


def _expression_error(source: str, expression: str) -> str | None:
    if source == Step.Source.REGEX:
        try:
            re.compile(expression)
        except re.error as exc:
            return f"the regex does not compile: {exc}"
    elif source == Step.Source.JSON:
        if not expression.startswith("$"):
            return f"a JSON path starts with $, e.g. $.items[0].id (not “{expression}”)"
        try:
            variables.parse_jsonpath(expression)
        except ValueError as exc:
            return f"“{expression}” is not a JSON path the engine reads ({exc}); e.g. $.items[0].id"
    elif source == Step.Source.HEADER and not HEADER_NAME.match(expression):
        return f"“{expression}” is not a valid header name"
    return None


def format_extractions(items: list[dict]) -> str:
    return "\n".join(f"{item['name']} = {item['source']}: {item['expression']}" for item in items)


def parse_resources(text: str) -> list[str]:
    """One path per line, each starting with /; blank lines are skipped."""
    paths, errors, seen = [], [], {}
    for number, raw in enumerate(text.splitlines(), start=1):
        path = raw.strip()
        if not path:
            continue
        if not path.startswith("/"):
            errors.append(f"line {number}: “{path}” must start with /, it is relative to the environment's base URL")
        elif any(c.isspace() for c in path):
            errors.append(f"line {number}: “{path}” contains a space; percent-encode it as %20")
        elif path in seen:
            errors.append(f"line {number}: {path} is listed twice (first on line {seen[path]})")
        else:
            seen[path] = number
            paths.append(path)
    if not errors and len(paths) > MAX_RESOURCES:
        errors.append(f"at most {MAX_RESOURCES} resources per step")
    if errors:
        raise forms.ValidationError(errors)
    return paths
