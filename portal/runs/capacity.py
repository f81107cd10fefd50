"""A steps run's capacity: the highest level within the thresholds, the knee, the scalability model, and their words.

Moved out of ``analysis.py`` (issue 27); ``portal.runs.analysis`` re-exports its public names.
"""

import math

from portal import formatting
from portal.stats import analysis as history_analysis
from portal.stats import scalability

from .models import Run
from .summary import LEVEL_FIGURE_COLUMNS

CAPACITY_THRESHOLDS = {
    "apd_ms": ("max_apd_ms", "APD"),
    "p95_ms": ("max_p95_ms", "p95"),
    "error_rate_pct": ("max_error_rate_pct", "Error rate"),
    "min_pages_per_s": ("min_pages_per_s", "Pages/s"),
    # Streams, WebSocket sessions and protocols (issue 26): a level breaks on them too, where the plan sets them.
    "ttfe_p95_ms": ("max_ttfe_p95_ms", "Time to first event p95"),
    "gap_p95_ms": ("max_gap_p95_ms", "Gap between events p95"),
    "rtt_p95_ms": ("max_rtt_p95_ms", "WebSocket round trip p95"),
    "min_h2_share_pct": ("min_h2_share_pct", "HTTP/2 share"),
}
# The level's figure each threshold reads, where it is not the threshold's own key.
_FIGURE = {"min_pages_per_s": "pages_per_s", "min_h2_share_pct": "h2_share_pct"}
# The window totals of those figures (present only when the run has them: portal.runs.results.protocols).
PROTOCOL_FIGURES = ("ttfe_p95_ms", "gap_p95_ms", "rtt_p95_ms", "h2_share_pct")
# What a level's row carries of them: those, and the WebSocket messages per second (summary.LEVEL_FIGURES).
LEVEL_FIGURES = tuple(f.key for f in LEVEL_FIGURE_COLUMNS)
_THRESHOLD_NAME = {attr: name for attr, name in CAPACITY_THRESHOLDS.values()}
_THRESHOLD_KEY = {attr: key for key, (attr, _) in CAPACITY_THRESHOLDS.items()}


def _fmt_ms(value: float) -> str:
    """412 ms, 1.00 s, 1.42 s: as every page writes a duration (portal.formatting)."""
    return formatting.duration_ms(value)


def _fmt_rate(value: float) -> str:
    return formatting.rate(value)


def _fmt_limit(key: str, value: float) -> str:
    if key.endswith("_ms"):
        return _fmt_ms(value)
    if key.endswith("_pct"):
        return formatting.percent(value)
    return f"{_fmt_rate(value)} pages/s"


def _breaks(level: dict, limits: dict) -> str:
    """ "APD breaks 1 s (1.42 s) and the error rate breaks 0.1 % (2.3 %)" for one failing level."""
    parts = []
    for attr in level["broken_fields"]:
        key = _THRESHOLD_KEY[attr]
        limit = _fmt_limit(key, limits[key])
        actual = level.get(_FIGURE.get(key, key))
        if actual is None:
            measured = "no successful page" if key in ("apd_ms", "p95_ms") else "none measured"
        else:
            measured = _fmt_limit(key, actual)
        if key == "min_pages_per_s":
            parts.append(f"pages/s fall below {limit} ({measured})")
        elif key == "min_h2_share_pct":
            parts.append(f"the HTTP/2 share falls below {limit} ({measured})")
        elif key == "error_rate_pct":
            parts.append(f"the error rate breaks {limit} ({measured})")
        else:
            parts.append(f"{_THRESHOLD_NAME[attr]} breaks {limit} ({measured})")
    return " and ".join(parts)


