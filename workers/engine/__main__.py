"""Command line: drive the engine without the portal (quick checks, benchmarks).

    python -m workers.engine run --url http://127.0.0.1:8001/ --users 10 --duration 5 [--json]
    python -m workers.engine run --url http://127.0.0.1:8001/ --rate 500 --users 200 --duration 10 [--json]
    python -m workers.engine run --plan plan.json [--users N] [--duration S] [--rate R]

``--rate`` makes it an open-model test (``arrival_rate``): R iterations start
per second whatever the response times, on at most ``--users`` users (default:
R, enough for one-second pages); an iteration that finds no free user is
dropped and counted (``iterations_dropped``).

The summary covers the whole run; ``windows`` (a ``window`` line each in the
text summary) repeats the figures for the measurement windows alone, the
seconds the portal's report counts: the hold after a ramp-up, or each level's
hold. A ``--ramp-up`` therefore keeps connection set-up out of those figures.

Targets must be allowed: ``--allow`` or the ``PLIMSOLL_ALLOWED_TARGETS``
environment variable (default: loopback only). A target that is not allowed is
refused before any request is sent, with exit code 2 (as for any bad input),
also when the name passed the first check and the runner's check just before
connecting refuses it (DNS answered differently in between).
Ctrl-C stops the run the way the portal's Stop button does, and still prints
the summary.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import resource
import signal
import sys
import threading
from typing import Any

from .plan import THINK_TIME_MODES, Plan, PlanError
from .profiles import kind_of
from .runner import RunTotals, lag_ms, latency_ms, new_event_loop_factory, run
from .targets import DEFAULT_ALLOWLIST, ENV_VAR, Allowlist, TargetNotAllowed, check_url, parse_allowlist

EXIT_BAD_INPUT = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m workers.engine", description="Plimsoll load engine")
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("run", help="run a one-page test (--url) or a plan file (--plan)")
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--url", help="one-page test: GET this URL in a loop (any 2xx/3xx is a success)")
    target.add_argument("--plan", metavar="FILE", help="a plan as JSON (the portal's plan format)")
    p.add_argument(
        "--users",
        type=int,
        help="virtual users (default 1; with --rate: at most this many, default R; overrides the plan's)",
    )
    p.add_argument("--duration", type=float, help="seconds of hold (default 10; overrides the plan's)")
    p.add_argument(
        "--rate", type=float, help="open model: iterations started per second (arrival_rate; overrides the plan's)"
    )
    p.add_argument("--ramp-up", type=float, default=0.0, help="seconds of ramp-up for --url (default 0)")
    p.add_argument("--think-time", type=float, default=0.0, help="seconds between pages for --url (default 0)")
    p.add_argument(
        "--think-mode",
        choices=THINK_TIME_MODES,
        default="fixed",
        help="--think-time as a fixed pause, uniform (mean ± 50 %%) or negative exponential around it (default fixed)",
    )
    p.add_argument("--timeout", type=float, default=30.0, help="request timeout for --url in seconds (default 30)")
    p.add_argument("--seed", type=int, help="seed for the mix and think times")
    p.add_argument("--allow", metavar="NETS", help=f"allowed targets (default: ${ENV_VAR} or {DEFAULT_ALLOWLIST})")
    p.add_argument(
        "--no-trace-context",
        action="store_true",
        help="send no W3C traceparent header (a plan's trace_context: false; on by default)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a summary")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        allow = parse_allowlist(args.allow if args.allow is not None else os.environ.get(ENV_VAR) or DEFAULT_ALLOWLIST)
        plan = _with_trace_option(_plan(args), args)
        for url in plan.target_urls():  # before anything else touches the network
            check_url(url, allow)
    except (ValueError, OSError) as exc:  # PlanError, a bad allowlist, TargetNotAllowed, an unreadable file
        print(f"plimsoll: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        totals = _execute(plan, allow, args)
    except TargetNotAllowed as exc:
        # The runner checks again just before it connects; DNS may have changed since the check above.
        print(f"plimsoll: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.json:
        print(json.dumps(_json_summary(totals)))
    else:
        print(_human_summary(plan, totals))
    return 0


def _plan(args: argparse.Namespace) -> Plan:
    if args.url:
        if args.rate is not None and args.rate <= 0:
            raise PlanError("--rate: must be greater than 0")
        default_users = 1 if args.rate is None else max(1, math.ceil(args.rate))
        return Plan.single_page(
            args.url,
            users=default_users if args.users is None else args.users,
            hold=10.0 if args.duration is None else args.duration,
            think_time=args.think_time,
            think_time_mode=args.think_mode,
            ramp_up=args.ramp_up,
            timeout=args.timeout,
            rate=args.rate,
        )
    with open(args.plan, encoding="utf-8") as f:
        try:
            data = json.load(f)
        except json.JSONDecodeError as exc:
            raise PlanError(f"{args.plan}: not valid JSON ({exc})") from None
    plan = Plan.from_dict(data)
    profile = plan.profile.to_dict()
    kind = kind_of(plan.profile)
    if kind.users_key is None and (args.users is not None or args.duration is not None):
        raise PlanError(f"{args.plan}: --users and --duration do not apply to a {kind.name} profile (edit its levels)")
    if args.rate is not None and "rate" not in kind.fields:
        raise PlanError(f"{args.plan}: --rate applies to an arrival_rate profile, not {kind.name}")
    overrides = {kind.users_key: args.users, "hold": args.duration}
    if args.rate is not None:
        overrides["rate"] = args.rate
        if profile["rate_start"] == profile["rate"]:
            overrides["rate_start"] = args.rate
    overrides = {k: v for k, v in overrides.items() if v is not None}
    if overrides:
        plan = Plan.from_dict({**plan.to_dict(), "profile": {**profile, **overrides}})
    return plan


def _with_trace_option(plan: Plan, args: argparse.Namespace) -> Plan:
    if args.no_trace_context and plan.trace_context:
        return Plan.from_dict({**plan.to_dict(), "trace_context": False})
    return plan


def _execute(plan: Plan, allow: Allowlist, args: argparse.Namespace) -> RunTotals:
    stop = threading.Event()  # read by the sink, in its thread

    def sink(report: dict[str, Any]) -> bool:
        if not args.json:
            labels = report["labels"].values()
            hits = sum(v["hits"] for v in labels)
            errs = sum(v["errors"] for v in labels)
            dropped = f"  dropped {report['iterations_dropped']}" if report["iterations_dropped"] else ""
            print(
                f"  {report['second']:>4} s  users {report['active_users']:>5}  requests {hits:>7}  errors {errs}"
                f"{dropped}  lag p99 {report['loop_lag_ms']['p99']:g} ms  cpu {report['cpu_pct']:g} %",
                file=sys.stderr,
            )
        return stop.is_set()

    async def main_async() -> RunTotals:
        loop = asyncio.get_running_loop()

        def on_sigint() -> None:
            print("plimsoll: stopping (Ctrl-C again to abort)", file=sys.stderr)
            stop.set()
            loop.remove_signal_handler(signal.SIGINT)

        try:
            loop.add_signal_handler(signal.SIGINT, on_sigint)
        except (NotImplementedError, RuntimeError):  # not the main thread, or no signals here
            pass
        return await run(plan, sink=sink, allowlist=allow, seed=args.seed)

    with asyncio.Runner(loop_factory=new_event_loop_factory()) as runner:
        return runner.run(main_async())


def _json_summary(t: RunTotals) -> dict[str, Any]:
    return {
        "requests": t.requests,
        "pages": t.pages,
        "errors": t.errors,
        "aborted": t.aborted,
        "duration_s": round(t.duration_s, 3),
        "rps": round(t.rps, 1),
        "bytes_in": t.bytes_in,
        "latency_ms": {k: v for k, v in _latency(t).items() if k in ("p50", "p90", "p99", "max")},
        "errors_by_kind": dict(t.errors_by_kind),
        "iterations_started": t.iterations_started,
        "iterations_completed": t.iterations_completed,
        "iterations_dropped": t.iterations_dropped,
        "loop_lag_ms_p99": lag_ms(t.loop_lag)["p99"],
        "cpu_pct_max": round(t.cpu_pct_max, 1),
        "max_rss_kb": _max_rss_kb(),
        "windows": [w.to_dict() for w in t.windows],
        "labels": {label: lt.to_dict() for label, lt in t.labels.items()},
        **({"otlp": dict(t.otlp)} if t.otlp is not None else {}),
    }


def _max_rss_kb() -> int:
    """This process's peak resident memory in KiB (Linux reports ru_maxrss in KiB, macOS in bytes)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss // 1024 if sys.platform == "darwin" else rss


