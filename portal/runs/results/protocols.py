"""A run's protocol figures (issue 26): hits by protocol, streamed responses and WebSocket sessions.

The engine reports them per label and second beside the page figures (docs/protocols.md): the
hits by protocol (``protocols``), the streams' histograms (``ttfe_hist``, ``gap_hist``,
``events_hist``) and the WebSocket sessions' round trips (``rtt_hist``) and messages
(``ws_sent``, ``ws_received``). They are stored in ``ProtocolInterval`` rows, apart from the page
rows (a plain HTTP/1.1 run writes none), and read here for every place a run's figures go: the
summary (report, API, exports, share pages), thresholds, the live chart and the drill-down.

Percentiles come from merged histograms, as everywhere else.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable

import numpy as np
from django.db.models import Q

from workers.engine.histogram import Histogram

from ..models import PageRollup, ProtocolInterval
from ..summary import ProtocolFigures, ProtocolLatency, ProtocolPage
from . import columns, storage

H1 = "http/1.1"
ROLLUP_S = PageRollup.ROLLUP_S

# The fields a reader of whole rows needs, in order.
ROW_FIELDS = (
    "second",
    "label",
    "hits",
    "protocols",
    "ttfe_bin",
    "gap_bin",
    "events_bin",
    "rtt_bin",
    "ws_sent",
    "ws_received",
)
UPDATE_FIELDS = ["span_s", *ROW_FIELDS[2:]]

# The summary totals a plan's thresholds may judge (analysis.THRESHOLDS), present only when the run has them.
TOTAL_KEYS = ("ttfe_p95_ms", "gap_p95_ms", "rtt_p95_ms", "h2_share_pct")


# --------------------------------------------------------------------------------------
# Writing (the interval writer, portal/runs/results/sink.py)
# --------------------------------------------------------------------------------------


def row_of(run_id: int, shard_no: int, second: int, label: str, stats: dict) -> ProtocolInterval | None:
    """The ProtocolInterval row of one label's engine report for one second, or None when it has nothing
    a page row does not say already (HTTP/1.1 hits only, no stream, no WebSocket session)."""
    protocols = {str(k): int(v) for k, v in (stats.get("protocols") or {}).items() if v}
    stream = stats.get("events_hist")
    ws = stats.get("rtt_hist") is not None or stats.get("ws_sent") or stats.get("ws_received")
    if not stream and not ws and set(protocols) <= {H1}:
        return None
    return ProtocolInterval(
        run_id=run_id,
        shard_no=shard_no,
        second=second,
        span_s=1,
        label=label[:210],
        hits=stats.get("hits", 0),
        protocols=protocols,
        ttfe_bin=storage.encode(stats.get("ttfe_hist")),
        gap_bin=storage.encode(stats.get("gap_hist")),
        events_bin=storage.encode(stream),
        rtt_bin=storage.encode(stats.get("rtt_hist")),
        ws_sent=int(stats.get("ws_sent") or 0),
        ws_received=int(stats.get("ws_received") or 0),
    )


def write(run_id: int, shard_no: int, second: int, labels: dict) -> None:
    """Upserts one shard-second's protocol rows (a report written twice replaces itself)."""
    rows = [r for label, stats in labels.items() if (r := row_of(run_id, shard_no, second, label, stats))]
    if rows:
        ProtocolInterval.objects.bulk_create(
            rows,
            update_conflicts=True,
            unique_fields=["run", "second", "shard_no", "label"],
            update_fields=UPDATE_FIELDS,
        )


# --------------------------------------------------------------------------------------
# Merging
# --------------------------------------------------------------------------------------


def _hist(blob) -> Histogram:
    return Histogram.from_bytes(blob) if blob is not None else Histogram()


