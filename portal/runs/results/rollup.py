"""The roll-up: per-second label rows merged into coarser spans (PageRollup), while a run is live and after it."""

import logging
import math
from datetime import timedelta

import numpy as np
from django.conf import settings
from django.db import transaction
from django.db.models import Max, Min
from django.utils import timezone

from workers.engine.histogram import Histogram

from .. import analysis
from ..models import (
    PageInterval,
    PageRollup,
    Run,
    RunFigures,
    ShardInterval,
    SlowTrace,
)
from . import columns, protocols, storage
from .batches import BatchSampler, batch_bounds
from .sink import PAGE_INTERVAL_FIELDS

log = logging.getLogger(__name__)
Status = Run.Status


class _RollupCell:
    """One label's sums over one roll-up span, all shards merged."""

    __slots__ = (
        "pages",
        "hits",
        "errors",
        "by_kind",
        "samples",
        "bytes_in",
        "bytes_out",
        "hist",
        "ttfb",
        "connect",
        "span",
        "seconds",
    )

    def __init__(self, span: int = 0):
        self.span = span
        self.seconds: bytes | None = None
        self.pages = self.hits = self.errors = self.bytes_in = self.bytes_out = 0
        self.by_kind: dict[str, int] = {}
        self.samples: dict[str, str] = {}
        self.hist, self.ttfb, self.connect = Histogram(), Histogram(), storage.Mean()

    def add(self, row) -> None:
        self.pages += row.pages
        self.hits += row.hits
        self.errors += row.errors
        self.bytes_in += row.bytes_in
        self.bytes_out += row.bytes_out
        for kind, n in row.by_kind.items():
            self.by_kind[kind] = self.by_kind.get(kind, 0) + n
        for kind, sample in row.samples.items():
            self.samples.setdefault(kind, sample)
        self.hist.merge(row.hist)
        self.ttfb.merge(row.ttfb)
        self.connect.merge(row.connect)

    def row(self, run_id: int, second: int, label: str) -> PageRollup:
        return PageRollup(
            run_id=run_id,
            second=second,
            span_s=self.span,
            label=label,
            pages=self.pages,
            hits=self.hits,
            errors=self.errors,
            errors_by_kind=self.by_kind,
            error_samples=self.samples,
            bytes_in=self.bytes_in,
            bytes_out=self.bytes_out,
            hist_bin=self.hist.to_bytes() if self.hist.count else None,
            ttfb_bin=self.ttfb.to_bytes() if self.ttfb.count else None,
            connect_count=self.connect.count,
            connect_sum_us=self.connect.sum,
            seconds_bin=self.seconds,
        )


def pack_seconds(present: np.ndarray, pages: np.ndarray, n: np.ndarray, total_us: np.ndarray) -> bytes:
    """A span's seconds as stored in ``PageRollup.seconds_bin``: per second whether it had a row, its
    pages and its page durations' count (uint32 each), then their sum in µs (int64 each)."""
    small = np.stack([present, pages, n]).astype("<u4")
    return small.tobytes() + np.asarray(total_us, "<i8").tobytes()


