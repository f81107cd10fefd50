"""How interval rows hold their figures, in either of the two formats a run may have.

Rows written before issue 9 carry JSON histograms (``hist``, ``ttfb_hist``, ``connect_hist``);
newer rows carry the compact binary form (``hist_bin``, ``ttfb_bin``) and the connect time as
a count and a sum. Every reader goes through these helpers, so old runs keep their reports,
charts and comparisons without a data migration.
"""

from __future__ import annotations

from workers.engine.histogram import Histogram

# The PageInterval columns a reader of whole rows needs, in order (the drill-down's cells,
# portal/runs/results/drilldown.py; finalize reads columns instead, portal/runs/results/columns.py).
PAGE_ROW_FIELDS = (
    "second",
    "label",
    "pages",
    "hits",
    "errors",
    "errors_by_kind",
    "error_samples",
    "bytes_in",
    "bytes_out",
    "hist_bin",
    "hist",
    "ttfb_bin",
    "ttfb_hist",
    "connect_count",
    "connect_sum_us",
    "connect_hist",
)


def histogram(binary, legacy: dict | None) -> Histogram:
    """A row's histogram: the binary form if it has one, else the JSON form, else empty (errors only)."""
    if binary is not None:
        return Histogram.from_bytes(binary)
    return Histogram.from_dict(legacy) if legacy else Histogram()


class Mean:
    """Count and sum of values in µs: all a report reads of connect times (their mean)."""

    __slots__ = ("count", "sum")

    def __init__(self, count: int = 0, total: int = 0):
        self.count, self.sum = count, total

    @classmethod
    def of(cls, count: int, total: int, legacy: dict | None) -> Mean:
        if count or not legacy:
            return cls(count, total)
        h = Histogram.from_dict(legacy)
        return cls(h.count, h.sum)

    def merge(self, other: Mean) -> Mean:
        self.count += other.count
        self.sum += other.sum
        return self

    @property
    def mean(self) -> float:
        return self.sum / self.count if self.count else 0.0


def encode(d: dict | None) -> bytes | None:
    """The binary form of an engine report's histogram dict (None for none)."""
    return Histogram.from_dict(d).to_bytes() if d else None