class Cell:
    """One label's protocol figures over some seconds, all shards merged."""

    __slots__ = ("hits", "protocols", "ttfe", "gap", "events", "rtt", "ws_sent", "ws_received")

    def __init__(self) -> None:
        self.hits = self.ws_sent = self.ws_received = 0
        self.protocols: dict[str, int] = {}
        self.ttfe, self.gap, self.events, self.rtt = Histogram(), Histogram(), Histogram(), Histogram()

    def add_row(self, hits, protocols, ttfe, gap, events, rtt, sent, received) -> None:
        self.hits += hits
        for k, n in (protocols or {}).items():
            self.protocols[k] = self.protocols.get(k, 0) + n
        for h, blob in ((self.ttfe, ttfe), (self.gap, gap), (self.events, events), (self.rtt, rtt)):
            if blob is not None:
                h.merge(Histogram.from_bytes(blob))
        self.ws_sent += sent
        self.ws_received += received

    def add(self, other: Cell) -> Cell:
        self.hits += other.hits
        for k, n in other.protocols.items():
            self.protocols[k] = self.protocols.get(k, 0) + n
        self.ttfe.merge(other.ttfe)
        self.gap.merge(other.gap)
        self.events.merge(other.events)
        self.rtt.merge(other.rtt)
        self.ws_sent += other.ws_sent
        self.ws_received += other.ws_received
        return self

    @property
    def has_websocket(self) -> bool:
        return bool(self.rtt.count or self.ws_sent or self.ws_received)

    def protocol_hits(self, all_hits: int | None) -> dict[str, int]:
        """Hits by protocol; ``all_hits`` (the label's hits in the same seconds, from its page rows) adds the
        HTTP/1.1 hits of the seconds without a protocol row."""
        counts = dict(self.protocols)
        if all_hits is not None and all_hits > self.hits:
            counts[H1] = counts.get(H1, 0) + all_hits - self.hits
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


HIST_NAMES = ("ttfe", "gap", "events", "rtt")


def merge_rows(rows: Iterable[tuple], key_of: Callable[[tuple], Hashable | None]) -> dict:
    """The rows (tuples ending with ROW_FIELDS[2:]: hits … ws_received) merged into a Cell per ``key_of(row)``
    (None: the row is left out), a chunk of rows at a time.

    Why: decoding and merging each row's histograms into Python ``Histogram`` objects one by one cost about
    4.5 s per hour of a 20-label run at finalize. Here each chunk's histograms of one kind are decoded at once
    by numpy and summed per key with one ``bincount`` (``columns.decode``, ``columns.Groups``, as the page rows
    are read); the Python work per row is its counters and its (small) protocol counts. A key's histograms stay
    dense (open) from chunk to chunk while few keys are open, and are closed into its cell once more than
    ``columns.MAX_OPEN_GROUPS`` of a kind are, so memory is bounded whatever the run's length.
    """
    cells: dict = {}
    groups = {name: columns.Groups() for name in HIST_NAMES}
    chunk: list[tuple] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) == columns.ROWS_PER_CHUNK:
            _merge_chunk(chunk, key_of, cells, groups)
            chunk = []
    if chunk:
        _merge_chunk(chunk, key_of, cells, groups)
    for name, g in groups.items():
        _close(g, cells, name)
    return cells


def _close(groups: columns.Groups, cells: dict, name: str) -> None:
    for key in list(groups.open):
        getattr(cells[key], name).merge(groups.close(key))


def _merge_chunk(chunk: list[tuple], key_of, cells: dict, groups: dict[str, columns.Groups]) -> None:
    local: dict = {}  # key → its position among this chunk's keys
    at = np.full(len(chunk), -1, np.int64)
    blobs: tuple[list, ...] = ([], [], [], [])
    for i, row in enumerate(chunk):
        hits, protocols, ttfe, gap, events, rtt, sent, received = row[-8:]
        key = key_of(row)
        if key is None:
            ttfe = gap = events = rtt = None
        else:
            k = local.get(key)
            if k is None:
                k = local[key] = len(local)
                if key not in cells:
                    cells[key] = Cell()
            at[i] = k
            cell = cells[key]
            cell.hits += hits
            if protocols:
                counts = cell.protocols
                for name, n in protocols.items():
                    counts[name] = counts.get(name, 0) + n
            cell.ws_sent += sent
            cell.ws_received += received
        blobs[0].append(ttfe)
        blobs[1].append(gap)
        blobs[2].append(events)
        blobs[3].append(rtt)
    keys = list(local)
    for name, column in zip(HIST_NAMES, blobs, strict=True):
        if all(b is None for b in column):
            continue
        g = groups[name]
        g.add(keys, at, columns.decode(column))
        if len(g.open) > columns.MAX_OPEN_GROUPS:
            _close(g, cells, name)