def capacity_of(run: Run, windows: list[dict], limits: dict) -> dict:
    """The capacity and knee of a steps run, from each level's measured window.

    A level's users are the plan's (what the level asked for), not the active users
    counted, so a level reads as "40 users" even if a shard was lost. Levels whose
    window was cut short still count: they are what the run measured, and the table
    shows their note. With two levels of the same users the capacity is not defined
    (which one would hold?), so the report says so instead.
    """
    planned = [lv.users for lv in getattr(run.engine_profile, "levels", None) or []]
    rows = []
    for w in windows:
        t = w["totals"]
        index = w.get("index")
        users = planned[index] if index is not None and index < len(planned) else t["users"]
        rows.append(
            {
                "label": w["label"],
                "users": users,
                "start": w["start"],
                "end": w["end"],
                "note": w["note"],
                "apd_ms": t["apd_ms"],
                "p95_ms": t["p95_ms"],
                "pages_per_s": t["pages_per_s"],
                "error_rate_pct": t["error_rate_pct"],
                # a level's stream, WebSocket and protocol figures, when the run has them
                **{key: t[key] for key in LEVEL_FIGURES if key in t},
            }
        )
    users = [r["users"] for r in rows]
    if len(set(users)) != len(users) or min(users) <= 0:
        return {
            "analysed": False,
            "reason": "Two levels have the same number of users, so the highest level that holds is not defined.",
            "levels": rows,
        }

    thresholds = history_analysis.Thresholds(
        **{attr: limits.get(key) for key, (attr, _) in CAPACITY_THRESHOLDS.items()}
    )
    levels = [
        history_analysis.Level(
            users=r["users"],
            # No successful page: no latency, and a latency threshold cannot hold on nothing (as judge).
            apd_ms=math.inf if r["apd_ms"] is None else r["apd_ms"],
            p95_ms=math.inf if r["p95_ms"] is None else r["p95_ms"],
            pages_per_s=r["pages_per_s"],
            error_rate_pct=r["error_rate_pct"],
            **{key: r.get(key) for key in PROTOCOL_FIGURES},
        )
        for r in rows
    ]
    result = history_analysis.capacity(levels, thresholds)
    for r in rows:
        r["broken_fields"] = result.broken.get(r["users"], [])
        r["broken"] = [_THRESHOLD_NAME[f] for f in r["broken_fields"]]
        r["held"] = not r["broken"]
        r["capacity"] = r["users"] == result.capacity_users
        r["knee"] = r["users"] == result.knee_users
    rows.sort(key=lambda r: r["users"])
    held_level = next((r for r in rows if r["capacity"]), None)
    failed_level = next((r for r in rows if r["users"] == result.first_failure_users), None)
    out = {
        "analysed": True,
        # A capacity search ends "done" with this answer (run_finalize); later comparisons read a
        # lower capacity than the baseline's as a regression, so the figures are kept with it.
        "search": bool((run.analysis_settings or {}).get("capacity_search")),
        "capacity_users": result.capacity_users,
        "capacity_pages_per_s": held_level["pages_per_s"] if held_level else None,
        "capacity_apd_ms": held_level["apd_ms"] if held_level else None,
        "next_level_broke": _breaks(failed_level, limits) if failed_level else None,
        "first_failure_users": result.first_failure_users,
        "knee_users": result.knee_users,
        "broken": {str(u): [_THRESHOLD_NAME[a] for a in attrs] for u, attrs in result.broken.items()},
        "thresholds_set": any(limits.get(key) is not None for key in CAPACITY_THRESHOLDS),
        "levels": rows,
    }
    out["sentence"] = _capacity_sentence(out, limits)
    out["model"] = scalability_model(rows, open_model=getattr(run.engine_profile, "open_model", False))
    for r, predicted in zip(rows, out["model"].get("predicted_pages_per_s") or [], strict=False):
        r["predicted_pages_per_s"] = predicted
    if out["search"]:
        out["answer"] = _search_answer(out)
    for r in rows:
        del r["broken_fields"]
    return out


