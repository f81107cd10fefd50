"""A recorded WebSocket session: its frames read from the HAR (Chrome's ``_webSocketMessages``) and
turned into a session step's send, expect and wait actions."""

from __future__ import annotations

from urllib.parse import urlsplit

from .headers import header_rules
from .model import (
    MAX_PATH,
    MAX_THINK_TIME,
    Choices,
    Entry,
    PreviewStep,
    WsMessage,
)

MAX_WS_TEXT = 500  # a received message longer than this is expected by its beginning
WS_MIN_WAIT = 0.05  # gaps shorter than this between frames are not waits (the recording's own jitter)


def _ws_messages(raw: object) -> list[WsMessage]:
    """Chrome's ``_webSocketMessages`` ([{type: send|receive, time, opcode, data}]) in time order."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise TypeError("_webSocketMessages is not a list")
    out = []
    for m in raw:
        if not isinstance(m, dict) or m.get("type") not in ("send", "receive"):
            raise ValueError("a _webSocketMessages item has no type send or receive")
        out.append(WsMessage(m["type"] == "send", float(m["time"]), int(m.get("opcode", 1)), str(m.get("data", ""))))
    out.sort(key=lambda m: m.time)
    return out


def _ws_step(main: Entry, choices: Choices, site: str) -> PreviewStep:
    """A recorded WebSocket session: frames sent become send actions, frames received expect actions
    (the text they carried), the time before each send a wait."""
    notes, actions = [], []
    previous = main.started + main.duration  # the handshake's end
    binary = 0
    for m in main.ws_messages or []:
        if m.opcode != 1:  # binary frames (2) and control frames: a session step sends and expects text
            binary += 1
            continue
        gap = m.time - previous
        previous = m.time
        if m.sent:
            if gap >= WS_MIN_WAIT:
                actions.append({"wait": round(min(gap, MAX_THINK_TIME), 2)})
            actions.append({"send": m.data})
        elif m.data:
            text = m.data if len(m.data) <= MAX_WS_TEXT else m.data[:MAX_WS_TEXT]
            action: dict = {"expect": {"contains": text}}
            if gap > 10:  # a push that came late: give it twice the time it took
                action["timeout"] = float(min(600, round(gap * 2)))
            actions.append(action)
    if binary:
        notes.append(f"{binary} binary frame{'' if binary == 1 else 's'} left out (a session step sends text)")
    long = sum(1 for m in main.ws_messages or [] if not m.sent and m.opcode == 1 and len(m.data) > MAX_WS_TEXT)
    if long:
        notes.append(f"{long} long message{'' if long == 1 else 's'} expected by the first {MAX_WS_TEXT} characters")
    if not main.ws_messages:
        notes.append("no frames were recorded (Chrome saves them with “Save all as HAR with content”)")
    sent, expected = sum(1 for a in actions if "send" in a), sum(1 for a in actions if "expect" in a)
    notes.append(f"WebSocket session: {sent} message{'' if sent == 1 else 's'} sent, {expected} expected")
    rules = header_rules(main, "raw", choices.keep_headers)
    name = (urlsplit(main.url).path or "/")[:77]
    return PreviewStep(
        name=f"WS {name}",
        method="GET",
        path=main.path[:MAX_PATH] if main.origin == site else main.url,
        headers={r.name: r.value for r in rules if r.kept},
        body_type="raw",
        body="",
        think_time=0.0,
        expect_status=None,
        resources=[],
        header_rules=rules,
        notes=notes,
        entry=main,
        final=main,
        recorded_protocol=main.http_version,
        ws_actions=actions,
    )
