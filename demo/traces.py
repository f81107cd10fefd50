"""The W3C trace context the demo target saw: per path, the last trace ids of ``traceparent`` headers.

A load generator that says it sends trace context can be checked here: the
trace ids it keeps for its slowest requests must be among the ones the target
saw (``GET /_demo/traces``; ``POST /_demo/counters/reset`` empties it too).
Per path (the route template, as in the counters): requests with a well-formed
``traceparent`` (version 00), with a malformed one, without one, how many were
flagged sampled, and the last ``RECENT`` trace ids, oldest first.
"""

from __future__ import annotations

import re
from collections import deque
from typing import Any

RECENT = 10_000  # trace ids kept per path
_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_ZERO_TRACE = "0" * 32
_ZERO_PARENT = "0" * 16


class _PathTraces:
    __slots__ = ("with_header", "malformed", "without", "sampled", "recent")

    def __init__(self) -> None:
        self.with_header = self.malformed = self.without = self.sampled = 0
        self.recent: deque[str] = deque(maxlen=RECENT)


class TraceLog:
    def __init__(self) -> None:
        self.paths: dict[str, _PathTraces] = {}

    def reset(self) -> None:
        self.paths.clear()

    def record(self, path: str, traceparent: str | None) -> None:
        p = self.paths.get(path)
        if p is None:
            p = self.paths[path] = _PathTraces()
        if traceparent is None:
            p.without += 1
            return
        m = _TRACEPARENT.fullmatch(traceparent.strip())
        if m is None or m[1] == _ZERO_TRACE or m[2] == _ZERO_PARENT:
            p.malformed += 1
            return
        p.with_header += 1
        if int(m[3], 16) & 1:
            p.sampled += 1
        p.recent.append(m[1])

    def snapshot(self) -> dict[str, Any]:
        return {
            "paths": {
                path: {
                    "with_traceparent": p.with_header,
                    "malformed": p.malformed,
                    "without": p.without,
                    "sampled": p.sampled,
                    "recent_trace_ids": list(p.recent),
                }
                for path, p in self.paths.items()
            }
        }
