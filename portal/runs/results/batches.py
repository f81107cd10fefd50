"""A run's measurement window cut into batches (the method of batch means), per page and in total.

Finalize stores them (``RunFigures.batches``) from its one pass over the rows; the results
history's comparisons weigh a difference between two runs against the spread of their batches.
"""

from __future__ import annotations

import base64
import bisect
from dataclasses import dataclass, field

import numpy as np
from django.db.models import Max

from workers.engine.histogram import Histogram

from ..analysis import cut_windows
from ..models import PageInterval, Run, RunFigures, ShardInterval
from . import columns, storage

BATCHES = 10
# The figures of each batch (portal.history.comparison.FIGURES, in its order).
BATCH_FIGURES = ("apd_ms", "p95_ms", "pages_per_s", "error_rate_pct")
# The key of a batch result's whole-window totals (pages, errors, seconds, merged histogram).
WINDOW = "window"


def _window_seconds(run: Run) -> np.ndarray:
    """The seconds of the run's measurement windows, cut to what ran, in order (a numpy array: a
    48 h soak has 172,800 of them, which as a list and a dict of positions took 17 MB)."""
    last = [
        PageInterval.objects.filter(run=run).aggregate(s=Max("second"))["s"],
        ShardInterval.objects.filter(run=run).aggregate(s=Max("second"))["s"],
    ]
    last = [s for s in last if s is not None]
    if not last:
        return np.zeros(0, np.int64)
    windows = cut_windows(run, max(last))
    spans = [np.arange(w["start"], w["end"], dtype=np.int64) for w in windows]
    return np.unique(np.concatenate(spans)) if spans else np.zeros(0, np.int64)


