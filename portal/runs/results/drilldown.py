"""A run seen closer: one page's (or all pages') series, the figures of a time range, its distribution.

The run page's drill-down (click a page in the report's table) and its zoom (drag over a
chart) read ``page_detail``; so does the comparison's overlay (``distribution``). Everything
is computed from the stored per-label rows of the range asked for: ``PageInterval`` (per
second and shard; a live run's and a recent run's) and ``PageRollup`` (per minute, all shards;
a run rolled up after PLIMSOLL_ROLLUP_AFTER), so a range's figures are those of its rows, never
an average of averages.

**Downsampling.** A series sends at most ``MAX_POINTS`` points whatever the range's length:
each point is a bucket of whole seconds. Its APD and percentiles come from the bucket's merged
histogram; besides, the bucket keeps the *extremes of its seconds* — the highest per-second
APD (``apd_max_ms``), the highest page duration (``max_ms``) and the lowest and highest pages/s
(``pages_per_s_min``, ``pages_per_s_max``) — so a one-second stall in a 12-hour run still shows
as a spike (or a drop to zero) on a chart of 2,000 points instead of being averaged away.
"""

from __future__ import annotations

import math
from collections import defaultdict

from django.db.models import Q

from portal.projects.models import trace_url
from workers.engine.histogram import Histogram

from ..analysis import cut_windows, distribution_of, last_second
from ..models import PageInterval, PageRollup, Run, SlowTrace
from ..summary import ProtocolPage, RunSummary
from . import protocols, storage

MAX_POINTS = 2000
"""At most this many points per series: a few thousand, whatever the run's (or range's) length."""

MAX_LABEL = 210

SLOWEST_SHOWN = 10
"""Trace context: the drill-down lists this many of a range's slowest requests (each a second's slowest)."""


class RangeError(ValueError):
    """A range or label that cannot be read; its message says why (answered as a 400)."""


def _rollup_values():
    return ("second", "span_s", "label", "pages", "hits", "errors", "errors_by_kind", "error_samples", "bytes_in",
            "hist_bin", "ttfb_bin", "connect_count", "connect_sum_us")  # fmt: skip


class _Cell:
    """One row of either table, decoded: what a second (or a rolled-up minute) of a label holds."""

    __slots__ = (
        "second",
        "span",
        "pages",
        "hits",
        "errors",
        "by_kind",
        "samples",
        "bytes_in",
        "hist",
        "ttfb",
        "connect",
    )

    @classmethod
    def of_interval(cls, v: tuple) -> _Cell:
        c = cls()
        s, _label, c.pages, c.hits, c.errors, by_kind, samples, c.bytes_in, _out, hb, hj, tb, tj, cn, cs, cj = v
        c.second, c.span, c.by_kind, c.samples = s, 1, by_kind or {}, samples or {}
        c.hist, c.ttfb, c.connect = storage.histogram(hb, hj), storage.histogram(tb, tj), storage.Mean.of(cn, cs, cj)
        return c

    @classmethod
    def of_rollup(cls, v: tuple) -> _Cell:
        c = cls()
        c.second, c.span, _label, c.pages, c.hits, c.errors, by_kind, samples, c.bytes_in, hb, tb, cn, cs = v
        c.by_kind, c.samples = by_kind or {}, samples or {}
        c.hist, c.ttfb, c.connect = storage.histogram(hb, None), storage.histogram(tb, None), storage.Mean(cn, cs)
        return c