def read(run, where: Q | None = None, labels: set[str] | None = None, *, with_span: bool = False):
    """The run's protocol rows (per second, or per roll-up span) as value tuples in ROW_FIELDS order
    (``with_span``: ``span_s`` after the label)."""
    rows = ProtocolInterval.objects.filter(run=run)
    if where is not None:
        rows = rows.filter(where)
    if labels is not None:
        rows = rows.filter(label__in=labels)
    fields = (*ROW_FIELDS[:2], "span_s", *ROW_FIELDS[2:]) if with_span else ROW_FIELDS
    return rows.order_by("second", "shard_no", "label").values_list(*fields).iterator(chunk_size=2000)


def in_windows(windows: list[dict], *, rolled: bool = True) -> Q:
    """Rows of the seconds of ``windows``; with ``rolled``, also the rolled-up rows (a minute) that overlap one,
    as the drill-down counts a rolled-up minute where it overlaps."""
    q = Q()
    for w in windows:
        q |= Q(second__gte=w["start"], second__lt=w["end"])
        if rolled:
            q |= Q(span_s__gt=1, second__lt=w["end"], second__gt=w["start"] - PageRollup.ROLLUP_S)
    return q


# --------------------------------------------------------------------------------------
# Figures
# --------------------------------------------------------------------------------------


def _ms(h: Histogram) -> ProtocolLatency | None:
    if not h.count:
        return None
    q = h.percentiles((50, 90, 95, 99))
    return {
        "p50": round(q[50] / 1000, 2),
        "p90": round(q[90] / 1000, 2),
        "p95": round(q[95] / 1000, 2),
        "p99": round(q[99] / 1000, 2),
        "max": round(h.max / 1000, 2),
        "mean": round(h.mean / 1000, 2),
    }


def _p95(h: Histogram) -> float | None:
    return round(h.percentile(95) / 1000, 2) if h.count else None


def _share(counts: dict[str, int], protocol: str) -> float | None:
    whole = sum(counts.values())
    return round(100.0 * counts.get(protocol, 0) / whole, 2) if whole else None


def label_figures(label: str, cell: Cell, *, hits: int | None, seconds: int) -> ProtocolPage:
    """One label's protocol figures as the summary, the API and the exports give them."""
    counts = cell.protocol_hits(hits)
    stream = None
    if cell.events.count:
        e = cell.events
        stream = {
            "responses": e.count,
            "ttfe_ms": _ms(cell.ttfe),
            "gap_ms": _ms(cell.gap),
            "events": {
                "total": e.sum,
                "per_response": {"mean": round(e.mean, 1), "min": e.min, "max": e.max},
            },
        }
    websocket = None
    if cell.has_websocket:
        websocket = {
            "round_trips": cell.rtt.count,
            "rtt_ms": _ms(cell.rtt),
            "sent": cell.ws_sent,
            "received": cell.ws_received,
            "sent_per_s": round(cell.ws_sent / seconds, 3) if seconds else None,
            "received_per_s": round(cell.ws_received / seconds, 3) if seconds else None,
        }
    return {
        "label": label,
        "protocols": counts,
        "h2_share_pct": _share(counts, "h2"),
        "stream": stream,
        "websocket": websocket,
    }


def totals_of(cell: Cell, *, hits: int | None, seconds: int | None = None) -> ProtocolFigures:
    """The threshold-able totals of merged cells (only those the run has: a run without streams has no TTFE);
    with ``seconds``, also the WebSocket messages per second (sent + received) where it has sessions (a level's
    figure in the capacity table, no threshold's)."""
    out: ProtocolFigures = {}
    if cell.ttfe.count:
        out["ttfe_p95_ms"] = _p95(cell.ttfe)
    if cell.gap.count:
        out["gap_p95_ms"] = _p95(cell.gap)
    if cell.rtt.count:
        out["rtt_p95_ms"] = _p95(cell.rtt)
    counts = cell.protocol_hits(hits)
    if cell.protocols and sum(counts.values()):
        out["h2_share_pct"] = _share(counts, "h2")
    if seconds and cell.has_websocket:
        out["ws_messages_per_s"] = round((cell.ws_sent + cell.ws_received) / seconds, 3)
    return out


