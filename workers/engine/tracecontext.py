"""W3C Trace Context (https://www.w3.org/TR/trace-context/): a ``traceparent`` header on every request.

``traceparent: 00-<trace id, 32 hex>-<parent id, 16 hex>-<flags, 2 hex>``, flags
``01`` when the request is *sampled* (the target's tracer should record it) and
``00`` when not. Each request (one ``client.request()`` call, its redirect hops
and its one retry included) gets a new trace id and parent id, so a trace id
names exactly one request of the run.

The ids are random, never all zeros, taken from ``os.urandom`` in blocks of
4 KiB (170 requests a block) kept as hex bytes: one system call per block,
and per request two slices formatted into the header line (about 0.3 µs, where
building and parsing a request costs the engine 20-30 µs). The client keeps the
line (``last_traceparent``); the trace id is decoded from it only when a page
becomes its label's slowest of the second.

``trace_sample_rate`` (0..1, default 1.0): the share of requests sent with the
sampled flag. 1.0 by default because the point of the header is to find the
slowest requests' traces, and a tail-sampling collector (or a head sampler that
honours the parent's flag) can only keep what was flagged; a team whose tracing
backend cannot take every load-test request lowers it. The flag is drawn per
request with the client's own ``random.Random``; at 1.0 and 0.0 nothing is drawn.
"""

from __future__ import annotations

import binascii
import os
import random

__all__ = ["TraceContext", "is_traceparent", "parse_traceparent", "trace_id_of"]

_BLOCK = 4096  # random bytes per refill: 8,192 hex digits, 170 ids of 48 hex digits
_ZERO_TRACE = b"0" * 32
_ZERO_PARENT = b"0" * 16


class TraceContext:
    """One virtual user's source of ``traceparent`` headers (not shared between event loops)."""

    __slots__ = ("sample_rate", "_hex", "_pos", "_rng")

    def __init__(self, sample_rate: float = 1.0, rng: random.Random | None = None) -> None:
        if not 0.0 <= sample_rate <= 1.0:
            raise ValueError("sample_rate must be within 0..1")
        self.sample_rate = sample_rate
        self._hex = b""
        self._pos = 0
        self._rng = rng or random.Random(os.urandom(16))

    def line(self) -> bytes:
        """A new header line, ``b"traceparent: 00-<trace id>-<parent id>-<flags>\\r\\n"`` (about 0.3 µs)."""
        pos = self._pos
        if pos + 48 > len(self._hex):
            self._hex = binascii.hexlify(os.urandom(_BLOCK))
            pos = 0
        self._pos = pos + 48
        hx = self._hex
        trace_id = hx[pos : pos + 32]
        parent_id = hx[pos + 32 : pos + 48]
        if trace_id == _ZERO_TRACE or parent_id == _ZERO_PARENT:  # invalid per the spec; 1 in 2**64
            return self.line()
        rate = self.sample_rate
        if rate >= 1.0 or (rate > 0.0 and self._rng.random() < rate):
            return b"traceparent: 00-%b-%b-01\r\n" % (trace_id, parent_id)
        return b"traceparent: 00-%b-%b-00\r\n" % (trace_id, parent_id)

    def next(self) -> tuple[str, str]:
        """A new ``(trace id, traceparent value)`` as text."""
        line = self.line()
        return trace_id_of(line), line[13:-2].decode("ascii")


def trace_id_of(line: bytes) -> str:
    """The trace id of a line made by ``TraceContext.line()`` (``""`` for ``b""``)."""
    return line[16:48].decode("ascii")


def parse_traceparent(value: str) -> tuple[str, str, str] | None:
    """``(trace id, parent id, flags)`` of a well-formed version-00 ``traceparent``, else None."""
    parts = value.strip().split("-")
    if len(parts) != 4:
        return None
    version, trace_id, parent_id, flags = parts
    if version != "00" or len(trace_id) != 32 or len(parent_id) != 16 or len(flags) != 2:
        return None
    hexdigits = "0123456789abcdef"
    if any(c not in hexdigits for c in trace_id + parent_id + flags):
        return None
    if trace_id == "0" * 32 or parent_id == "0" * 16:
        return None
    return trace_id, parent_id, flags


def is_traceparent(value: str) -> bool:
    return parse_traceparent(value) is not None
