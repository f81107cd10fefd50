"""A single-window run's degradation: did throughput fall or APD rise away from the steady state, when, and its words.

Moved out of ``analysis.py`` (issue 27); ``portal.runs.analysis`` re-exports its public names.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

import numpy as np

from portal.common import human_duration
from portal.projects.models import Plan
from portal.stats import analysis as history_analysis
from portal.stats import changepoint

from .capacity import _fmt_ms, _fmt_rate
from .handoffs import handoff_seconds
from .models import Run

if TYPE_CHECKING:
    from .analysis import _PerSecond
    from .results.shards import ShardSeconds


DEGRADATION_SETTINGS = ("drop_pct", "rise_pct", "sustain_s", "steady_s")


def degradation_defaults() -> dict:
    """The plan's defaults, for runs whose analysis settings predate them (or were never copied)."""
    return {name: Plan._meta.get_field(f"degradation_{name}").default for name in DEGRADATION_SETTINGS}


def per_second(rows: _PerSecond, shard_rows: ShardSeconds, end: int) -> tuple[list[float | None], list[float | None]]:
    """Pages/s and APD (ms) for each second in [0, end), shards and pages added up.

    A second some shard reported with no page in it is 0 pages/s, a real stall; a second
    nobody reported is None (no data). APD is None where no page succeeded.
    """
    reported = np.zeros(end, bool)
    reported[: len(rows.reported)] = rows.reported[:end]
    sec = shard_rows.c["second"]
    reported[sec[(sec >= 0) & (sec < end)]] = True
    pages = np.zeros(end, np.int64)
    pages[: len(rows.pages)] = rows.pages[:end]
    throughput = [float(p) if r else None for p, r in zip(pages.tolist(), reported.tolist(), strict=True)]
    total_us, count = np.zeros(end, np.int64), np.zeros(end, np.int64)
    total_us[: len(rows.total_us)], count[: len(rows.count)] = rows.total_us[:end], rows.count[:end]
    apd = [round(us / n / 1000, 3) if n else None for us, n in zip(total_us.tolist(), count.tolist(), strict=True)]
    return throughput, apd


def _median_from(values: list[float | None], lo: int, hi: int) -> float | None:
    part = [v for v in values[lo:hi] if v is not None]
    return statistics.median(part) if part else None