def summary_of(run, windows: list[dict], label_hits: dict[str, int], window_hits: list[int]) -> dict | None:
    """The summary's ``protocols`` section over the measurement windows, or None for a run without
    protocol rows (HTTP/1.1 only, or recorded before issue 26, or imported).

    ``label_hits``: each label's hits in the windows, ``window_hits``: all hits per window (from the
    page rows), so the HTTP/1.1 hits of seconds without a protocol row are counted.
    Returns ``{"pages": [...per label...], "totals": {...}, "window_totals": [{...} per window]}``.
    """

    def window_of(row: tuple) -> tuple[str, int] | None:
        second, label, span_s = row[:3]
        # the first window the row overlaps (a per-second row is in one; a rolled-up minute may start before it)
        w = next((i for i, win in enumerate(windows) if win["start"] - ROLLUP_S < second < win["end"]), None)
        if w is None or (span_s == 1 and second < windows[w]["start"]):
            return None
        return label, w

    cells: dict[tuple[str, int], Cell] = merge_rows(read(run, in_windows(windows), with_span=True), window_of)
    if not cells:
        return None
    per_label: dict[str, Cell] = {}
    per_window = [Cell() for _ in windows]
    for (label, w), cell in cells.items():
        per_label.setdefault(label, Cell()).add(cell)
        per_window[w].add(cell)
    whole = Cell()
    for cell in per_window:
        whole.add(cell)
    seconds = sum(w["seconds"] for w in windows)
    stream = whole.events
    return {
        "pages": [
            label_figures(label, cell, hits=label_hits.get(label), seconds=seconds)
            for label, cell in sorted(per_label.items())
        ],
        "totals": {
            **totals_of(whole, hits=sum(window_hits)),
            "protocols": whole.protocol_hits(sum(window_hits)),
            "streams": stream.count,
            "events": stream.sum if stream.count else 0,
            "ttfe_ms": _ms(whole.ttfe),
            "gap_ms": _ms(whole.gap),
            "rtt_ms": _ms(whole.rtt),
            "ws_sent": whole.ws_sent,
            "ws_received": whole.ws_received,
            "ws_messages_per_s": round((whole.ws_sent + whole.ws_received) / seconds, 3) if seconds else None,
        },
        "window_totals": [
            totals_of(cell, hits=h, seconds=w["seconds"])
            for cell, h, w in zip(per_window, window_hits, windows, strict=True)
        ],
    }


def range_figures(
    run, lo: int, hi: int, label_hits: dict[str, int], labels: set[str] | None = None
) -> list[ProtocolPage]:
    """Per-label protocol figures of the seconds [lo, hi) (the drill-down's range)."""
    return spans_figures(run, [(lo, hi)], label_hits, labels)


def spans_figures(
    run, spans: list[tuple[int, int]], label_hits: dict[str, int], labels: set[str] | None = None
) -> list[ProtocolPage]:
    """Per-label protocol figures of the seconds of ``spans`` ([(from, to), …]); a rolled-up row counts in the
    span its first second is in. ``label_hits``: each label's hits in those seconds (for the HTTP/1.1 hits of
    seconds without a protocol row), {} to count the recorded protocols only."""
    where = in_windows([{"start": a, "end": b} for a, b in spans])
    per_label: dict[str, Cell] = merge_rows(read(run, where, labels), lambda row: row[1])
    seconds = max(sum(b - a for a, b in spans), 1)
    return [
        label_figures(label, cell, hits=label_hits.get(label), seconds=seconds)
        for label, cell in sorted(per_label.items())
    ]


def page_hits(run, spans: list[tuple[int, int]], labels: set[str] | None = None) -> dict[str, int]:
    """Each label's hits in the seconds of ``spans``, from its page rows (per second, or rolled up)."""
    from django.db.models import Sum

    from ..models import PageInterval

    windows = [{"start": a, "end": b} for a, b in spans]
    per_second, rolled = in_windows(windows, rolled=False), in_windows(windows)
    hits: dict[str, int] = {}
    for model, where in ((PageInterval, per_second), (PageRollup, rolled)):
        rows = model.objects.filter(where, run=run)
        if labels is not None:
            rows = rows.filter(label__in=labels)
        for label, n in rows.values_list("label").annotate(n=Sum("hits")).values_list("label", "n"):
            hits[label] = hits.get(label, 0) + (n or 0)
    return hits


