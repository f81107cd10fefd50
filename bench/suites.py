"""The three benchmarks. Each returns a plain dict (runs, medians, ratios, verdicts) for the report and the JSON.

Repetitions are interleaved (engine, Locust, wrk, engine, Locust, wrk, …) so that
a slow minute of the shared machine hits every tool alike; ratios are taken
within a repetition, then their median is the headline.
"""

from __future__ import annotations

import contextlib
import statistics
from dataclasses import dataclass
from typing import Any

from . import tools
from . import wire as _wire
from .nginx import Nginx
from .sysinfo import wait_quiet

THROUGHPUT_USERS = 50
THROUGHPUT_GOAL_VS_LOCUST = 5.0
ACCURACY_USERS = 50
ACCURACY_GOAL_P50_MS = 0.3
ACCURACY_GOAL_P99_MS = 1.0
SCALE_GOAL_KB_PER_USER = 20.0
SCALE_GOAL_LOOP_LAG_P99_MS = 10.0


@dataclass
class Context:
    nginx: Nginx
    gen_core: int | None
    locust_bin: str | None
    quiet_wait_s: float

    def before_run(self) -> float:
        return wait_quiet(self.quiet_wait_s, self.nginx.worker_pids())


def median(values: list[float]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _progress(label: str, m: tools.Measure, other_before: float, fields: str) -> None:
    cw = m.extra.get("cpu_window", {})
    status = "" if m.ok else f"  !! {m.problem}"
    if m.ok and m.problem:
        status = f"  ({m.problem})"
    on_gen = cw.get("other_on_gen_core_pct")
    print(
        f"  {label:<22} {m.tool:<7} {fields}  cpu {m.cpu_pct:>3.0f} %  nginx {cw.get('server_cpu_pct', 0):>3.0f} %  "
        f"other {cw.get('other_cpu_pct', 0):>3.0f} %"
        + ("" if on_gen is None else f" ({on_gen:.0f} % on the generator's core)")
        + f"{status}",
        flush=True,
    )


def _record(m: tools.Measure, other_before: float) -> dict[str, Any]:
    d = m.to_dict()
    d["other_cpu_before_pct"] = other_before
    return d


# -- 1. throughput ---------------------------------------------------------------------


def throughput(ctx: Context, *, reps: int, duration: float) -> dict[str, Any]:
    url = ctx.nginx.url("/2k")
    order = ["engine", "locust", "wrk"] if ctx.locust_bin else ["engine", "wrk"]
    tools_list = ", ".join(order)
    print(f"\n== throughput: GET /2k, {THROUGHPUT_USERS} users, no think time, {duration:g} s, {reps} × {tools_list}")
    runs: list[dict[str, Any]] = []
    for rep in range(1, reps + 1):
        row: dict[str, Any] = {"rep": rep}
        for tool in order:
            other = ctx.before_run()
            pids = ctx.nginx.worker_pids()
            if tool == "engine":
                m = tools.engine(url, users=THROUGHPUT_USERS, duration=duration, core=ctx.gen_core, server_pids=pids)
            elif tool == "locust":
                m = tools.locust(
                    ctx.locust_bin,
                    ctx.nginx.url(""),
                    "/2k",
                    users=THROUGHPUT_USERS,
                    duration=duration,
                    core=ctx.gen_core,
                    server_pids=pids,
                )
            else:
                m = tools.wrk(url, connections=THROUGHPUT_USERS, duration=duration, core=ctx.gen_core, server_pids=pids)
            _progress(f"rep {rep}/{reps}", m, other, f"{m.rps:>9,.0f} req/s  errors {m.errors}")
            row[tool] = _record(m, other)
        e = row["engine"]
        for peer in order[1:]:
            p = row[peer]
            ok = e["ok"] and p["ok"] and p["rps"] > 0
            row[f"engine_vs_{peer}"] = round(e["rps"] / p["rps"], 3) if ok else None
        runs.append(row)
    medians = {tool: median([r[tool]["rps"] for r in runs if r[tool]["ok"]]) for tool in order}
    ratios = {f"engine_vs_{peer}": median([r[f"engine_vs_{peer}"] for r in runs]) for peer in order[1:]}
    vs_locust = ratios.get("engine_vs_locust")
    return {
        "settings": {"users": THROUGHPUT_USERS, "duration_s": duration, "reps": reps, "path": "/2k", "order": order},
        "runs": runs,
        "median_rps": medians,
        "median_ratios": ratios,
        "goal": f"engine ≥ {THROUGHPUT_GOAL_VS_LOCUST:g}× Locust FastHttpUser",
        "goal_met": None if vs_locust is None else vs_locust >= THROUGHPUT_GOAL_VS_LOCUST,
    }


# -- 2. accuracy -----------------------------------------------------------------------


def accuracy(
    ctx: Context, *, reps: int, duration: float, wire: bool = False, capture_core: int | None = None
) -> dict[str, Any]:
    """Engine and wrk against /sleep50; with ``wire``, each also once more under a packet capture (ground truth)."""
    url = ctx.nginx.url("/sleep50")
    order = ["engine", "wrk"] + (["engine+wire", "wrk+wire"] if wire else [])
    print(
        f"\n== accuracy: GET /sleep50 (50 ms), {ACCURACY_USERS} users/connections, {duration:g} s, "
        f"{reps} × {', '.join(order)}"
    )
    runs: list[dict[str, Any]] = []
    for rep in range(1, reps + 1):
        row: dict[str, Any] = {"rep": rep}
        for label in order:
            tool, _, captured = label.partition("+")
            other = ctx.before_run()
            pids = ctx.nginx.worker_pids()
            cap = (
                _wire.Capture(ctx.nginx.port, core=capture_core, limit_s=duration + tools.STARTUP_GRACE_S + 60)
                if captured
                else contextlib.nullcontext()
            )
            with cap:
                if tool == "engine":
                    m = tools.engine(url, users=ACCURACY_USERS, duration=duration, core=ctx.gen_core, server_pids=pids)
                else:
                    m = tools.wrk(
                        url, connections=ACCURACY_USERS, duration=duration, core=ctx.gen_core, server_pids=pids
                    )
            fields = f"{m.rps:>7,.0f} req/s  p50 {_f(m.p50_ms)} ms  p99 {_f(m.p99_ms)} ms"
            if not captured:
                _progress(f"rep {rep}/{reps}", m, other, fields)
                row[tool] = _record(m, other)
                continue
            w = cap.analyse()
            fields += f"  wire p50 {_f(w.get('p50_ms'))} p99 {_f(w.get('p99_ms'))}"
            _progress(f"rep {rep}/{reps} captured", m, other, fields)
            row.setdefault("wire", {})[tool] = _wire_row(_record(m, other), w, row[tool])
            if w.get("problem"):
                print(f"    ! capture: {w['problem']}", flush=True)
        e, w = row["engine"], row["wrk"]
        both = e["ok"] and w["ok"]
        for q in ("p50", "p99"):
            a, b = e[f"{q}_ms"], w[f"{q}_ms"]
            row[f"{q}_diff_ms"] = round(a - b, 3) if both and a is not None and b is not None else None
        if wire:
            we, ww = row["wire"]["engine"], row["wire"]["wrk"]
            for q in ("p50", "p99"):
                a, b = we[f"error_{q}_ms"], ww[f"error_{q}_ms"]
                row[f"error_{q}_diff_ms"] = round(a - b, 3) if a is not None and b is not None else None
        runs.append(row)
    d50 = median([r["p50_diff_ms"] for r in runs])
    d99 = median([r["p99_diff_ms"] for r in runs])
    met = None if d50 is None or d99 is None else abs(d50) <= ACCURACY_GOAL_P50_MS and abs(d99) <= ACCURACY_GOAL_P99_MS
    extra: dict[str, Any] = {}
    if wire:
        tools_ = ("engine", "wrk")
        keys = ("p50_ms", "p99_ms", "error_p50_ms", "error_p99_ms", "capture_effect_p50_ms", "capture_effect_p99_ms")
        wm = {t: {k: median([r["wire"][t][k] for r in runs]) for k in keys} for t in tools_}
        for t in tools_:
            wm[t]["wire_p50_ms"] = median([r["wire"][t]["wire"].get("p50_ms") for r in runs])
            wm[t]["wire_p99_ms"] = median([r["wire"][t]["wire"].get("p99_ms") for r in runs])
        e50 = median([r["error_p50_diff_ms"] for r in runs])
        e99 = median([r["error_p99_diff_ms"] for r in runs])
        extra["wire"] = {
            "median": wm,
            "median_error_diff_ms": {"p50": e50, "p99": e99},
            "goal": f"|engine's error − wrk's error| ≤ {ACCURACY_GOAL_P50_MS:g} ms at p50 and "
            f"≤ {ACCURACY_GOAL_P99_MS:g} ms at p99 (error = a tool's own percentile − the wire's, same run)",
            "goal_met": None
            if e50 is None or e99 is None
            else abs(e50) <= ACCURACY_GOAL_P50_MS and abs(e99) <= ACCURACY_GOAL_P99_MS,
            "capture_core": capture_core,
            "percentiles": "wire: exact nearest-rank over µs values (as wrk); engine: its log-linear histogram",
        }
    return extra | {
        "settings": {"users": ACCURACY_USERS, "duration_s": duration, "reps": reps, "path": "/sleep50", "wire": wire},
        "runs": runs,
        "median": {
            tool: {q: median([r[tool][f"{q}_ms"] for r in runs if r[tool]["ok"]]) for q in ("p50", "p99")}
            for tool in ("engine", "wrk")
        }
        | {"rps": {tool: median([r[tool]["rps"] for r in runs if r[tool]["ok"]]) for tool in ("engine", "wrk")}},
        "median_diff_ms": {"p50": d50, "p99": d99},
        "goal": f"|p50 − wrk's| ≤ {ACCURACY_GOAL_P50_MS:g} ms and |p99 − wrk's| ≤ {ACCURACY_GOAL_P99_MS:g} ms",
        "goal_met": met,
    }


def _f(v: float | None) -> str:
    return "   ?" if v is None else f"{v:6.2f}"


def _wire_row(own: dict[str, Any], w: dict[str, Any], plain: dict[str, Any]) -> dict[str, Any]:
    """A captured run: the tool's figures, the wire's, its error (own − wire) and what capturing changed."""
    out: dict[str, Any] = {"own": own, "wire": w}
    ok = own["ok"] and not w.get("problem")
    for q in ("p50", "p99"):
        a, b, c = own[f"{q}_ms"], w.get(f"{q}_ms"), plain[f"{q}_ms"]
        out[f"{q}_ms"] = a
        out[f"error_{q}_ms"] = round(a - b, 3) if ok and a is not None and b is not None else None
        # Captured run − the same tool's uncaptured run of this repetition: capture's effect plus run-to-run noise.
        out[f"capture_effect_{q}_ms"] = (
            round(a - c, 3) if own["ok"] and plain["ok"] and a is not None and c is not None else None
        )
    return out


# -- 3. scale --------------------------------------------------------------------------


def scale(
    ctx: Context,
    *,
    reps: int,
    users: int,
    duration: float,
    think_time: float,
    ramp_up: float,
    base_users: int,
    base_duration: float,
) -> dict[str, Any]:
    url = ctx.nginx.url("/2k")
    print(
        f"\n== scale: GET /2k, {users:,} users, think time {think_time:g} s, ramp-up {ramp_up:g} s, "
        f"hold {duration:g} s (baseline {base_users} users, {base_duration:g} s), {reps} ×"
    )
    runs: list[dict[str, Any]] = []
    for rep in range(1, reps + 1):
        row: dict[str, Any] = {"rep": rep}
        for kind, n, secs in (("baseline", base_users, base_duration), ("full", users, duration)):
            other = ctx.before_run()
            m = tools.engine(
                url,
                users=n,
                duration=secs,
                think_time=think_time,
                ramp_up=ramp_up if kind == "full" else 0.0,
                core=ctx.gen_core,
                server_pids=ctx.nginx.worker_pids(),
            )
            rss_kb = m.extra.get("max_rss_kb") or m.maxrss_kb
            lag = m.extra.get("loop_lag_ms_p99")
            _progress(
                f"rep {rep}/{reps} {kind}",
                m,
                other,
                f"{n:>6,} users {m.rps:>7,.0f} req/s  peak RSS {rss_kb / 1024:6.1f} MiB  "
                f"loop lag p99 {'?' if lag is None else f'{lag:g} ms'}",
            )
            row[kind] = _record(m, other) | {"users": n, "rss_kb": rss_kb, "rss_source": _rss_source(m)}
        b, f = row["baseline"], row["full"]
        ok = b["ok"] and f["ok"]
        row["kb_per_user"] = round((f["rss_kb"] - b["rss_kb"]) / (users - base_users), 2) if ok else None
        row["loop_lag_ms_p99"] = f["extra"].get("loop_lag_ms_p99")
        row["cpu_pct_max"] = f["extra"].get("cpu_pct_max")
        runs.append(row)
    kb = median([r["kb_per_user"] for r in runs])
    lag = median([r["loop_lag_ms_p99"] for r in runs])
    mem_met = None if kb is None else kb <= SCALE_GOAL_KB_PER_USER
    lag_met = None if lag is None else lag <= SCALE_GOAL_LOOP_LAG_P99_MS
    return {
        "settings": {
            "users": users,
            "duration_s": duration,
            "think_time_s": think_time,
            "ramp_up_s": ramp_up,
            "base_users": base_users,
            "base_duration_s": base_duration,
            "reps": reps,
            "path": "/2k",
        },
        "runs": runs,
        "median_kb_per_user": kb,
        "median_loop_lag_ms_p99": lag,
        "median_rps": median([r["full"]["rps"] for r in runs if r["full"]["ok"]]),
        "goal": f"≤ {SCALE_GOAL_KB_PER_USER:g} kB per user and event-loop lag p99 ≤ {SCALE_GOAL_LOOP_LAG_P99_MS:g} ms",
        "memory_goal_met": mem_met,
        "loop_lag_goal_met": lag_met,
        "goal_met": None if mem_met is None or lag_met is None else mem_met and lag_met,
    }


def _rss_source(m: tools.Measure) -> str:
    return "engine --json max_rss_kb" if m.extra.get("max_rss_kb") else "rusage ru_maxrss (= VmHWM)"