def unpack_seconds(blob: bytes, span: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(present, pages, count, sum µs) per second of a span: ``pack_seconds`` read back."""
    small = np.frombuffer(blob, "<u4", 3 * span).astype(np.int64).reshape(3, span)
    total = np.frombuffer(blob, "<i8", span, offset=12 * span).astype(np.int64)
    return small[0].astype(bool), small[1], small[2], total


def _rollup_columns(run: Run, lo: int, hi: int, cuts: list[int] | None = None) -> int:
    """Writes the PageRollup rows of seconds [lo, hi) (whole spans); returns the per-second rows read.

    The rows are read as numpy columns (``columns``): each span's histograms per label are merged
    in bulk, like finalize's; the errors' kinds and samples come from the few rows with errors.

    Spans are whole minutes (ROLLUP_S), or, with ``cuts`` (a live roll-up, ``live_rollup``), minutes
    cut further at those seconds, each row keeping its seconds' pages and durations (``pack_seconds``).
    """
    span = PageRollup.ROLLUP_S
    starts = np.arange(lo // span * span, hi + span, span)
    if cuts is not None:
        starts = np.union1d(starts, np.asarray([c for c in cuts if lo <= c < hi], np.int64))
    labels: dict[str, int] = {}
    names: list[str] = []
    cells: dict[tuple[int, int], _RollupCell] = {}
    hists, ttfbs = columns.Groups(), columns.Groups()
    read = 0
    for _, _, c in columns.chunks(run, labels, since=lo, until=hi, align=span):
        if not c.size:
            continue
        read += c.size
        names.extend(list(labels)[len(names) :])
        seg = np.searchsorted(starts, c.second, side="right") - 1
        key = seg * len(names) + c.label  # each label id < len(names)
        keys, local = columns.local_keys(key)
        cell_keys = [(int(starts[k // len(names)]), k % len(names)) for k in keys]
        sel = local >= 0
        sums = {
            name: np.bincount(local[sel], weights=getattr(c, name)[sel], minlength=len(keys)).astype(np.int64).tolist()
            for name in ("pages", "hits", "errors", "bytes_in", "bytes_out", "connect_count", "connect_sum")
        }
        hists.add(cell_keys, local, c.hist)
        ttfbs.add(cell_keys, local, c.ttfb)
        if cuts is not None:
            _pack_chunk(c, starts, seg, len(names), keys, cell_keys, cells)
        for i, cell_key in enumerate(cell_keys):
            cell = cells.setdefault(cell_key, _RollupCell(_span_of(starts, cell_key[0])))
            cell.pages += sums["pages"][i]
            cell.hits += sums["hits"][i]
            cell.errors += sums["errors"][i]
            cell.bytes_in += sums["bytes_in"][i]
            cell.bytes_out += sums["bytes_out"][i]
            cell.connect.merge(storage.Mean(sums["connect_count"][i], sums["connect_sum"][i]))
    errors = (
        PageInterval.objects.filter(run=run, second__gte=lo, second__lt=hi, errors__gt=0)
        .order_by("second", "shard_no", "label")
        .values_list("second", "label", "errors_by_kind", "error_samples")
    )
    for second, label, by_kind, samples in errors:
        cell = cells[(int(starts[np.searchsorted(starts, second, side="right") - 1]), labels[label])]
        for kind, n in (by_kind or {}).items():
            cell.by_kind[kind] = cell.by_kind.get(kind, 0) + n
        for kind, sample in (samples or {}).items():
            cell.samples.setdefault(kind, sample)
    rows = []
    for (start, label_id), cell in sorted(cells.items()):
        cell.hist, cell.ttfb = hists.close((start, label_id)), ttfbs.close((start, label_id))
        rows.append(cell.row(run.id, start, names[label_id]))
    if rows:
        PageRollup.objects.bulk_create(
            rows, update_conflicts=True, unique_fields=["run", "second", "label"], update_fields=ROLLUP_FIELDS
        )
    return read


def _span_of(starts: np.ndarray, start: int) -> int:
    return int(starts[np.searchsorted(starts, start, side="right")] - start)


def _pack_chunk(c, starts, seg, labels: int, keys, cell_keys, cells) -> None:
    """Each cell's seconds of chunk ``c``, all shards merged, into its ``seconds`` (``pack_seconds``).

    A live roll-up reads a span in one chunk (its minute is whole in it), so a cell's seconds are all here.
    """
    for k, cell_key in zip(keys, cell_keys, strict=True):
        start = cell_key[0]
        span = _span_of(starts, start)
        rows = (seg * labels + c.label) == k
        at = c.second[rows] - start
        present = np.zeros(span, bool)
        present[at] = True
        sums = [
            np.bincount(at, weights=col[rows], minlength=span).astype(np.int64)
            for col in (c.pages, c.hist.n, c.hist.sum)
        ]
        cell = cells.setdefault(cell_key, _RollupCell(span))
        cell.seconds = pack_seconds(present, *sums)


# A roll-up row holds what a per-second page row holds, over a span.
ROLLUP_FIELDS = ["span_s", *PAGE_INTERVAL_FIELDS, "seconds_bin"]


# Spans rolled up per transaction: short enough that SQLite's other writers (live shards) wait
# well under a second, long enough that PostgreSQL does few round trips.
ROLLUP_SPANS_PER_TRANSACTION = 5


def run_rollup(run_id: int) -> int:
    """Rolls a finished run's per-second PageInterval rows up into per-minute PageRollup rows; returns
    the rows rolled up.

    Only a run whose figures are stored (RunFigures) is rolled up: its pages never read the
    per-second label rows again, and the per-second run totals stay on ShardInterval. Each
    chunk of spans is written and its per-second rows deleted in one short transaction, so a
    roll-up that stops halfway leaves every second either rolled up or intact; a repeated one
    goes on where it stopped.
    """
    figures = RunFigures.objects.filter(run_id=run_id, rolled_up_at=None, run__status__in=Run.FINISHED)
    if not figures.exists():
        return 0
    run = Run(id=run_id)
    bounds = PageInterval.objects.filter(run_id=run_id).aggregate(lo=Min("second"), hi=Max("second"))
    rolled = 0
    if bounds["lo"] is not None:
        span = PageRollup.ROLLUP_S
        step = span * ROLLUP_SPANS_PER_TRANSACTION
        for lo in range(bounds["lo"] // span * span, bounds["hi"] + 1, step):
            with transaction.atomic():
                rolled += _rollup_columns(run, lo, lo + step)
                protocols.rollup(run_id, lo, lo + step)
                PageInterval.objects.filter(run_id=run_id, second__gte=lo, second__lt=lo + step).delete()
                _drop_merged(run_id, lo, lo + step)
                _thin_traces(run_id, lo, lo + step)
    _drop_merged(run_id)  # the shards' seconds without label rows
    # The seconds of the spans rolled up while the run was live: only its finalize read them.
    PageRollup.objects.filter(run_id=run_id, seconds_bin__isnull=False).update(seconds_bin=None)
    figures.update(rolled_up_at=timezone.now())
    return rolled


# After the roll-up, each label keeps its slowest requests' trace ids per roll-up span only: a 48 h soak
# of 20 pages keeps ~170,000 rows instead of 3.5 million, and the run's slowest request is always among them.
TRACES_PER_SPAN = 3


def _thin_traces(run_id: int, lo: int, hi: int) -> None:
    """Keeps each label's TRACES_PER_SPAN slowest SlowTrace rows per roll-up span of ``lo``–``hi``."""
    span = PageRollup.ROLLUP_S
    kept: dict[tuple[int, str], list[tuple[float, int]]] = {}
    rows = SlowTrace.objects.filter(run_id=run_id, second__gte=lo, second__lt=hi).values_list(
        "id", "label", "second", "ms"
    )
    drop = []
    for row_id, label, second, ms in rows.iterator(chunk_size=5000):
        slowest = kept.setdefault((second // span, label), [])
        slowest.append((ms, row_id))
        if len(slowest) > TRACES_PER_SPAN:
            slowest.sort(reverse=True)
            drop.append(slowest.pop()[1])
    for i in range(0, len(drop), 5000):
        SlowTrace.objects.filter(id__in=drop[i : i + 5000]).delete()


def _drop_merged(run_id: int, lo: int | None = None, hi: int | None = None) -> None:
    """Clears the shards' merged page durations (only a live chart reads them): about 90 bytes per
    label-second of a 20-page run that a finished run's pages never read again."""
    rows = ShardInterval.objects.filter(run_id=run_id, hist_bin__isnull=False)
    if lo is not None:
        rows = rows.filter(second__gte=lo, second__lt=hi)
    rows.update(hist_bin=None)


def rollup_due(limit: int = 1) -> None:
    """Rolls up runs finished more than PLIMSOLL_ROLLUP_AFTER seconds ago, ``limit`` per call.

    Called by the watchdog: a few runs a tick keeps each tick short, and the backlog after
    an upgrade drains over the following minutes.
    """
    cutoff = timezone.now() - timedelta(seconds=settings.PLIMSOLL_ROLLUP_AFTER)
    due = RunFigures.objects.filter(rolled_up_at=None, run__finished_at__lt=cutoff).order_by("run_id")
    for run_id in list(due.values_list("run_id", flat=True)[:limit]):
        try:
            run_rollup(run_id)
        except Exception:  # the figures are stored; the per-second rows just stay until the next tick
            log.exception("run %s: roll-up failed; its per-second rows are kept", run_id)


def run_figures_store(*, run: Run) -> bool:
    """Stores the chart series and comparison batches of a finished run recorded before they were
    stored at finalize (issue 9); its summary is left as it is. Returns whether it stored them.

    Afterwards the run's pages read only stored figures, and the roll-up may take its rows.
    """
    if run.is_active or RunFigures.objects.filter(run=run).exists():
        return False
    sampler = BatchSampler(run)
    _, series = analysis.summarize_with_series(run, sampler=sampler)
    batches = sampler.result()
    _, created = RunFigures.objects.get_or_create(
        run=run, defaults={"series": series, "batches": [[key, figures] for key, figures in batches.items()]}
    )
    return created


# --------------------------------------------------------------------------------------
# The live roll-up: what the live pages no longer read, rolled up while the run goes on
# --------------------------------------------------------------------------------------


def live_cuts(run: Run) -> list[int]:
    """The seconds where the finalize of ``run`` will begin a group, if the run goes to its plan.

    A span rolled up live must lie in one measurement window, one chart point and one comparison
    batch, so that the finalize merges it whole into the same groups as its seconds: their starts
    for the planned length, give or take ``LIVE_SLACK_S`` seconds (an engine may report a last,
    partial second). A run that ends far from its plan (cancelled, stopped by a threshold) has its
    chart points and batches cut elsewhere: there a span may straddle two, and counts in the one
    of its first second (``docs/operations/results-storage.md``).
    """
    planned = math.ceil(run.planned_duration)
    cuts: set[int] = set()
    for last in range(max(planned - 1 - LIVE_SLACK_S, 0), planned + LIVE_SLACK_S):
        windows = analysis.cut_windows(run, last)
        cuts.update(w[k] for w in windows for k in ("start", "end"))
        bucket = analysis.chart_bucket(last)
        cuts.update(range(0, last + 1, bucket))
        seconds = np.unique(np.concatenate([np.arange(w["start"], w["end"]) for w in windows]))
        cuts.update(int(seconds[i]) for i in batch_bounds(len(seconds))[:-1])
    return sorted(cuts)


LIVE_SLACK_S = 2


def live_rollup(run_id: int, *, limit_s: int = 600) -> int:
    """Rolls up a live run's per-second label rows older than PLIMSOLL_LIVE_ROLLUP_AFTER seconds
    before its shards' last second, up to ``limit_s`` seconds of them; returns the rows rolled up.

    The watchdog calls it every tick (10 s): a run needs a minute of roll-up a minute, so ten minutes
    a tick catch up a backlog (after an upgrade) within minutes and keep each tick short.

    The live pages read only the last minutes per second (the chart's first load its last 2
    minutes, a poll what is new, the exporter its last seconds); the rest is rolled up into
    PageRollup spans that keep each second's pages and page durations (``_rollup_columns`` with
    ``live_cuts``), which the finalize reads as those seconds (``columns.chunks``). The shards'
    merged page durations of those seconds, which only a live chart reads, are cleared too, and
    their slow requests' trace ids thinned as after the run (``_thin_traces``).
    Idempotent: each span is written and its per-second rows deleted in one transaction.
    """
    run = Run.objects.filter(id=run_id, status__in=[Status.RUNNING, Status.CANCELLING]).first()
    if run is None:
        return 0
    lasts = ShardInterval.objects.filter(run=run).values("shard_no").annotate(last=Max("second"))
    if not lasts:
        return 0
    span = PageRollup.ROLLUP_S
    until = (min(r["last"] for r in lasts) + 1 - settings.PLIMSOLL_LIVE_ROLLUP_AFTER) // span * span
    first = PageInterval.objects.filter(run=run, second__lt=until).aggregate(lo=Min("second"))["lo"]
    if first is None:
        return 0
    lo = first // span * span
    until = min(until, lo + max(limit_s // span, 1) * span)
    cuts = live_cuts(run)
    step = span * ROLLUP_SPANS_PER_TRANSACTION
    rolled = 0
    for start in range(lo, until, step):
        end = min(start + step, until)
        with transaction.atomic():
            rolled += _rollup_columns(run, start, end, cuts)
            PageInterval.objects.filter(run=run, second__gte=start, second__lt=end).delete()
            _drop_merged(run.id, start, end)
            _thin_traces(run.id, start, end)
    return rolled


def live_rollup_due() -> None:
    """The live roll-up of every running run (the watchdog's tick, on the bookkeeping queue)."""
    for run_id in Run.objects.filter(status=Status.RUNNING).values_list("id", flat=True):
        try:
            live_rollup(run_id)
        except Exception:  # its per-second rows stay until the next tick (or the roll-up after the run)
            log.exception("run %s: live roll-up failed; its per-second rows are kept", run_id)
