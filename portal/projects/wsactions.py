"""A WebSocket session's actions as the text a user writes in the step form, and back.

One action per line, in the order they run (docs/user-guide/getting-tests-in.md)::

    send {"text": "hello {{name}}"}
    expect contains hello
    expect regex ^id (\\d+)$
      timeout 2
      extract id = regex: ^id (\\d+)$
    expect json $.id == 7
    wait 0.5

``timeout`` and ``extract`` lines belong to the ``expect`` above them. Blank lines and lines
starting with ``#`` are skipped. A message that has line breaks, or spaces at either end, or
starts with a double quote, is written as a JSON string (``send "two\\nlines"``). The actions
are stored in the engine's own format (``workers/engine/plan.py``), which the API takes as is;
``parse`` checks each action the way the engine will, and every message names the action and
what is wrong in it.
"""

from __future__ import annotations

import json
import re

from workers.engine import variables

CHECKS = ("contains", "regex", "json")
EXTRACT_SOURCES = ("regex", "json")
MAX_ACTIONS = 1000  # the engine's MAX_WS_ACTIONS
MAX_WAIT = 3600.0
MAX_TIMEOUT = 600.0
IDENTIFIER = re.compile(rf"^{variables.NAME.pattern}$")
JSON_EQUALS = " == "


class ActionsError(ValueError):
    def __init__(self, errors: list[str]):
        super().__init__("; ".join(errors))
        self.errors = errors


def _message(text: str) -> str:
    """A message as written on a send line: as is, or a JSON string when it could not be read back as is."""
    if len(text.splitlines()) != 1 or text != text.strip() or text.startswith('"'):
        quoted = json.dumps(text, ensure_ascii=False)
        # U+2028, U+0085 … end a line for splitlines() and stay as they are in JSON: escape them then.
        return quoted if len(quoted.splitlines()) == 1 else json.dumps(text)
    return text


def _unmessage(text: str) -> str:
    if text.startswith('"'):
        try:
            value = json.loads(text)
        except ValueError:
            return text
        if isinstance(value, str):
            return value
    return text


def _number(text: str) -> str:
    return f"{float(text):g}"


def format_actions(actions: list[dict]) -> str:
    """The engine's actions as lines of text (``parse_actions`` reads them back to the same actions)."""
    lines = []
    for action in actions:
        if "send" in action:
            lines.append(f"send {_message(action['send'])}")
        elif "wait" in action:
            lines.append(f"wait {_number(action['wait'])}")
        elif "expect" in action:
            expect = action["expect"]
            check = next(c for c in CHECKS if c in expect)
            value = expect[check]
            line = f"expect {check} {_message(value) if check == 'contains' else value}"
            if check == "json" and expect.get("equals") is not None:
                line += f"{JSON_EQUALS}{expect['equals']}"
            lines.append(line)
            if action.get("timeout") is not None:
                lines.append(f"  timeout {_number(action['timeout'])}")
            for item in action.get("extract") or []:
                lines.append(f"  extract {item['name']} = {item['source']}: {item['expression']}")
    return "\n".join(lines)


def parse_actions(text: str) -> list[dict]:
    """Lines of text into the engine's actions; ActionsError lists every problem, naming the action."""
    actions: list[dict] = []
    errors: list[str] = []
    extracted: dict[str, int] = {}
    last_expect: dict | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        word, rest = word.lower(), rest.strip()
        if word in ("timeout", "extract"):
            where = f"line {number} ({word})"
            if last_expect is None:
                errors.append(f"{where}: a {word} line belongs under an expect action")
                continue
            where = f"action {len(actions)} (expect), {word}"
            if word == "timeout":
                seconds = _seconds(rest, where, errors, minimum_exclusive=True, most=MAX_TIMEOUT)
                if seconds is not None:
                    last_expect["timeout"] = seconds
            else:
                item = _extraction(rest, where, errors, extracted, len(actions))
                if item is not None:
                    last_expect.setdefault("extract", []).append(item)
            continue
        index = len(actions) + 1
        if word == "send":
            if not rest:
                errors.append(f"action {index} (send): give the message after send")
            actions.append({"send": _unmessage(rest)})
            last_expect = None
        elif word == "wait":
            seconds = _seconds(rest, f"action {index} (wait)", errors, most=MAX_WAIT)
            actions.append({"wait": seconds if seconds is not None else 0.0})
            last_expect = None
        elif word == "expect":
            last_expect = _expect(rest, f"action {index} (expect)", errors)
            actions.append(last_expect)
        else:
            errors.append(
                f"line {number}: “{word}” is not an action; start each line with send, expect or wait "
                "(or timeout / extract under an expect)"
            )
    if len(actions) > MAX_ACTIONS:
        errors.append(f"at most {MAX_ACTIONS} actions in one session")
    if errors:
        raise ActionsError(errors)
    return actions


def actions_problems(actions: object) -> list[str]:
    """Why a list of actions in the engine's format (an API document) is not valid; [] when it is."""
    if not isinstance(actions, list):
        return ["actions: give a list of actions, each {send: …}, {expect: {…}} or {wait: seconds}"]
    errors: list[str] = []
    for index, action in enumerate(actions, start=1):
        if not isinstance(action, dict) or len({"send", "expect", "wait"} & set(action)) != 1:
            errors.append(f"action {index}: must be an object with one of send, expect or wait")
            continue
        kind = next(k for k in ("send", "expect", "wait") if k in action)
        if problem := _shape_problem(kind, action):
            errors.append(f"action {index} ({kind}): {problem}")
    if errors:
        return errors
    try:
        again = parse_actions(format_actions(actions))
    except ActionsError as exc:
        return exc.errors
    for index, (given, kept) in enumerate(zip(actions, again, strict=True), start=1):
        if given != kept:  # never store anything but what was given
            return [
                f"action {index}: cannot be kept exactly as given (a regex, JSON path or value with spaces at "
                "either end or a line break?)"
            ]
    return []