def batch_bounds(n: int, batches: int = BATCHES) -> list[int]:
    """Where n consecutive seconds are cut into batches, as analysis.batch_means cuts them.

    With fewer than 2 × `batches` seconds, fewer batches (n // 2, at least 2); one
    second gives one batch. Batch sizes differ by at most one.
    """
    if n <= 0:
        return []
    if n < 2:
        return [0, n]
    k = batches if n >= 2 * batches else max(2, n // 2)
    return [i * n // k for i in range(k + 1)]


@dataclass
class _BatchAcc:
    hist: Histogram = field(default_factory=Histogram)
    pages: int = 0
    errors: int = 0
    apd_sum: float = 0.0  # sum of the per-second APDs (ms) of the batch's seconds with a page
    apd_seconds: int = 0
    # A batch that ``add_columns`` filled keeps only its p95 once closed; its histogram went into
    # the key's window histogram (210 merged histograms as dicts took 32 MB of a finalize).
    closed: bool = False
    p95_ms: float | None = None


def run_batches(run: Run, batches: int = BATCHES) -> dict[str | None, dict[str, list[float | None]]]:
    """A run's batch figures: stored at finalize for a finished run, else computed (``compute_batches``)."""
    if batches == BATCHES and not run.is_active:
        stored = RunFigures.objects.filter(run=run).values_list("batches", flat=True).first()
        if stored is not None:
            return {key: figures for key, figures in stored}
    return compute_batches(run, batches)


def compute_batches(run: Run, batches: int = BATCHES) -> dict[str | None, dict[str, list[float | None]]]:
    """The figures of each batch of a run's measurement window, in total (key None) and per page.

    Per batch: APD = the mean of the per-second APDs (each second's merged histograms;
    the method of batch means), p95 from the batch's merged histogram (percentiles
    are never averaged), pages/s = pages / seconds of the batch (a second without a
    page is a real 0), error rate = errors / pages. A figure without pages is None.
    Rows are read in order of seconds, so memory stays bounded for a soak of days.
    """
    sampler = BatchSampler(run, batches)
    if not len(sampler.seconds):
        return {}
    rows = (
        PageInterval.objects.filter(run=run, second__gte=int(sampler.seconds[0]), second__lte=int(sampler.seconds[-1]))
        .order_by("second")
        .values_list("second", "label", "pages", "errors", "hist_bin", "hist")
    )
    for second, label, pages, errors, hist_bin, hist in rows.iterator(chunk_size=2000):
        if sampler._position(second) is not None:
            sampler.add(second, label, pages, errors, storage.histogram(hist_bin, hist))
    return sampler.result()


class BatchSampler:
    """``compute_batches`` fed one row at a time, in order of seconds (finalize feeds it from its own pass)."""

    def __init__(self, run: Run, batches: int = BATCHES):
        self.seconds = _window_seconds(run)
        self.bounds = batch_bounds(len(self.seconds), batches)
        self.accs: dict[str | None, list[_BatchAcc]] = {}
        self.current: int | None = None
        self.per_second: dict[str | None, list[int]] = {}  # key → [sum µs, count] of the current second
        self.batch: int | None = None  # the batch add_columns is filling, its histograms in groups
        self.groups = columns.Groups()
        self.windows: dict[str | None, Histogram] = {}  # key → its closed batches' histograms merged

    def _position(self, second: int) -> int | None:
        """Where ``second`` is among the window's seconds; None when it is outside them."""
        i = int(np.searchsorted(self.seconds, second))
        return i if i < len(self.seconds) and int(self.seconds[i]) == second else None

    def _flush(self) -> None:
        if self.current is None:
            return
        b = bisect.bisect_right(self.bounds, self._position(self.current)) - 1
        for key, (total_us, count) in self.per_second.items():
            if count:
                acc = self.accs[key][b]
                acc.apd_sum += total_us / count / 1000.0
                acc.apd_seconds += 1
        self.per_second.clear()

    def add_row(self, row) -> None:
        """A decoded row (portal.runs.analysis): one outside the window is skipped."""
        if self._position(row.second) is not None:
            self.add(row.second, row.label, row.pages, row.errors, row.hist)

    def add(self, second: int, label: str, pages: int, errors: int, h: Histogram) -> None:
        if second != self.current:
            self._flush()
            self.current = second
        b = bisect.bisect_right(self.bounds, self._position(second)) - 1
        k = len(self.bounds) - 1
        for key in (None, label):
            acc = self.accs.setdefault(key, [_BatchAcc() for _ in range(k)])[b]
            acc.hist.merge(h)
            acc.pages += pages
            acc.errors += errors
            sums = self.per_second.setdefault(key, [0, 0])
            sums[0] += h.sum
            sums[1] += h.count

    def cuts(self) -> list[int]:
        """The seconds where batches begin: a chunk of rows for ``add_columns`` never spans two batches."""
        return [int(self.seconds[i]) for i in self.bounds[:-1]]

    def add_columns(self, lo: int, hi: int, c, names: list[str]) -> None:
        """The rows of seconds [lo, hi) as columns (``portal.runs.results.columns.Chunk``; ``names``: label by id),
        the same as ``add`` for each row: all in one batch, or none in the window."""
        at = self._position(int(c.second[0])) if c.size else None
        if at is None:
            return
        b = bisect.bisect_right(self.bounds, at) - 1
        k = len(self.bounds) - 1
        if b != self.batch:
            self.close()
            self.batch = b
        # Keys in the order ``add`` meets them: the total, then each page at its first row.
        _, first = np.unique(c.label, return_index=True)
        order = c.label[np.sort(first)].tolist()
        for key in [None, *(names[i] for i in order)]:
            self.accs.setdefault(key, [_BatchAcc() for _ in range(k)])
        labels = len(names)
        pages = np.bincount(c.label, weights=c.pages, minlength=labels).astype(np.int64)
        errors = np.bincount(c.label, weights=c.errors, minlength=labels).astype(np.int64)
        for i in order:
            acc = self.accs[names[i]][b]
            acc.pages += int(pages[i])
            acc.errors += int(errors[i])
        total = self.accs[None][b]
        total.pages += int(pages.sum())
        total.errors += int(errors.sum())
        self.groups.add([(None, b)], np.zeros(c.size, np.int64), c.hist)
        keys, local = columns.local_keys(c.label)
        self.groups.add([(names[i], b) for i in keys], local, c.hist)
        # APD per second per key, added second by second (as ``_flush`` does, for the same sums).
        span = hi - lo
        cell = (c.second - lo) * labels + c.label
        us = np.bincount(cell, weights=c.hist.sum, minlength=span * labels).astype(np.int64).reshape(span, labels)
        n = np.bincount(cell, weights=c.hist.n, minlength=span * labels).astype(np.int64).reshape(span, labels)
        for key, key_us, key_n in [
            (None, us.sum(axis=1), n.sum(axis=1)),
            *((names[i], us[:, i], n[:, i]) for i in order),
        ]:
            acc = self.accs[key][b]
            for total_us, count in zip(key_us.tolist(), key_n.tolist(), strict=True):
                if count:
                    acc.apd_sum += total_us / count / 1000.0
                    acc.apd_seconds += 1

    def close(self) -> None:
        """Ends the batch ``add_columns`` was filling: its merged histograms become Histograms."""
        if self.batch is None:
            return
        for key, b in list(self.groups.open):
            h = self.groups.close((key, b))
            acc = self.accs[key][b]
            acc.closed, acc.p95_ms = True, h.percentile(95) / 1000.0 if h.count else None
            self.windows.setdefault(key, Histogram()).merge(h)
        self.batch = None

    def result(self) -> dict[str | None, dict[str, list[float | None]]]:
        self._flush()
        self.close()
        self.current = None
        out: dict[str | None, dict[str, list[float | None]]] = {}
        for key, batch_accs in self.accs.items():
            figures: dict = {key: [] for key in BATCH_FIGURES}
            window = Histogram().merge(self.windows.get(key) or Histogram())
            for i, acc in enumerate(batch_accs):
                length = self.bounds[i + 1] - self.bounds[i]
                figures["apd_ms"].append(acc.apd_sum / acc.apd_seconds if acc.apd_seconds else None)
                if acc.closed:
                    figures["p95_ms"].append(acc.p95_ms)
                else:
                    figures["p95_ms"].append(acc.hist.percentile(95) / 1000.0 if acc.hist.count else None)
                figures["pages_per_s"].append(acc.pages / length)
                figures["error_rate_pct"].append(100.0 * acc.errors / acc.pages if acc.pages else None)
                window.merge(acc.hist)
            # The whole window of this key, so that several runs' figures can be pooled
            # (portal.history.comparison.pooled_figures).
            figures[WINDOW] = {
                "pages": sum(acc.pages for acc in batch_accs),
                "errors": sum(acc.errors for acc in batch_accs),
                "seconds": len(self.seconds),
                "hist": base64.b64encode(window.to_bytes()).decode("ascii"),
            }
            out[key] = figures
        return out