def _round(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


def degradation_of(run: Run, window: dict, rows: _PerSecond, shard_rows: ShardSeconds) -> dict:
    """Did the run leave its steady state during its measurement window, and when?

    Only the window is analysed: ramp-up is not steady yet, and a ramp-down is a drop
    by design. A window shorter than the steady state plus the sustain time cannot say
    anything (there would be no seconds left to see a sustained change), so it is
    reported as not analysed, with the reason.
    """
    settings = {**degradation_defaults(), **((run.analysis_settings or {}).get("degradation") or {})}
    start, end = window["start"], window["end"]
    needed = settings["steady_s"] + settings["sustain_s"]
    base = {"settings": settings, "window": [start, end]}
    if window.get("index") is None:  # cut_windows' stand-in for a run that never reached its window
        return {**base, "analysed": False, "reason": "The run ended before its measurement window began."}
    if end - start < needed:
        return {
            **base,
            "analysed": False,
            "reason": (
                f"The measurement window ({human_duration(end - start)}) is too short to look for degradation: "
                f"it takes the steady state ({human_duration(settings['steady_s'])}) plus a sustained change "
                f"({human_duration(settings['sustain_s'])}). Hold longer, or shorten these on the plan."
            ),
        }
    throughput, apd = per_second(rows, shard_rows, end)
    for second in handoff_seconds(run):  # a handoff's gap is reduced load by design, not degradation
        if second < end:
            throughput[second] = apd[second] = None
    d = history_analysis.degradation(
        throughput,
        apd,
        start=start,
        drop_pct=settings["drop_pct"],
        rise_pct=settings["rise_pct"],
        sustain_s=settings["sustain_s"],
        steady_s=settings["steady_s"],
    )
    out = {
        **base,
        "analysed": True,
        "degraded": d.degraded,
        "kind": d.kind,
        "onset_s": d.onset_s,
        "time_to_degradation_s": None if d.onset_s is None else d.onset_s - start,
        "throughput_onset_s": d.throughput_onset_s,
        "apd_onset_s": d.apd_onset_s,
        "steady_pages_per_s": _round(d.steady_throughput),
        "steady_apd_ms": _round(d.steady_apd_ms),
        "steady_window": list(d.steady_window),
        # What the figures became: the median from the onset to the window's end.
        "degraded_pages_per_s": _round(
            None if d.throughput_onset_s is None else _median_from(throughput, d.throughput_onset_s, end)
        ),
        "degraded_apd_ms": _round(None if d.apd_onset_s is None else _median_from(apd, d.apd_onset_s, end)),
        "oscillation": d.oscillation,
        "excursions": d.excursions,
        "excursions_per_10_min": _round(d.excursions_per_10_min),
        "drift_ms_per_hour": _round(d.drift_ms_per_hour, 1),
        # The same least-squares slope over the window's throughput: a soak judged against its
        # baseline compares both drifts (portal/schedules/soak.py).
        "pages_per_s_drift_per_hour": _round(history_analysis.drift_per_hour(throughput[:end], start), 3),
        # Their standard errors: how sure each slope is (a short window's slope is not).
        "drift_ms_per_hour_se": _round(history_analysis.drift_error_per_hour(apd[:end], start), 2),
        "pages_per_s_drift_per_hour_se": _round(history_analysis.drift_error_per_hour(throughput[:end], start), 3),
    }
    if d.throughput_onset_s is not None and d.throughput_onset_s == d.apd_onset_s:
        out["kind"] = "throughput drop and APD rise"  # both at once: naming one would hide the other
    out["sentence"] = _degradation_sentence(out)
    out.update(began_of(out, throughput, apd, start=start, end=end, sustain_s=settings["sustain_s"]))
    return out


def began_of(d: dict, throughput: list, apd: list, *, start: int, end: int, sustain_s: int) -> dict:
    """When each drift that crossed its limit began (portal.stats.changepoint), from the per-second series.

    The search looks from the window's start up to the second the drift crossed (it began
    by then at the latest), over the seconds up to as long again after it, so the fit sees
    the new level or slope but not what the run did much later. ``began_s``,
    ``began_interval_s`` and ``crossed_s`` describe the earliest drift (``onset_s``).
    """
    found = {}
    for key, series, crossed in (
        ("throughput", throughput, d["throughput_onset_s"]),
        ("apd", apd, d["apd_onset_s"]),
    ):
        if crossed is None:
            continue
        stop = min(end, crossed + max(sustain_s, crossed - start))
        cp = changepoint.find(range(start, stop), series[start:stop], last_break=crossed)
        if cp is not None:
            found[key] = {
                "began_s": cp.began_s,
                "began_interval_s": [cp.low_s, cp.high_s],
                "crossed_s": crossed,
                "shape": cp.shape,
            }
    out = {"change_points": found, "crossed_s": d["onset_s"], "began_s": None, "began_interval_s": None}
    first = min(found.items(), key=lambda kv: (kv[1]["crossed_s"], kv[1]["began_s"]), default=None)
    if first is not None:
        key, cp = first
        out.update(began_s=cp["began_s"], began_interval_s=cp["began_interval_s"], began_metric=key)
        out["began_sentence"] = _began_sentence(key, cp, d)
    return out


def _began_sentence(key: str, cp: dict, d: dict) -> str:
    """ "APD has been rising since 2 min 30 s (between 2 min 20 s and 2 min 40 s), a slope as a leak makes; …"."""
    low, high = cp["began_interval_s"]
    where = human_duration(low) if low == high else f"between {human_duration(low)} and {human_duration(high)}"
    if key == "apd":
        what, limit = "APD", f"{d['settings']['rise_pct']:g} %"
        verb = "jumped up" if cp["shape"] == "step" else "has been rising"
    else:
        what, limit = "Throughput", f"{d['settings']['drop_pct']:g} %"
        verb = "fell at once" if cp["shape"] == "step" else "has been falling"
    since = "at" if cp["shape"] == "step" else "since"
    shape = "a step, as a stall makes" if cp["shape"] == "step" else "a slope, as a leak makes"
    return (
        f"{what} {verb} {since} {human_duration(cp['began_s'])} ({where}), {shape}; "
        f"it crossed the {limit} limit at {human_duration(cp['crossed_s'])}."
    )


def _when(onset: int, start: int) -> str:
    if start > 0:
        return f"at {human_duration(onset)}, {human_duration(onset - start)} after ramp-up"
    return f"{human_duration(onset)} into the run"


def _signed_ms(value: float) -> str:
    return ("+" if value >= 0 else "−") + _fmt_ms(abs(value))


def _degradation_sentence(d: dict) -> str:
    """ "Throughput fell 58 % below its steady 212 pages/s (to 89) at 6 min 10 s, 5 min 10 s after ramp-up; …"."""
    s = d["settings"]
    start = d["window"][0]
    found = []  # (onset, what changed)
    tp = d["throughput_onset_s"], d["steady_pages_per_s"], d["degraded_pages_per_s"]
    if tp[0] is not None and tp[1]:
        fell = 100 * (1 - (tp[2] or 0) / tp[1])
        to = _fmt_rate(tp[2] or 0)
        found.append((tp[0], f"throughput fell {fell:.0f} % below its steady {_fmt_rate(tp[1])} pages/s (to {to})"))
    ap = d["apd_onset_s"], d["steady_apd_ms"], d["degraded_apd_ms"]
    if ap[0] is not None and ap[1]:
        rose = 100 * ((ap[2] or 0) / ap[1] - 1)
        found.append((ap[0], f"APD rose {rose:.0f} % above its steady {_fmt_ms(ap[1])} (to {_fmt_ms(ap[2] or 0)})"))
    found.sort(key=lambda f: f[0])  # the earliest first (stable: throughput first on a tie)
    if len(found) == 2 and found[0][0] == found[1][0]:
        words = f"{found[0][1]} and {found[1][1]} {_when(found[0][0], start)}."
    elif found:
        words = "; ".join(f"{what} {_when(onset, start)}" for onset, what in found) + "."
    else:
        steady = []
        if d["steady_pages_per_s"] is not None:
            tp_steady = _fmt_rate(d["steady_pages_per_s"])
            steady.append(f"throughput stayed within {s['drop_pct']:g} % of its steady {tp_steady} pages/s")
        if d["steady_apd_ms"] is not None:
            steady.append(f"APD within {s['rise_pct']:g} % of its steady {_fmt_ms(d['steady_apd_ms'])}")
        words = (
            "No degradation: "
            + (" and ".join(steady) or "no figures to compare")
            + (f" (a change had to last {human_duration(s['sustain_s'])} to count).")
        )
    words = words[0].upper() + words[1:]
    if d["oscillation"]:
        words += (
            f" Throughput oscillates: it left the ±{history_analysis.OSCILLATION_BAND_PCT:g} % band around its "
            f"steady state {d['excursions']} times ({d['excursions_per_10_min']:.1f} per 10 min)."
        )
    drift = d["drift_ms_per_hour"]
    if drift is not None:
        length = d["window"][1] - start
        # An hour's trend read from a few minutes is an extrapolation, and the reader should know it.
        over = f" (the trend over {human_duration(length)})" if length < 3600 else ""
        words += " APD shows no drift." if abs(drift) < 0.05 else f" APD drifts {_signed_ms(drift)} per hour{over}."
    return words
