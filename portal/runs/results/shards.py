"""The shards' per-second rows (``ShardInterval``) read for the analysis: as numpy columns for a finalize,
and as a live chart's early buckets from the shards' running totals (issue 9).
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np
from django.db import connection

from ..models import Run, RunShard, ShardInterval

_SHARD_FIELDS = (
    "second",
    "active_users",
    "iterations_started",
    "iterations_completed",
    "iterations_dropped",
    "loop_lag_p99_ms",
    "cpu_pct",
    "pages",
    "errors",
    "latency_sum_us",
    "latency_count",
)
_SHARD_NULLABLE = ("loop_lag_p99_ms", "cpu_pct")  # float columns, NaN where the row has NULL
_ShardRow = namedtuple("_ShardRow", _SHARD_FIELDS)


class ShardSeconds:
    """The shards' per-second rows as numpy columns (``_SHARD_FIELDS``): a 48 h run has 172,800
    rows per shard, which as Python tuples took 60 MB of a finalize's memory (issue 9).

    Iterating yields light named tuples a chunk at a time (None where a nullable column is NULL),
    for code that reads a row at a time; the heavy paths use the columns.
    """

    def __init__(self, columns: dict[str, np.ndarray]):
        self.c = columns

    @classmethod
    def empty(cls) -> ShardSeconds:
        return cls({f: np.zeros(0, np.float64 if f in _SHARD_NULLABLE else np.int64) for f in _SHARD_FIELDS})

    @classmethod
    def concat(cls, parts: list[ShardSeconds]) -> ShardSeconds:
        if not parts:
            return cls.empty()
        return cls({f: np.concatenate([p.c[f] for p in parts]) for f in _SHARD_FIELDS})

    def __len__(self) -> int:
        return len(self.c["second"])

    def select(self, mask: np.ndarray) -> ShardSeconds:
        return ShardSeconds({f: v[mask] for f, v in self.c.items()})

    def __iter__(self):
        for lo in range(0, len(self), 5000):
            cols = []
            for f in _SHARD_FIELDS:
                part = self.c[f][lo : lo + 5000].tolist()
                if f in _SHARD_NULLABLE:
                    part = [None if v != v else v for v in part]  # NaN is NULL
                cols.append(part)
            yield from map(_ShardRow._make, zip(*cols, strict=True))

    def per_second(self, field: str, end: int) -> np.ndarray:
        """``field`` summed over the shards for each second in [0, end) (rows at or past ``end`` left out)."""
        keep = self.c["second"] < end
        return np.bincount(self.c["second"][keep], weights=self.c[field][keep], minlength=end)[:end]


def shard_rows(run: Run, since: int | None = None) -> ShardSeconds:
    """The run's ShardInterval rows as numpy columns, read 5,000 at a time."""
    rows = ShardInterval.objects.filter(run=run)
    if since is not None:
        rows = rows.filter(second__gte=since)
    parts, chunk = [], []

    def flush():
        if chunk:
            cols = list(zip(*chunk, strict=True))
            parts.append(
                ShardSeconds(
                    {
                        f: np.array(
                            [np.nan if v is None else v for v in col] if f in _SHARD_NULLABLE else col,
                            np.float64 if f in _SHARD_NULLABLE else np.int64,
                        )
                        for f, col in zip(_SHARD_FIELDS, cols, strict=True)
                    }
                )
            )
            chunk.clear()

    for row in rows.values_list(*_SHARD_FIELDS).iterator(chunk_size=5000):
        chunk.append(row)
        if len(chunk) == 5000:
            flush()
    flush()
    return ShardSeconds.concat(parts)


# A first load whose boundary rows are missing for more (shard, second) pairs than this (a shard
# lost for hours) sums the rows instead of looking up each pair's latest row.
EARLY_LOOKUPS_MAX = 50


