"""Figures → Markdown sections of bench/README.md (between markers) and a JSON file under bench/results/."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
README = BENCH_DIR / "README.md"
RESULTS_DIR = BENCH_DIR / "results"
SECTIONS = ("throughput", "accuracy", "scale")
NOISY_PCT = 10.0
OTHER_HEAD = "other CPU (gen. / nginx core); host steal"


def start_marker(name: str) -> str:
    return f"<!-- bench:{name}:start -->"


def end_marker(name: str) -> str:
    return f"<!-- bench:{name}:end -->"


def write_json(doc: dict[str, Any]) -> Path:
    RESULTS_DIR.mkdir(exist_ok=True)
    path = RESULTS_DIR / f"{doc['started'].replace(':', '').replace('-', '')}.json"
    path.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
    return path


def update_readme(sections: dict[str, str], readme: Path = README) -> None:
    text = readme.read_text() if readme.exists() else "# Benchmarks\n"
    if "## Results" not in text:
        text = text.rstrip("\n") + "\n\n## Results\n"
    for name in SECTIONS:
        if start_marker(name) not in text:
            text = text.rstrip("\n") + f"\n\n{start_marker(name)}\n_Not run yet._\n{end_marker(name)}\n"
    for name, body in sections.items():
        pattern = re.compile(re.escape(start_marker(name)) + r".*?" + re.escape(end_marker(name)), re.S)
        block = f"{start_marker(name)}\n{body.strip()}\n{end_marker(name)}"
        text = pattern.sub(lambda _m, block=block: block, text, count=1)
    readme.write_text(text)


# -- rendering -------------------------------------------------------------------------


def _n(v: float | None, fmt: str = ",.0f", unit: str = "") -> str:
    return "–" if v is None else f"{v:{fmt}}{unit}"


def _ratio(v: float | None) -> str:
    return "–" if v is None else f"{v:.2f}×"


def _reps(n: int) -> str:
    return "1 repetition" if n == 1 else f"{n} interleaved repetitions"


def _verdict(met: bool | None) -> str:
    return "**not measured**" if met is None else ("**met**" if met else "**not met**")


def _cpu_window(m: dict[str, Any]) -> dict[str, Any]:
    """What the machine's CPU did during one tool's run (sysinfo.CpuWindow), or {} if not recorded."""
    return m.get("extra", {}).get("cpu_window", {})


def _other(*measures: dict[str, Any]) -> float:
    return max((_cpu_window(m).get("other_cpu_pct", 0.0) for m in measures), default=0.0)


def _steal(*measures: dict[str, Any]) -> float | None:
    """The most CPU time the host took from this machine during these runs (% of one core), if recorded."""
    steals = [v for m in measures if (v := _cpu_window(m).get("steal_pct")) is not None]
    return max(steals) if steals else None


def _other_cell(*measures: dict[str, Any]) -> str:
    """The most other processes used during these runs (in all, then on the generator's core / on nginx's core),
    and the host's steal: a virtual machine's CPU time taken by its neighbours, which no process shows."""
    total = _other(*measures)
    windows = [_cpu_window(m) for m in measures]
    on_gen = [w["other_on_gen_core_pct"] for w in windows if "other_on_gen_core_pct" in w]
    on_server = [w["other_on_server_core_pct"] for w in windows if "other_on_server_core_pct" in w]
    cell = f"{total:.0f} %"
    if on_gen and on_server:
        cell += f" ({max(on_gen):.0f} / {max(on_server):.0f})"
    steal = _steal(*measures)
    return cell if steal is None else f"{cell}; {steal:.0f} %"


def _context(doc: dict[str, Any]) -> str:
    mc, v, st = doc["machine"], doc["versions"], doc["settings"]
    tools = ", ".join(
        f"{name} {v[key]}"
        for name, key in (
            ("nginx", "nginx"),
            ("wrk", "wrk"),
            ("Locust", "locust"),
            ("Python", "python"),
            ("uvloop", "uvloop"),
            ("aiohttp", "aiohttp"),
        )
        if key in v
    )
    return (
        f"_Run {doc['started']} on {mc['nproc']} × {mc['cpu_model']}, {mc['memory_gib']} GiB, Linux {mc['kernel']}; "
        f"{tools}; engine at {st.get('engine_commit', '?')}. Command: `{doc['command']}`; "
        f"load generator on core {st['gen_core']}, nginx on core {st['server_core']}._"
    )


def _notes(runs: list[dict[str, Any]], tools: list[str], others: list[float]) -> list[str]:
    notes = []
    worst = max(others, default=0.0)
    if worst > NOISY_PCT:
        notes.append(
            f"The machine was shared: other processes used up to {worst:.0f} % of a core during these runs "
            "(column *other CPU*: both cores together, and in brackets on the load generator's core / on nginx's). "
            "Only ratios measured within one repetition count."
        )
    steals = [v for r in runs if (v := _steal(*(r[t] for t in tools if isinstance(r.get(t), dict)))) is not None]
    if steals and max(steals) > NOISY_PCT:
        notes.append(
            f"The host took CPU time from this machine: steal up to {max(steals):.0f} % of a core during these runs "
            "(after the semicolon in the last column). Stolen time shows in every timing, loop lag most of all, "
            "and describes the host rather than the tools: repeat on a quiet machine before reading a goal as not met."
        )
    for r in runs:
        for t in tools:
            m = r.get(t)
            if isinstance(m, dict) and m.get("problem"):
                notes.append(f"Rep {r['rep']}, {t}: {m['problem'][:300]}")
            if isinstance(m, dict) and m.get("extra", {}).get("cpu_warning"):
                notes.append(f"Rep {r['rep']}, {t}: {m['extra']['cpu_warning']}")
    return notes


def render_throughput(doc: dict[str, Any], res: dict[str, Any]) -> str:
    s = res["settings"]
    peers = [t for t in s["order"] if t != "engine"]
    names = {"engine": "engine", "locust": "Locust FastHttpUser", "wrk": "wrk -t1 -c50"}
    head = ["rep"] + [f"{names[t]} req/s" for t in s["order"]] + [f"engine ÷ {names[p].split()[0]}" for p in peers]
    head += ["engine CPU", "nginx CPU (engine / wrk)", OTHER_HEAD]
    lines = [
        "### 1. Throughput",
        "",
        f"GET `/2k` (2,048 bytes, keep-alive) from {s['users']} users with no think time, "
        f"{s['duration_s']:g} s per run, {_reps(s['reps'])} ({', '.join(s['order'])}).",
        "",
        _context(doc),
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---:|" * len(head),
    ]
    others = []
    for r in res["runs"]:
        other = _other(*(r[t] for t in s["order"]))
        others.append(other)
        cells = [str(r["rep"])] + [_n(r[t]["rps"]) if r[t]["ok"] else "failed" for t in s["order"]]
        cells += [_ratio(r[f"engine_vs_{p}"]) for p in peers]
        nginx_cpu = {t: _cpu_window(r[t]).get("server_cpu_pct") for t in s["order"]}
        cells += [
            f"{r['engine']['cpu_pct']:.0f} %",
            f"{_n(nginx_cpu.get('engine'))} % / {_n(nginx_cpu.get('wrk'))} %",
            _other_cell(*(r[t] for t in s["order"])),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    med = ["**median**"] + [f"**{_n(res['median_rps'][t])}**" for t in s["order"]]
    med += [f"**{_ratio(res['median_ratios'][f'engine_vs_{p}'])}**" for p in peers] + ["", "", ""]
    lines.append("| " + " | ".join(med) + " |")
    lines += [
        "",
        f"Goal: {res['goal']} — {_verdict(res['goal_met'])} "
        f"(median of the per-repetition ratios: {_ratio(res['median_ratios'].get('engine_vs_locust'))} Locust, "
        f"{_ratio(res['median_ratios'].get('engine_vs_wrk'))} wrk).",
    ]
    notes = _notes(res["runs"], s["order"], others)
    if notes:
        lines += [""] + [f"- {n}" for n in notes]
    return "\n".join(lines)


def render_accuracy(doc: dict[str, Any], res: dict[str, Any]) -> str:
    s = res["settings"]
    head = [
        "rep",
        "engine p50",
        "wrk p50",
        "Δ p50",
        "engine p99",
        "wrk p99",
        "Δ p99",
        "engine req/s",
        "wrk req/s",
        OTHER_HEAD,
    ]
    lines = [
        "### 2. Accuracy",
        "",
        f"GET `/sleep50` (nginx answers after exactly 50 ms) from {s['users']} users / connections, each waiting "
        f"{s.get('think_time', 'no think time')} (a closed loop of ≈ 1,000 requests/s for both tools), "
        f"{s['duration_s']:g} s per run, {_reps(s['reps'])} (engine, wrk). The engine's users start over "
        f"{s.get('engine_ramp_up_s', 0):g} s and its figures are its measured window's (the {s['duration_s']:g} s "
        "after that); wrk connects before it starts timing. Latencies in ms; Δ = engine − wrk within the repetition.",
        "",
        _context(doc),
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---:|" * len(head),
    ]
    others = []
    ms = lambda v: _n(v, ".2f")  # noqa: E731
    sd = lambda v: "–" if v is None else f"{v:+.2f}"  # noqa: E731
    for r in res["runs"]:
        e, w = r["engine"], r["wrk"]
        other = _other(e, w)
        others.append(other)
        lines.append(
            "| "
            + " | ".join(
                [
                    str(r["rep"]),
                    ms(e["p50_ms"]),
                    ms(w["p50_ms"]),
                    sd(r["p50_diff_ms"]),
                    ms(e["p99_ms"]),
                    ms(w["p99_ms"]),
                    sd(r["p99_diff_ms"]),
                    _n(e["rps"]),
                    _n(w["rps"]),
                    _other_cell(e, w),
                ]
            )
            + " |"
        )
    md = res["median"]
    lines.append(
        "| "
        + " | ".join(
            [
                "**median**",
                ms(md["engine"]["p50"]),
                ms(md["wrk"]["p50"]),
                f"**{sd(res['median_diff_ms']['p50'])}**",
                ms(md["engine"]["p99"]),
                ms(md["wrk"]["p99"]),
                f"**{sd(res['median_diff_ms']['p99'])}**",
                _n(md["rps"]["engine"]),
                _n(md["rps"]["wrk"]),
                "",
            ]
        )
        + " |"
    )
    lines += ["", f"Goal: {res['goal']} — {_verdict(res['goal_met'])}."]
    if res.get("wire"):
        lines += ["", *_render_wire(res)]
    notes = _notes(res["runs"], ["engine", "wrk"], others)
    if notes:
        lines += [""] + [f"- {n}" for n in notes]
    return "\n".join(lines)


def _render_wire(res: dict[str, Any]) -> list[str]:
    """The ground-truth table of ``--wire``: each tool's own figures against the wire's, in the same captured run."""
    wi = res["wire"]
    ms = lambda v: _n(v, ".2f")  # noqa: E731
    sd = lambda v: "–" if v is None else f"{v:+.2f}"  # noqa: E731
    head = [
        "rep",
        "tool",
        "own p50",
        "wire p50",
        "error p50",
        "own p99",
        "wire p99",
        "error p99",
        "turnaround p50",
        "capture effect p50 / p99",
        "capture CPU",
    ]
    lines = [
        "#### Against the wire (`--wire`)",
        "",
        "Each tool ran once more per repetition under a packet capture of nginx's port on `lo` "
        f"(dumpcap, on core {wi.get('capture_core')}). Wire latency = first request byte → last response byte, "
        "per request, from the capture's timestamps; "
        "wire percentiles are exact nearest-rank values over microseconds (wrk's method; the engine's histogram is "
        "within ±16 µs at 50 ms). *error* = the tool's own percentile − the wire's, same run. *capture effect* = "
        "the tool's figure in the captured run − in its uncaptured run of the same repetition (capture plus "
        "run-to-run noise). Turnaround = previous response's last byte → next request's first byte on a connection.",
        "",
        "| " + " | ".join(head) + " |",
        "|---:|---|" + "---:|" * (len(head) - 2),
    ]
    for r in res["runs"]:
        for t in ("engine", "wrk"):
            x = r.get("wire", {}).get(t)
            if not x:
                continue
            w = x["wire"]
            turn = (w.get("turnaround_ms") or {}).get("p50")
            cpu = w.get("capture_cpu_pct")
            lines.append(
                "| "
                + " | ".join(
                    [
                        str(r["rep"]),
                        t,
                        ms(x["p50_ms"]),
                        ms(w.get("p50_ms")),
                        sd(x["error_p50_ms"]),
                        ms(x["p99_ms"]),
                        ms(w.get("p99_ms")),
                        sd(x["error_p99_ms"]),
                        "–" if turn is None else f"{turn:.3f}",
                        f"{sd(x['capture_effect_p50_ms'])} / {sd(x['capture_effect_p99_ms'])}",
                        "–" if cpu is None else f"{cpu:.1f} %",
                    ]
                )
                + " |"
            )
    md = wi["median"]
    for t in ("engine", "wrk"):
        m = md[t]
        lines.append(
            f"| **median** | {t} | {ms(m['p50_ms'])} | {ms(m['wire_p50_ms'])} | **{sd(m['error_p50_ms'])}** "
            f"| {ms(m['p99_ms'])} | {ms(m['wire_p99_ms'])} | **{sd(m['error_p99_ms'])}** | "
            f"| {sd(m['capture_effect_p50_ms'])} / {sd(m['capture_effect_p99_ms'])} | |"
        )
    d = wi["median_error_diff_ms"]
    lines += [
        "",
        f"Engine's error − wrk's error (median of the per-repetition differences): p50 {sd(d['p50'])} ms, "
        f"p99 {sd(d['p99'])} ms. Goal on the errors: {wi['goal']} — {_verdict(wi['goal_met'])}.",
    ]
    for r in res["runs"]:
        for t in ("engine", "wrk"):
            p = r.get("wire", {}).get(t, {}).get("wire", {}).get("problem")
            if p:
                lines.append(f"- Rep {r['rep']}, {t}, capture: {p}")
    return lines


def render_scale(doc: dict[str, Any], res: dict[str, Any]) -> str:
    s = res["settings"]
    head = [
        "rep",
        "users",
        "req/s",
        "errors",
        "peak RSS, baseline",
        "peak RSS, full",
        "kB per user",
        "loop lag p99, hold",
        "loop lag p99, whole run",
        "engine CPU (avg)",
        OTHER_HEAD,
    ]
    lines = [
        "### 3. Scale",
        "",
        f"{s['users']:,} users in one engine process, GET `/2k` then {s['think_time_s']:g} s of think time, "
        f"started over a {s['ramp_up_s']:g} s ramp-up then held {s['duration_s']:g} s; "
        f"{_reps(s['reps'])} (baseline, full). "
        f"Memory per user = (peak RSS of the full run − peak RSS of a {s['base_users']}-user baseline run of "
        f"{s['base_duration_s']:g} s) ÷ {s['users'] - s['base_users']:,}; 1 kB = 1,024 bytes. Loop lag p99 of "
        f"the {s['duration_s']:g} s hold (the engine's measured window, `windows` in `--json`: the goal's figure) "
        "and of the whole run, whose last second holds the close of every user at once.",
        "",
        _context(doc),
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---:|" * len(head),
    ]
    others = []
    for r in res["runs"]:
        b, f = r["baseline"], r["full"]
        other = _other(b, f)
        others.append(other)
        lag = r["loop_lag_ms_p99"]
        lines.append(
            "| "
            + " | ".join(
                [
                    str(r["rep"]),
                    f"{f['users']:,}",
                    _n(f["rps"]),
                    str(f["errors"]),
                    f"{b['rss_kb'] / 1024:.1f} MiB",
                    f"{f['rss_kb'] / 1024:.1f} MiB",
                    _n(r["kb_per_user"], ".1f"),
                    "not measured" if lag is None else f"{lag:g} ms",
                    "–" if r.get("loop_lag_ms_p99_whole_run") is None else f"{r['loop_lag_ms_p99_whole_run']:g} ms",
                    f"{f['cpu_pct']:.0f} %",
                    _other_cell(b, f),
                ]
            )
            + " |"
        )
    lag = res["median_loop_lag_ms_p99"]
    lines.append(
        "| **median** | | "
        + _n(res["median_rps"])
        + " | | | | **"
        + _n(res["median_kb_per_user"], ".1f")
        + "** | **"
        + ("–" if lag is None else f"{lag:g} ms")
        + "** | | | |"
    )
    lines += [
        "",
        f"Goal: {res['goal']} — memory {_verdict(res['memory_goal_met'])}"
        f" ({_n(res['median_kb_per_user'], '.1f')} kB per user), loop lag "
        + (
            "**not measured yet** (the engine's `--json` has no `loop_lag_ms_p99`)."
            if lag is None
            else f"{_verdict(res['loop_lag_goal_met'])} ({lag:g} ms)."
        ),
    ]
    if res["runs"]:
        lines += ["", f"Peak RSS from {res['runs'][-1]['full']['rss_source']}."]
    if res["runs"] and res["runs"][0]["full"]["extra"].get("cpu_pct_max") is not None:
        lines.append(
            "Engine's own CPU peak (cpu_pct_max): " + ", ".join(f"{r['cpu_pct_max']:g} %" for r in res["runs"]) + "."
        )
    notes = _notes(res["runs"], ["baseline", "full"], others)
    if notes:
        lines += [""] + [f"- {n}" for n in notes]
    return "\n".join(lines)


RENDER = {"throughput": render_throughput, "accuracy": render_accuracy, "scale": render_scale}