def cells(run: Run, label: str | None, since: int, until: int):
    """The rows of ``label`` (None: every label) in [since, until), in order of seconds, decoded one at a time.

    Rolled-up minutes come first where both exist (a roll-up deletes the seconds it took,
    so a second is in one table or the other).
    """
    rollups = PageRollup.objects.filter(run=run, second__lt=until, second__gt=since - PageRollup.ROLLUP_S)
    intervals = PageInterval.objects.filter(run=run, second__gte=since, second__lt=until)
    if label is not None:
        rollups, intervals = rollups.filter(label=label), intervals.filter(label=label)
    rolled = rollups.order_by("second", "label").values_list(*_rollup_values()).iterator(chunk_size=2000)
    fresh = intervals.order_by("second", "shard_no", "label").values_list(*storage.PAGE_ROW_FIELDS)
    # Both streams are in order of seconds: merge them so a reader sees one ordered stream.
    a = next(rolled, None)
    for v in fresh.iterator(chunk_size=2000):
        while a is not None and a[0] <= v[0]:
            yield _Cell.of_rollup(a)
            a = next(rolled, None)
        yield _Cell.of_interval(v)
    while a is not None:
        yield _Cell.of_rollup(a)
        a = next(rolled, None)


class _Acc:
    """Sums over some cells: what a range's figures and a bucket's point are made of."""

    def __init__(self):
        self.pages = self.hits = self.errors = self.bytes_in = 0
        self.hist, self.ttfb, self.connect = Histogram(), Histogram(), storage.Mean()
        self.by_kind: dict[str, int] = defaultdict(int)
        self.samples: dict[str, str] = {}

    def add(self, c: _Cell) -> None:
        self.pages += c.pages
        self.hits += c.hits
        self.errors += c.errors
        self.bytes_in += c.bytes_in
        self.hist.merge(c.hist)
        self.ttfb.merge(c.ttfb)
        self.connect.merge(c.connect)
        for kind, n in c.by_kind.items():
            self.by_kind[kind] += n
        for kind, sample in c.samples.items():
            self.samples.setdefault(kind, sample)


def _ms(us: float, count: int) -> float | None:
    return round(us / 1000, 2) if count else None


def figures(acc: _Acc, seconds: int) -> dict:
    """A range's figures, named as a run summary's pages are (apd_ms, p95_ms, pages_per_s, …)."""
    h = acc.hist
    return {
        "seconds": seconds,
        "pages": acc.pages,
        "hits": acc.hits,
        "errors": acc.errors,
        "error_rate_pct": round(100.0 * acc.errors / acc.pages, 3) if acc.pages else 0.0,
        "pages_per_s": round(acc.pages / seconds, 3) if seconds else 0.0,
        "hits_per_s": round(acc.hits / seconds, 3) if seconds else 0.0,
        "bytes_per_s": round(acc.bytes_in / seconds, 1) if seconds else 0.0,
        "apd_ms": _ms(h.mean, h.count),
        "min_ms": _ms(h.min, h.count),
        "max_ms": _ms(h.max, h.count),
        **{f"p{q}_ms": _ms(h.percentile(q), h.count) for q in (50, 90, 95, 99)},
        "ttfb_ms": _ms(acc.ttfb.mean, acc.ttfb.count),
        "connect_ms": _ms(acc.connect.mean, acc.connect.count),
    }


def bucket_for(span: int, resolution: int = 1) -> int:
    """Seconds per point so that ``span`` seconds make at most MAX_POINTS points (a multiple of ``resolution``)."""
    bucket = max(1, math.ceil(span / MAX_POINTS))
    return math.ceil(bucket / resolution) * resolution