# --------------------------------------------------------------------------------------
# Chart series (the run page's "Streams and WebSocket" chart)
# --------------------------------------------------------------------------------------

MAX_POINTS = 720


def live_bucket(run) -> int:
    """Seconds per chart point: the same for every poll of a run (from its planned duration), so ``since`` works."""
    bucket = 1
    while (getattr(run, "planned_duration", 0) or 0) / bucket > MAX_POINTS:
        bucket *= 2
    return bucket


def series(run, *, since: int | None = None, bucket: int | None = None) -> dict:
    """Per time bucket: p95 time to first event, p95 gap between events, p95 WebSocket round trip
    (ms), WebSocket messages per second (sent + received), and the h2 share of the protocol rows' hits.

    ``{"bucket": s, "t": [...], "ttfe_p95": [...], "gap_p95": [...], "rtt_p95": [...],
    "ws_msgs_per_s": [...], "h2_pct": [...]}``; empty lists for a run without protocol rows.
    """
    if bucket is None:
        bucket = live_bucket(run)
        if ProtocolInterval.objects.filter(run=run, span_s__gt=1).exists():  # rolled up: minutes at best
            bucket = max(bucket, PageRollup.ROLLUP_S)
    where = Q(second__gte=since // bucket * bucket) if since is not None else None
    cells: dict[int, Cell] = merge_rows(read(run, where), lambda row: row[0] // bucket * bucket)
    t = sorted(cells)
    out = {"bucket": bucket, "t": t, "ttfe_p95": [], "gap_p95": [], "rtt_p95": [], "ws_msgs_per_s": [], "h2_pct": []}
    for start in t:
        c = cells[start]
        out["ttfe_p95"].append(_p95(c.ttfe))
        out["gap_p95"].append(_p95(c.gap))
        out["rtt_p95"].append(_p95(c.rtt))
        out["ws_msgs_per_s"].append(round((c.ws_sent + c.ws_received) / bucket, 2) if c.has_websocket else None)
        out["h2_pct"].append(_share(c.protocols, "h2") if c.protocols else None)
    return out


# --------------------------------------------------------------------------------------
# Roll-up (portal/runs/results/rollup.py)
# --------------------------------------------------------------------------------------


def rollup(run_id: int, lo: int, hi: int) -> int:
    """Merges the per-second protocol rows of seconds [lo, hi) into one row per label and ROLLUP_S span
    (shard 0), replacing them; returns the rows read. Rows already rolled up are merged again unchanged."""
    span = PageRollup.ROLLUP_S
    rows = ProtocolInterval.objects.filter(run_id=run_id, second__gte=lo, second__lt=hi)
    read_rows = 0

    def minute_of(row: tuple) -> tuple[int, str]:
        nonlocal read_rows
        read_rows += 1
        return row[0] // span * span, row[1]

    ordered = rows.order_by("second", "shard_no", "label").values_list(*ROW_FIELDS).iterator(chunk_size=2000)
    cells: dict[tuple[int, str], Cell] = merge_rows(ordered, minute_of)
    if not read_rows:
        return 0
    rows.delete()
    ProtocolInterval.objects.bulk_create(
        [
            ProtocolInterval(
                run_id=run_id,
                shard_no=0,
                second=start,
                span_s=span,
                label=label,
                hits=c.hits,
                protocols=c.protocols,
                ttfe_bin=c.ttfe.to_bytes() if c.ttfe.count else None,
                gap_bin=c.gap.to_bytes() if c.gap.count else None,
                events_bin=c.events.to_bytes() if c.events.count else None,
                rtt_bin=c.rtt.to_bytes() if c.rtt.count else None,
                ws_sent=c.ws_sent,
                ws_received=c.ws_received,
            )
            for (start, label), c in sorted(cells.items())
        ]
    )
    return read_rows


# --------------------------------------------------------------------------------------
# Exports (protocols.csv)
# --------------------------------------------------------------------------------------

CSV_COLUMNS = (
    "label",
    "protocols",
    "h2_share_pct",
    "streams",
    "ttfe_p50_ms",
    "ttfe_p95_ms",
    "ttfe_p99_ms",
    "ttfe_max_ms",
    "gap_p50_ms",
    "gap_p95_ms",
    "gap_p99_ms",
    "events",
    "events_per_response_mean",
    "events_per_response_max",
    "ws_round_trips",
    "rtt_p50_ms",
    "rtt_p95_ms",
    "rtt_p99_ms",
    "rtt_max_ms",
    "ws_sent",
    "ws_received",
    "ws_sent_per_s",
    "ws_received_per_s",
)


def csv_row(p: dict) -> dict:
    """One label's figures (``label_figures``) as a flat CSV row; empty cells for what it does not have."""
    stream, ws = p.get("stream") or {}, p.get("websocket") or {}
    ttfe, gap, rtt = stream.get("ttfe_ms") or {}, stream.get("gap_ms") or {}, ws.get("rtt_ms") or {}
    events = stream.get("events") or {}
    return {
        "label": p["label"],
        "protocols": " ".join(f"{k}={n}" for k, n in (p.get("protocols") or {}).items()),
        "h2_share_pct": p.get("h2_share_pct"),
        "streams": stream.get("responses"),
        "ttfe_p50_ms": ttfe.get("p50"),
        "ttfe_p95_ms": ttfe.get("p95"),
        "ttfe_p99_ms": ttfe.get("p99"),
        "ttfe_max_ms": ttfe.get("max"),
        "gap_p50_ms": gap.get("p50"),
        "gap_p95_ms": gap.get("p95"),
        "gap_p99_ms": gap.get("p99"),
        "events": events.get("total"),
        "events_per_response_mean": (events.get("per_response") or {}).get("mean"),
        "events_per_response_max": (events.get("per_response") or {}).get("max"),
        "ws_round_trips": ws.get("round_trips"),
        "rtt_p50_ms": rtt.get("p50"),
        "rtt_p95_ms": rtt.get("p95"),
        "rtt_p99_ms": rtt.get("p99"),
        "rtt_max_ms": rtt.get("max"),
        "ws_sent": ws.get("sent"),
        "ws_received": ws.get("received"),
        "ws_sent_per_s": ws.get("sent_per_s"),
        "ws_received_per_s": ws.get("received_per_s"),
    }


# --------------------------------------------------------------------------------------
# Prometheus (portal/runs/exporter.py): live runs' stream and WebSocket gauges per label
# --------------------------------------------------------------------------------------


class LiveGauges:
    """Per label, over the exporter's window of complete seconds: p95 time to first event and gap between events,
    p95 WebSocket round trip (seconds), WebSocket messages per second by direction. Labels without such figures
    have no sample."""

    def __init__(self, label_names: list[str], window: str):
        from prometheus_client.core import GaugeMetricFamily

        self.ttfe = GaugeMetricFamily(
            "plimsoll_page_ttfe_p95_seconds",
            f"Streamed responses' time to first event, p95, {window}",
            labels=label_names,
        )
        self.gap = GaugeMetricFamily(
            "plimsoll_page_stream_gap_p95_seconds", f"Gaps between streamed events, p95, {window}", labels=label_names
        )
        self.rtt = GaugeMetricFamily(
            "plimsoll_page_ws_rtt_p95_seconds", f"WebSocket message round trips, p95, {window}", labels=label_names
        )
        self.messages = GaugeMetricFamily(
            "plimsoll_page_ws_messages_per_second",
            f"WebSocket messages per second by direction (sent, received) {window}",
            labels=[*label_names, "direction"],
        )

    def add(self, run, run_labels: list[str], lo: int, hi: int, seconds: int) -> None:
        cells: dict[str, Cell] = merge_rows(read(run, Q(second__gte=lo, second__lte=hi)), lambda row: row[1])
        for label, c in sorted(cells.items()):
            key = [*run_labels, label]
            if c.ttfe.count:
                self.ttfe.add_metric(key, c.ttfe.percentile(95) / 1e6)
            if c.gap.count:
                self.gap.add_metric(key, c.gap.percentile(95) / 1e6)
            if c.rtt.count:
                self.rtt.add_metric(key, c.rtt.percentile(95) / 1e6)
            if c.has_websocket:
                self.messages.add_metric([*key, "sent"], c.ws_sent / seconds)
                self.messages.add_metric([*key, "received"], c.ws_received / seconds)

    def __iter__(self):
        return iter((self.ttfe, self.gap, self.rtt, self.messages))
