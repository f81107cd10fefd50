"""Reads of a run's interval rows for other apps and the run's own pages: whole-run figures per second.

Per-second figures over all pages come from the shards' rows (``ShardInterval``: one per shard and
second, kept per second for the run's life), never from the page rows, which the roll-up takes
(while the run is live, older than PLIMSOLL_LIVE_ROLLUP_AFTER; after it, all of them).
"""

from __future__ import annotations

from django.db.models import Sum

from ..models import PageInterval, ShardInterval


def pages_per_second(run) -> dict[int, int]:
    """Pages per second, all shards and pages: the second's row of each shard holds its pages.

    A run recorded before the shards' rows held them (every row 0) is read from its page rows.
    """
    rows = ShardInterval.objects.filter(run=run).values("second").annotate(p=Sum("pages"))
    out = {r["second"]: r["p"] for r in rows}
    if any(out.values()):
        return out
    rows = PageInterval.objects.filter(run=run).values("second").annotate(p=Sum("pages"))
    return {r["second"]: r["p"] for r in rows} or out


def page_totals(run) -> tuple[int, int]:
    """(pages, errors) summed over the page rows: for runs recorded before the shards' running totals."""
    totals = PageInterval.objects.filter(run=run).aggregate(p=Sum("pages"), e=Sum("errors"))
    return totals["p"] or 0, totals["e"] or 0