class _Bucketer:
    """Per-second cells in, buckets out; each bucket keeps its seconds' extremes (see the module's docstring)."""

    KEYS = ("apd_ms", "apd_min_ms", "apd_max_ms", "p50_ms", "p95_ms", "p99_ms", "max_ms", "pages_per_s",
            "pages_per_s_min", "pages_per_s_max", "errors_per_s", "ttfb_ms", "connect_ms")  # fmt: skip

    def __init__(self, since: int, until: int, bucket: int):
        self.since, self.until, self.bucket = since, until, bucket
        self.out = {"bucket_s": bucket, "t": [], **{k: [] for k in self.KEYS}}
        self._start: int | None = None
        self._acc = _Acc()
        self._seconds: dict[int, list[float]] = {}  # second → [pages, µs, count, span] of the open bucket

    def _flush(self) -> None:
        if self._start is None:
            return
        start, acc, out = self._start, self._acc, self.out
        n = min(self.bucket, self.until - start)
        per_second_pages, per_second_apd = [], []
        covered = 0
        for pages, us, count, span in self._seconds.values():
            covered += span
            per_second_pages.append(pages / span)
            if count:
                per_second_apd.append(us / count / 1000)
        if covered < n:
            per_second_pages.append(0.0)  # a second without any row: nothing completed then
        h = acc.hist
        out["t"].append(start)
        out["apd_ms"].append(_ms(h.mean, h.count))
        out["apd_min_ms"].append(round(min(per_second_apd), 2) if per_second_apd else None)
        out["apd_max_ms"].append(round(max(per_second_apd), 2) if per_second_apd else None)
        for q in (50, 95, 99):
            out[f"p{q}_ms"].append(_ms(h.percentile(q), h.count))
        out["max_ms"].append(_ms(h.max, h.count))
        out["pages_per_s"].append(round(acc.pages / n, 3))
        out["pages_per_s_min"].append(round(min(per_second_pages), 3))
        out["pages_per_s_max"].append(round(max(per_second_pages), 3))
        out["errors_per_s"].append(round(acc.errors / n, 3))
        out["ttfb_ms"].append(_ms(acc.ttfb.mean, acc.ttfb.count))
        out["connect_ms"].append(_ms(acc.connect.mean, acc.connect.count))
        self._acc, self._seconds = _Acc(), {}

    def add(self, c: _Cell) -> None:
        start = self.since + max(0, c.second - self.since) // self.bucket * self.bucket
        if start != self._start:
            # Buckets without a row between two with rows: nothing completed; they are points too.
            if self._start is not None:
                self._flush()
                for empty in range(self._start + self.bucket, start, self.bucket):
                    self._empty(empty)
            else:
                for empty in range(self.since, start, self.bucket):
                    self._empty(empty)
            self._start = start
        self._acc.add(c)
        cell = self._seconds.setdefault(c.second, [0, 0, 0, c.span])
        cell[0] += c.pages
        cell[1] += c.hist.sum
        cell[2] += c.hist.count

    def _empty(self, start: int) -> None:
        self._start = start
        self._flush()

    def result(self) -> dict:
        last = self._start
        self._flush()
        for empty in range((last + self.bucket) if last is not None else self.since, self.until, self.bucket):
            self._empty(empty)
        return self.out


def _int(value: str | None, name: str) -> int | None:
    if value is None or value == "":
        return None
    if not (value.isascii() and value.isdigit() and len(value) <= 9):
        raise RangeError(f"{name} must be a whole number of seconds (0 or more)")
    return int(value)


def parse_range(params) -> tuple[str | None, int | None, int | None]:
    """(label, from, to) of a request's ``page``, ``from`` and ``to``; RangeError when one is malformed."""
    label = params.get("page")
    if label is not None and (len(label) > MAX_LABEL or "\x00" in label):
        raise RangeError(f"page must be a page name of at most {MAX_LABEL} characters")
    since, until = _int(params.get("from"), "from"), _int(params.get("to"), "to")
    if since is not None and until is not None and until <= since:
        raise RangeError("to must be after from")
    return label or None, since, until


def window_distribution(run: Run, label: str | None = None) -> dict:
    """Only the distribution over the measurement windows (the report's chart on load).

    A finished run's summary keeps the one of all pages (computed at finalize from the same
    merged histogram as its totals), so opening the report of a 12-hour soak reads no rows for it.
    """
    stored = RunSummary.of(run).distribution if not run.is_active and label is None else None
    if stored is None:
        stored = distribution_of(window_histogram(run, label))
    return {"page": label, "distribution": stored, "range": {"of": "measurement window"}}


