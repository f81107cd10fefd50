"""A mergeable HDR-style histogram of latencies in integer microseconds.

Why not a list of samples: a shard at 20,000 requests/s would keep 72 million
floats an hour, and percentiles over several shards or intervals must come from
*merged* distributions, never from averaging percentiles (DESIGN.md, Latency).
A log-linear histogram keeps every value with a bounded relative error (3
significant digits), merges by adding counts, and stays small: a typical
interval touches a few hundred buckets.

Bucket scheme (log-linear, 1024 sub-buckets per power of two):

- values below 2048 µs have their own bucket (index == value, exact);
- above, ``shift = v.bit_length() - 11`` and ``sub = v >> shift`` (1024..2047),
  so each bucket is ``2**shift`` wide and starts at ``sub << shift``;
  ``index = 2048 + (shift - 1) * 1024 + (sub - 1024)``.

A bucket is at most 1/1024 of its lower bound wide; reporting its midpoint
keeps the relative error under 0.05 %. Values are clamped to [1 µs, 10 min].
``min``, ``max``, ``count`` and the sum (hence ``mean``) are tracked exactly.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

MIN_US = 1
MAX_US = 600_000_000  # 10 minutes: longer than any request timeout we allow
_LINEAR_LIMIT = 2048
_SUB_BUCKETS = 1024
_FORMAT_VERSION = 1
_BINARY_FORMAT = 2


def _put_varint(out: bytearray, value: int) -> None:
    if value < 0:
        raise ValueError("varints are unsigned")
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _get_varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data):
            raise ValueError("binary histogram is truncated")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def bucket_index(us: int) -> int:
    """Bucket index of an (already clamped) value in microseconds."""
    if us < _LINEAR_LIMIT:
        return us
    shift = us.bit_length() - 11
    return _LINEAR_LIMIT + (shift - 1) * _SUB_BUCKETS + ((us >> shift) - _SUB_BUCKETS)


def bucket_value(index: int) -> int:
    """Representative value (the midpoint) of a bucket, in microseconds."""
    if index < _LINEAR_LIMIT:
        return index
    j = index - _LINEAR_LIMIT
    shift = j // _SUB_BUCKETS + 1
    low = (j % _SUB_BUCKETS + _SUB_BUCKETS) << shift
    return low + ((1 << shift) - 1) // 2


class Histogram:
    """Sparse log-linear histogram: ``{bucket index: count}`` plus exact count, sum, min, max."""

    __slots__ = ("_counts", "count", "_sum", "_min", "_max")

    def __init__(self) -> None:
        self._counts: dict[int, int] = {}
        self.count = 0
        self._sum = 0
        self._min = 0
        self._max = 0

    # -- recording ---------------------------------------------------------

    def record(self, us: int | float) -> None:
        """Record one value in microseconds (floats are rounded; clamped to 1 µs..10 min)."""
        v = int(us + 0.5) if isinstance(us, float) else us
        if v < MIN_US:
            v = MIN_US
        elif v > MAX_US:
            v = MAX_US
        if v < _LINEAR_LIMIT:
            i = v
        else:
            shift = v.bit_length() - 11
            i = _LINEAR_LIMIT + (shift - 1) * _SUB_BUCKETS + ((v >> shift) - _SUB_BUCKETS)
        counts = self._counts
        counts[i] = counts.get(i, 0) + 1
        if self.count == 0:
            self._min = self._max = v
        elif v < self._min:
            self._min = v
        elif v > self._max:
            self._max = v
        self.count += 1
        self._sum += v

    def record_many(self, values: Iterable[int | float]) -> None:
        for v in values:
            self.record(v)

    def record_seconds(self, values: Iterable[float]) -> None:
        """``record(s * 1_000_000)`` for each of ``values`` (seconds, floats), in one call (the same arithmetic)."""
        counts = self._counts
        get = counts.get
        count = self.count
        low, high, total = self._min, self._max, self._sum
        for s in values:
            v = int(s * 1_000_000 + 0.5)
            if v < MIN_US:
                v = MIN_US
            elif v > MAX_US:
                v = MAX_US
            if v < _LINEAR_LIMIT:
                i = v
            else:
                shift = v.bit_length() - 11
                i = _LINEAR_LIMIT + (shift - 1) * _SUB_BUCKETS + ((v >> shift) - _SUB_BUCKETS)
            counts[i] = get(i, 0) + 1
            if count == 0:
                low = high = v
            elif v < low:
                low = v
            elif v > high:
                high = v
            count += 1
            total += v
        self.count = count
        self._min, self._max, self._sum = low, high, total

    def merge(self, other: Histogram) -> Histogram:
        """Add ``other``'s counts into this histogram (returns self, for chaining)."""
        if other.count == 0:
            return self
        counts = self._counts
        for i, n in other._counts.items():
            counts[i] = counts.get(i, 0) + n
        if self.count == 0:
            self._min, self._max = other._min, other._max
        else:
            self._min = min(self._min, other._min)
            self._max = max(self._max, other._max)
        self.count += other.count
        self._sum += other._sum
        return self

    # -- reading -----------------------------------------------------------

    @property
    def min(self) -> int:
        """Smallest recorded value (exact, µs); 0 when empty."""
        return self._min

    @property
    def max(self) -> int:
        """Largest recorded value (exact, µs); 0 when empty."""
        return self._max

    @property
    def sum(self) -> int:
        return self._sum

    @property
    def mean(self) -> float:
        """Exact mean (µs) of the clamped values; 0.0 when empty."""
        return self._sum / self.count if self.count else 0.0

    def variance(self) -> float:
        """Sample variance (µs², n − 1 in the denominator) of the recorded values; 0.0 below two values.

        From the buckets' midpoints (exact below 2,048 µs, within 0.05 % above), each clamped to the exact min
        and max, around their own mean: what the summary keeps of a page's durations for the noise of its mean.
        """
        if self.count < 2:
            return 0.0
        mids = [(min(max(bucket_value(i), self._min), self._max), c) for i, c in self._counts.items()]
        mean = sum(m * c for m, c in mids) / self.count
        return sum(c * (m - mean) ** 2 for m, c in mids) / (self.count - 1)

    def percentile(self, q: float) -> int:
        """Value (µs) at percentile ``q`` (0-100): the smallest value with at least q % of samples at or below it.

        Returns 0 when empty. The answer is a bucket midpoint clamped to the
        exact min and max, so ``percentile(0) == min`` and ``percentile(100) == max``.
        """
        if not 0 <= q <= 100:
            raise ValueError(f"percentile must be within 0..100, got {q}")
        if self.count == 0:
            return 0
        rank = max(1, math.ceil(q / 100 * self.count))
        seen = 0
        for i in sorted(self._counts):
            seen += self._counts[i]
            if seen >= rank:
                return min(max(bucket_value(i), self._min), self._max)
        return self._max  # unreachable unless counts are inconsistent

    def percentiles(self, qs: Iterable[float]) -> dict[float, int]:
        """Several percentiles in one pass over the sorted buckets."""
        qs = sorted(qs)
        out: dict[float, int] = {}
        if self.count == 0:
            return dict.fromkeys(qs, 0)
        items = sorted(self._counts.items())
        seen = 0
        pos = 0
        for q in qs:
            rank = max(1, math.ceil(q / 100 * self.count))
            while seen < rank and pos < len(items):
                seen += items[pos][1]
                pos += 1
            value = bucket_value(items[pos - 1][0]) if pos else self._min
            out[q] = min(max(value, self._min), self._max)
        return out

    # -- serialisation -----------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe form: ``{"v": 1, "n", "sum", "min", "max", "b": {"<index>": count}}``."""
        return {
            "v": _FORMAT_VERSION,
            "n": self.count,
            "sum": self._sum,
            "min": self._min,
            "max": self._max,
            "b": {str(i): n for i, n in self._counts.items()},
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Histogram:
        if not isinstance(d, dict) or d.get("v") != _FORMAT_VERSION:
            raise ValueError(f"not a version {_FORMAT_VERSION} histogram dict")
        h = cls()
        counts = {int(i): int(n) for i, n in d["b"].items()}
        if sum(counts.values()) != int(d["n"]):
            raise ValueError("histogram dict is inconsistent: bucket counts do not add up to n")
        h._counts = counts
        h.count = int(d["n"])
        h._sum = int(d["sum"])
        h._min = int(d["min"])
        h._max = int(d["max"])
        return h

    def to_bytes(self) -> bytes:
        """Compact binary form: a format byte, then unsigned LEB128 varints.

        ``n, sum, min, max, buckets`` and, for each non-empty bucket in index order, the
        gap from the previous index and the count. Gaps and counts are small numbers, so
        most take one byte: a per-second page histogram of 50 samples is ~110 bytes
        instead of ~900 as JSON (the store's size budget, issue 9).
        """
        out = bytearray((_BINARY_FORMAT,))
        items = sorted(self._counts.items())
        for v in (self.count, self._sum, self._min, self._max, len(items)):
            _put_varint(out, v)
        previous = 0
        for i, n in items:
            _put_varint(out, i - previous)
            _put_varint(out, n)
            previous = i
        return bytes(out)

    @classmethod
    def from_bytes(cls, data: bytes | memoryview) -> Histogram:
        """The histogram ``to_bytes`` wrote; ValueError for anything else.

        Decoding is the hot loop of a run's finalize (millions of rows), so single-byte
        varints, nearly all of them, take a fast path without a function call.
        """
        data = bytes(data)
        end = len(data)
        if not end or data[0] != _BINARY_FORMAT:
            raise ValueError(f"not a format {_BINARY_FORMAT} binary histogram")
        pos = 1
        fields = []
        for _ in range(5):
            value, pos = _get_varint(data, pos)
            fields.append(value)
        count, total, low, high, buckets = fields
        counts: dict[int, int] = {}
        index = 0
        try:
            for _ in range(buckets):
                gap = data[pos]
                if gap < 0x80:
                    pos += 1
                else:
                    gap, pos = _get_varint(data, pos)
                n = data[pos]
                if n < 0x80:
                    pos += 1
                else:
                    n, pos = _get_varint(data, pos)
                index += gap
                counts[index] = n
        except IndexError:
            raise ValueError("binary histogram is truncated") from None
        if pos != end or sum(counts.values()) != count:
            raise ValueError("binary histogram is inconsistent: trailing bytes or counts that do not add up")
        h = cls()
        h._counts, h.count, h._sum, h._min, h._max = counts, count, total, low, high
        return h

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Histogram):
            return NotImplemented
        return (self.count, self._sum, self._min, self._max, self._counts) == (
            other.count,
            other._sum,
            other._min,
            other._max,
            other._counts,
        )

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        if not self.count:
            return "Histogram(empty)"
        return (
            f"Histogram(n={self.count}, min={self._min}, p50={self.percentile(50)}, "
            f"p99={self.percentile(99)}, max={self._max} µs)"
        )