def _number_value(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _shape_problem(kind: str, action: dict) -> str | None:
    """What is wrong with the shape of one action in the engine's format (the values are checked after)."""
    allowed = {"expect", "timeout", "extract"} if kind == "expect" else {kind}
    if set(action) - allowed:
        return f"unknown field {', '.join(sorted(set(action) - allowed))}"
    if kind == "send":
        return None if isinstance(action["send"], str) else "the message must be a string"
    if kind == "wait":
        return None if _number_value(action["wait"]) else "give the seconds as a number"
    expect = action["expect"]
    if not isinstance(expect, dict) or len(set(CHECKS) & set(expect)) != 1:
        return 'expect must be an object with one of contains, regex or json, e.g. {"contains": "hello"}'
    check = next(c for c in CHECKS if c in expect)
    extra = set(expect) - {check, *(("equals",) if check == "json" else ())}
    if extra:
        return f"unknown field expect.{', expect.'.join(sorted(extra))}"
    if not isinstance(expect[check], str):
        return f"expect.{check} must be a string"
    if expect.get("equals") is not None and not isinstance(expect["equals"], str):
        return 'expect.equals must be a string (the value as text, e.g. "7")'
    if action.get("timeout") is not None and not _number_value(action["timeout"]):
        return "timeout: give the seconds as a number"
    extract = action.get("extract", [])
    if not isinstance(extract, list) or not all(
        isinstance(item, dict)
        and set(item) == {"name", "source", "expression"}
        and all(isinstance(v, str) for v in item.values())
        for item in extract
    ):
        return "extract must be a list of {name, source, expression}"
    return None


def _seconds(text: str, where: str, errors: list[str], *, most: float, minimum_exclusive: bool = False) -> float | None:
    try:
        value = float(text.removesuffix("s").strip())
    except ValueError:
        errors.append(f"{where}: give the seconds as a number, e.g. 0.5 (not “{text}”)")
        return None
    if value != value or value < 0 or (minimum_exclusive and value == 0) or value > most:
        low = "more than 0" if minimum_exclusive else "0 or more"
        errors.append(f"{where}: the seconds must be {low} and at most {most:g}")
        return None
    return value


def _expect(rest: str, where: str, errors: list[str]) -> dict:
    check, _, value = rest.partition(" ")
    check, value = check.lower(), value.strip()
    action: dict = {"expect": {}}
    if check not in CHECKS:
        errors.append(
            f"{where}: say what to check, “expect contains <text>”, “expect regex <pattern>” or "
            f"“expect json <path>” (not “{check or 'nothing'}”)"
        )
        return action
    if not value:
        what = {"contains": "text", "regex": "pattern", "json": "JSON path"}[check]
        errors.append(f"{where}: give the {what} after {check}")
        action["expect"] = {check: ""}
        return action
    if check == "contains":
        action["expect"] = {"contains": _unmessage(value)}
    elif check == "regex":
        try:
            re.compile(value)
        except re.error as exc:
            errors.append(f"{where}, regex: the regex does not compile: {exc}")
        action["expect"] = {"regex": value}
    else:
        path, sep, equals = value.partition(JSON_EQUALS)
        path = path.strip()
        if error := _jsonpath_error(path):
            errors.append(f"{where}, json: {error}")
        action["expect"] = {"json": path}
        if sep:
            action["expect"]["equals"] = equals.strip()
    return action


def _jsonpath_error(path: str) -> str | None:
    if not path.startswith("$"):
        return f"a JSON path starts with $, e.g. $.items[0].id (not “{path}”)"
    try:
        variables.parse_jsonpath(path)
    except ValueError as exc:
        return f"“{path}” is not a JSON path the engine reads ({exc}); e.g. $.items[0].id"
    return None


def _extraction(rest: str, where: str, errors: list[str], extracted: dict[str, int], action: int) -> dict | None:
    name, sep, tail = rest.partition("=")
    source, colon, expression = tail.partition(":")
    name, source, expression = name.strip(), source.strip().lower(), expression.strip()
    if not sep or not colon or not name:
        errors.append(f"{where}: expected extract name = source: expression, e.g. extract id = json: $.id")
    elif not IDENTIFIER.match(name):
        errors.append(f"{where}: “{name}” is not a valid variable name (use letters, digits and _, not a digit first)")
    elif name in extracted:
        errors.append(f"{where}: {name} is already extracted by action {extracted[name]}")
    elif source not in EXTRACT_SOURCES:
        errors.append(f"{where}: a message's values come from regex or json, not “{source}”")
    elif not expression:
        errors.append(f"{where}: give the {'pattern' if source == 'regex' else 'JSON path'} after the colon")
    elif source == "regex" and _regex_error(expression):
        errors.append(f"{where}, regex: the regex does not compile: {_regex_error(expression)}")
    elif source == "json" and (error := _jsonpath_error(expression)):
        errors.append(f"{where}, json: {error}")
    else:
        extracted[name] = action
        return {"name": name, "source": source, "expression": expression}
    return None


def _regex_error(pattern: str) -> str | None:
    try:
        re.compile(pattern)
    except re.error as exc:
        return str(exc)
    return None