def early_buckets(run: Run, bucket: int, *, before: int) -> dict[int, tuple[int, ...]]:
    """Per chart bucket of the seconds before ``before``: pages, errors, latency sum and count, users
    and dropped iterations, in a number of row reads that does not grow with the run's length.

    Each shard's row holds running totals (``ShardInterval.pages_total`` …), so a bucket's sums are
    the difference between the totals at its last second and at the previous bucket's last, summed
    over the shards: about two rows per shard per bucket (at most MAX_POINTS buckets) whatever the
    run's length. The users are the larger of the bucket's first and last seconds' (summed over the
    shards): its peak whenever users only rise or only fall within it (ramps, steps, a steady hold);
    a spike shorter than a bucket shows only in the finished run's chart, which is exact.

    Rows without running totals (written before they existed) are summed by the database instead
    (``early_buckets_summed``), as are runs whose shards miss too many boundary rows.
    """
    starts = list(range(0, before, bucket))
    if not starts:
        return {}
    ends = [min(b + bucket, before) - 1 for b in starts]
    wanted = sorted({*starts, *ends})
    totals = ("pages_total", "errors_total", "latency_sum_total", "latency_count_total", "dropped_total")
    rows = ShardInterval.objects.filter(run=run, second__in=wanted).values_list(
        "shard_no", "second", "active_users", *totals
    )
    at: dict[tuple[int, int], tuple] = {}  # (shard, second) → (users, *totals)
    for shard_no, second, users, *sums in rows:
        at[shard_no, second] = (users, *sums)
    shards = sorted(set(RunShard.objects.filter(run=run).values_list("shard_no", flat=True)) | {k[0] for k in at})
    # The running totals at each bucket's last second: that second's row, or the shard's latest before it.
    missing = [(n, e) for n in shards for e in ends if (n, e) not in at]
    if len(missing) > EARLY_LOOKUPS_MAX:
        return early_buckets_summed(run, bucket, before=before)
    cumulative = {key: value[1:] for key, value in at.items()}
    for shard_no, end in missing:
        latest = (
            ShardInterval.objects.filter(run=run, shard_no=shard_no, second__lte=end)
            .order_by("-second")
            .values_list(*totals)
            .first()
        )
        cumulative[shard_no, end] = latest or (0,) * len(totals)
    if any(v is None for key in cumulative for v in cumulative[key]):
        return early_buckets_summed(run, bucket, before=before)
    out = {}
    previous = {n: (0,) * len(totals) for n in shards}
    for first, last in zip(starts, ends, strict=True):
        sums = [0] * len(totals)
        for n in shards:
            now = cumulative[n, last]
            sums = [s + a - b for s, a, b in zip(sums, now, previous[n], strict=True)]
            previous[n] = now
        users = max(sum(at.get((n, second), (0,))[0] for n in shards) for second in (first, last))
        pages, errors, total_us, count, dropped = sums
        out[first] = (pages, errors, total_us, count, users, dropped)
    return out


def early_buckets_summed(run: Run, bucket: int, *, before: int) -> dict[int, tuple[int, ...]]:
    """``_early_buckets`` summed by the database from the shards' per-second rows (each second over the
    shards, then each bucket: at most MAX_POINTS rows come back, but every row is read). The users are
    the bucket's peak second."""
    table = ShardInterval._meta.db_table
    sql = (
        "SELECT second / %s, SUM(pages), SUM(errors), SUM(us), SUM(n), MAX(users), SUM(dropped) FROM ("
        "SELECT second, SUM(pages) AS pages, SUM(errors) AS errors, SUM(latency_sum_us) AS us, "
        "SUM(latency_count) AS n, SUM(active_users) AS users, SUM(iterations_dropped) AS dropped "
        f"FROM {table} WHERE run_id = %s AND second >= 0 AND second < %s GROUP BY second"
        ") AS per_second GROUP BY second / %s"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [bucket, run.id, before, bucket])
        return {int(b) * bucket: tuple(int(v or 0) for v in rest) for b, *rest in cursor.fetchall()}