def scalability_model(levels: list[dict], *, open_model: bool = False) -> dict:
    """The Universal Scalability Law fitted to a steps run's levels, as the summary keeps it.

    Closed model (users loop iterations): N is each level's users. Open model (arrivals):
    N is the concurrency by Little's law, pages/s × APD. Keys ``lambda``, ``sigma``,
    ``kappa``, ``peak_users``, ``peak_pages_per_s`` and ``r2`` are None when there is no
    model; ``reason`` then says why in words. ``ceiling_pages_per_s`` and ``ceiling_users`` are set
    only when there is none because the levels rose to a flat top (a pool, a fixed number of slots).
    """
    measured = [lv for lv in levels if lv["pages_per_s"] is not None]
    if open_model:
        n = [scalability.littles_law(lv["pages_per_s"], (lv["apd_ms"] or 0) / 1000) for lv in measured]
    else:
        n = [float(lv["users"]) for lv in measured]
    x = [lv["pages_per_s"] for lv in measured]
    m = scalability.fit(n, x)
    top = max(n, default=0.0)

    def r(value, digits=4):
        return None if value is None else round(value, digits)

    out = {
        "fitted": m.fitted,
        # Levels that never saturated: no σ, κ or peak to print, but a comparison may say "σ fell to about 0".
        "linear": not m.fitted and m.lam is not None and m.r2 is not None and m.r2 >= scalability.MIN_R2,
        "reason": m.reason,
        "concurrency": "Little's law (pages/s × APD)" if open_model else "users",
        "lambda": r(m.lam) if m.fitted else None,
        "sigma": r(m.sigma, 5) if m.fitted else None,
        "kappa": r(m.kappa, 7) if m.fitted else None,
        "lambda_ci": [r(v) for v in m.lam_ci] if m.fitted else None,
        "sigma_ci": [r(v, 5) for v in m.sigma_ci] if m.fitted else None,
        "kappa_ci": [r(v, 7) for v in m.kappa_ci] if m.fitted else None,
        "peak_users": r(m.peak_users, 1),
        "peak_pages_per_s": r(m.peak_throughput, 2),
        # No model because the levels show a sharp ceiling: the throughput measured at it, and from which level.
        "ceiling_pages_per_s": r(m.ceiling, 2),
        "ceiling_users": r(m.ceiling_users, 1),
        "r2": r(m.r2),
        "levels": [
            {"n": round(ni, 2), "measured_pages_per_s": xi, "predicted_pages_per_s": round(pi, 2)}
            for ni, xi, pi in zip(n, x, m.predicted, strict=False)
        ],
        "predicted_pages_per_s": [round(p, 2) for p in m.predicted] if m.fitted else [],
        "curve": scalability.curve(m, top),
        "last_level": top,
        "sentence": scalability.interpretation(m, top),
    }
    return out


def _search_answer(cap: dict) -> str:
    """A capacity search's answer: "Capacity: 40 users, 190 pages/s; at 60 users APD breaks 1 s (1.5 s)"."""
    if cap["capacity_users"] is None:
        return f"No capacity found: even the first level, {cap['first_failure_users']} users, broke its thresholds."
    words = f"Capacity: {cap['capacity_users']} users, {_fmt_rate(cap['capacity_pages_per_s'])} pages/s"
    if cap["first_failure_users"] is None:
        top = cap["levels"][-1]["users"]
        return words + f"; every level held, so the capacity is at least {top} users: add higher levels to find it."
    return words + f"; at {cap['first_failure_users']} users {cap['next_level_broke']}."


def _capacity_sentence(cap: dict, limits: dict) -> str:
    levels = cap["levels"]
    top = levels[-1]["users"]
    by_users = {r["users"]: r for r in levels}
    if not cap["thresholds_set"]:
        words = (
            f"The plan sets no thresholds, so every level counts as held, up to {top} users; "
            "set thresholds on the plan to find the capacity."
        )
    elif cap["capacity_users"] is None:
        first = by_users[cap["first_failure_users"]]
        words = f"Even the lowest level, {first['users']} users, breaks its thresholds: {_breaks(first, limits)}."
    elif cap["first_failure_users"] is None:
        words = f"Holds every level within its thresholds, up to {top} users."
    else:
        first = by_users[cap["first_failure_users"]]
        words = (
            f"Holds {cap['capacity_users']} users within its thresholds; "
            f"at {first['users']} users {_breaks(first, limits)}."
        )
    knee = history_analysis.knee_sentence([(r["users"], r["pages_per_s"] or 0.0) for r in levels], cap["knee_users"])
    return f"{words} {knee}"