def _latency(t: RunTotals) -> dict[str, float]:
    return latency_ms(t.histogram)


def _human_summary(plan: Plan, t: RunTotals) -> str:
    lat = _latency(t)
    rate = 100 * t.errors / t.pages if t.pages else 0.0
    lines = [
        f"{plan.base_url}: {_describe(plan)}" + (" (stopped)" if t.stopped else ""),
        f"requests  {t.requests:,} in {t.duration_s:.2f} s = {t.rps:,.1f}/s   pages {t.pages:,}   "
        f"errors {t.errors:,} ({rate:.2f} %)   aborted {t.aborted:,}",
        f"latency   p50 {lat['p50']:g} ms   p90 {lat['p90']:g} ms   p99 {lat['p99']:g} ms   max {lat['max']:g} ms"
        f"   (mean {lat['mean']:g} ms; successful pages)",
        f"received  {t.bytes_in / 1e6:,.2f} MB of bodies",
    ]
    lines.append(
        f"iterations started {t.iterations_started:,}   completed {t.iterations_completed:,}"
        f"   dropped {t.iterations_dropped:,}"
    )
    lag = lag_ms(t.loop_lag)
    lines.append(
        f"generator loop lag p99 {lag['p99']:g} ms (max {lag['max']:g} ms)   CPU max {t.cpu_pct_max:.0f} %"
        f"   max RSS {_max_rss_kb() / 1024:,.0f} MiB"
    )
    for w in t.windows:
        d = w.to_dict()
        wl = d["latency_ms"]
        lines.append(
            f"window    {w.label}, seconds {w.start_s} to {w.end_s}: requests {w.requests:,} ({d['rps']:,.1f}/s)"
            f"   errors {w.errors:,}   p50 {wl['p50']:g} ms   p90 {wl['p90']:g} ms   p99 {wl['p99']:g} ms"
            f"   max {wl['max']:g} ms"
        )
    for kind, n in sorted(t.errors_by_kind.items()):
        lines.append(f"errors    {kind} {n:,}: {t.error_samples.get(kind, '')}")
    return "\n".join(lines)


def _describe(plan: Plan) -> str:
    return kind_of(plan.profile).cli_words(plan.profile)


if __name__ == "__main__":
    sys.exit(main())
