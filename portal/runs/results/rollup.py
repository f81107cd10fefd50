"""The roll-up: per-second label rows of finished runs merged into coarser spans (PageRollup)."""

import logging
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
from . import columns, storage
from .batches import BatchSampler
from .sink import PAGE_INTERVAL_FIELDS

log = logging.getLogger(__name__)
Status = Run.Status


class _RollupCell:
    """One label's sums over one roll-up span, all shards merged."""

    __slots__ = ("pages", "hits", "errors", "by_kind", "samples", "bytes_in", "bytes_out", "hist", "ttfb", "connect")

    def __init__(self):
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
            span_s=PageRollup.ROLLUP_S,
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
        )


def _rollup_columns(run: Run, lo: int, hi: int) -> int:
    """Writes the PageRollup rows of seconds [lo, hi) (whole spans); returns the per-second rows read.

    The rows are read as numpy columns (``columns``): each span's histograms per label are merged
    in bulk, like finalize's; the errors' kinds and samples come from the few rows with errors.
    """
    span = PageRollup.ROLLUP_S
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
        key = (c.second // span) * len(names) + c.label  # each label id < len(names)
        keys, local = columns.local_keys(key)
        cell_keys = [(k // len(names) * span, k % len(names)) for k in keys]
        sel = local >= 0
        sums = {
            name: np.bincount(local[sel], weights=getattr(c, name)[sel], minlength=len(keys)).astype(np.int64).tolist()
            for name in ("pages", "hits", "errors", "bytes_in", "bytes_out", "connect_count", "connect_sum")
        }
        hists.add(cell_keys, local, c.hist)
        ttfbs.add(cell_keys, local, c.ttfb)
        for i, cell_key in enumerate(cell_keys):
            cell = cells.setdefault(cell_key, _RollupCell())
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
        cell = cells[(second // span * span, labels[label])]
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


# A roll-up row holds what a per-second page row holds, over a span.
ROLLUP_FIELDS = ["span_s", *PAGE_INTERVAL_FIELDS]


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
                PageInterval.objects.filter(run_id=run_id, second__gte=lo, second__lt=lo + step).delete()
                _drop_merged(run_id, lo, lo + step)
                _thin_traces(run_id, lo, lo + step)
    _drop_merged(run_id)  # the shards' seconds without label rows
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