def slowest_requests(run: Run, label: str | None, windows: list[tuple[int, int]], *, links: bool = True) -> list[dict]:
    """The slowest requests kept with their W3C trace ids (``SlowTrace``) in ``windows``, slowest first.

    Each second of each shard keeps its slowest page per label (workers/engine/runner.py), so the
    list holds the range's maximum and the seconds nearest to it: the p99 neighbourhood. With
    ``links``, each has the environment's trace URL filled in (empty without a template).
    """
    if not windows:
        return []
    rows = SlowTrace.objects.filter(run=run)
    if label is not None:
        rows = rows.filter(label=label)
    in_windows = Q()
    for a, b in windows:
        in_windows |= Q(second__gte=a, second__lt=b)
    rows = rows.filter(in_windows).order_by("-ms", "second", "label")[:SLOWEST_SHOWN]
    template = run.environment.trace_url_template if links and run.environment_id else ""
    return [
        {
            "second": r.second,
            "page": r.label,
            "ms": round(r.ms, 2),
            "trace_id": r.trace_id,
            "url": trace_url(template, r.trace_id),
        }
        for r in rows
    ]


def page_detail(
    run: Run,
    *,
    label: str | None = None,
    since: int | None = None,
    until: int | None = None,
    trace_links: bool = True,
) -> dict:
    """One page's (or, without ``label``, all pages') series, figures, distribution and errors.

    The series covers [since, until) (default: the whole run). The figures, the distribution
    and the errors cover that range when one is given, else the run's measurement windows —
    the seconds its report's figures cover, so the drill-down's figures equal the report's.
    ``slowest`` lists the slowest requests of those seconds with their trace ids (and, with
    ``trace_links``, links built from the environment's trace URL template).
    """
    last = last_second(run)
    end = (last + 1) if last is not None else 0
    lo = 0 if since is None else min(since, end)
    hi = end if until is None else min(until, max(end, lo))
    ranged = since is not None or until is not None
    windows = [(lo, hi)] if ranged else [(w["start"], w["end"]) for w in cut_windows(run, last)]
    rolled_up = PageRollup.objects.filter(run=run).exists()
    bucketer = _Bucketer(lo, hi, bucket_for(hi - lo, PageRollup.ROLLUP_S if rolled_up else 1))
    chosen = _Acc()
    read_from = min([lo, *(w[0] for w in windows)])
    read_to = max([hi, *(w[1] for w in windows)])
    for c in cells(run, label, read_from, read_to):
        # A rolled-up minute counts where it overlaps (its seconds are no longer told apart).
        if c.second < hi and lo < c.second + c.span:
            bucketer.add(c)
        if any(c.second < b and a < c.second + c.span for a, b in windows):
            chosen.add(c)
    seconds = sum(b - a for a, b in windows)
    errors = sorted(
        ({"kind": k, "count": n, "sample": chosen.samples.get(k, "")} for k, n in chosen.by_kind.items()),
        key=lambda e: -e["count"],
    )
    return {
        "page": label,
        "range": {"from": lo, "to": hi, "of": "range" if ranged else "measurement window"},
        "resolution_s": PageRollup.ROLLUP_S if rolled_up else 1,
        "series": bucketer.result() if hi > lo else _Bucketer(0, 0, 1).out,
        "figures": figures(chosen, seconds),
        "distribution": distribution_of(chosen.hist),
        "errors": errors,
        "slowest": slowest_requests(run, label, windows, links=trace_links),
        "windows": [[a, b] for a, b in windows] if not ranged else [],
        # Streams, WebSocket sessions and protocols of the same seconds (issue 26): [] for pages without any.
        "protocols": _protocols(run, label, windows),
    }


def _protocols(run: Run, label: str | None, windows: list[tuple[int, int]]) -> list[ProtocolPage]:
    labels = None if label is None else {label}
    if not protocols.ProtocolInterval.objects.filter(run=run).exists():
        return []
    return protocols.spans_figures(run, windows, protocols.page_hits(run, windows, labels), labels)


def window_histogram(run: Run, label: str | None = None) -> Histogram:
    """The merged page-duration histogram of the run's measurement windows (of one page, or all)."""
    windows = [(w["start"], w["end"]) for w in cut_windows(run, last_second(run))]
    h = Histogram()
    for c in cells(run, label, windows[0][0], windows[-1][1]):
        if any(c.second < b and a < c.second + c.span for a, b in windows):
            h.merge(c.hist)
    return h
