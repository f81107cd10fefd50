"""``python -m bench [throughput|accuracy|scale|all|phase] [--reps 3] [--duration 10] [--quick] [--wire]``.

``python -m bench store [--lengths 900,3600]`` benchmarks the results store instead (bench/store.py),
``python -m bench runs-list [--sizes 1000,10000]`` the runs list (bench/run_list.py) and
``python -m bench drilldown [--lengths 3600,43200]`` the drill-down data (bench/drilldown.py) and
``python -m bench verdicts [--nights 400]`` the verdicts' false alarms and detection (bench/verdicts.py) and
``python -m bench admission`` the admission scheduler (bench/admission.py) and
``python -m bench stop-criteria [--lengths 600,36000]`` one stop-criteria check (bench/stop_criteria.py).

Installs what is missing (Debian's nginx, echo module and wrk; Locust in
bench/.venv-locust; tshark for ``--wire`` and ``phase``), starts one nginx on
core 1, runs the load generators on core 0, and writes the figures to
bench/README.md and bench/results/. ``make bench`` runs ``all``; ``phase`` (the
experiment on nginx's millisecond timers, bench/phase.py) is never part of it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import resource
import shlex
import signal
import sys
import time
from pathlib import Path
from typing import Any

from . import phase, prereq, report, suites, sysinfo, tools
from .nginx import Nginx
from .procs import REGISTRY, capture
from .sysinfo import machine, versions

BENCHMARKS = ("throughput", "accuracy", "scale")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench", description="Plimsoll's engine against Locust and wrk")
    p.add_argument(
        "which",
        nargs="?",
        default="all",
        choices=(*BENCHMARKS, "all", "phase"),
        help="which benchmark (default all; phase: the nginx timer-phase experiment, not part of all)",
    )
    p.add_argument("--reps", type=int, help="interleaved repetitions (default 3; 1 with --quick)")
    p.add_argument("--duration", type=int, help="seconds per throughput/accuracy run (default 10; 4 with --quick)")
    p.add_argument("--quick", action="store_true", help="smoke check: 1 rep, short runs, 2,000 users for scale")
    p.add_argument("--scale-users", type=int, help="users in the scale run (default 10000; 2000 with --quick)")
    p.add_argument("--scale-duration", type=float, help="hold of the scale run in s (default 60; 15 with --quick)")
    p.add_argument("--scale-think-time", type=float, default=5.0, help="think time in the scale run (default 5 s)")
    p.add_argument(
        "--scale-ramp-up",
        type=float,
        help="ramp-up of the scale run in s (default: the think time, so that users do not march in lockstep)",
    )
    p.add_argument("--gen-core", type=int, default=0, help="core for the load generators (default 0)")
    p.add_argument("--server-core", type=int, default=1, help="core for nginx (default 1)")
    p.add_argument(
        "--quiet-wait",
        type=float,
        default=15.0,
        help="before each run, wait up to this many s for other processes to calm down (default 15)",
    )
    p.add_argument(
        "--engine-root",
        metavar="DIR",
        help="run `python -m workers.engine` from this checkout instead of this one (to compare engine versions)",
    )
    p.add_argument(
        "--wire",
        action="store_true",
        help="accuracy: also run each tool under a packet capture (tshark's dumpcap on lo) and report each tool's "
        "error against the wire latency (a separate diagnostic run per tool and repetition)",
    )
    p.add_argument("--no-locust", action="store_true", help="leave Locust out of the throughput benchmark")
    p.add_argument("--no-install", action="store_true", help="fail instead of installing missing prerequisites")
    p.add_argument(
        "--readme",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="write the results into bench/README.md (default: yes, except with --quick)",
    )
    return p


def _on_signal(signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    given = sys.argv[1:] if argv is None else argv
    if given[:1] == ["verdicts"]:  # the verdict quality (issue 24): simulated nights, no Django, no load
        from . import verdicts

        return verdicts.main(given[1:])
    if given[:1] == ["drilldown"]:  # the drill-down data (issue 15): bench/drilldown.py
        from . import drilldown

        return drilldown.main(given[1:])
    if given[:1] == ["admission"]:  # the admission scheduler (issue 25): no nginx, no load
        from . import admission

        return admission.main(given[1:])
    if given[:1] == ["store"]:  # the results store (issue 9): no nginx, no load, its own options
        from . import store

        return store.main(given[1:])
    if given[:1] == ["stop-criteria"]:  # one stop-criteria check at several run lengths (issue 24): PostgreSQL
        from . import stop_criteria

        return stop_criteria.main(given[1:])
    if given[:1] == ["runs-list"]:  # the runs list at 10,000 runs (issue 15): PostgreSQL, no load
        from . import run_list

        return run_list.main(given[1:])
    args = build_parser().parse_args(argv)
    quick = args.quick
    reps = args.reps or (1 if quick else 3)
    duration = args.duration or (4 if quick else 10)
    scale_users = args.scale_users or (2000 if quick else 10000)
    scale_duration = args.scale_duration or (15.0 if quick else 60.0)
    scale_ramp = args.scale_think_time if args.scale_ramp_up is None else args.scale_ramp_up
    write_readme = (not quick) if args.readme is None else args.readme
    which = list(BENCHMARKS) if args.which == "all" else [args.which]
    wire_needed = args.which == "phase" or (args.wire and "accuracy" in which)
    if reps < 1 or duration <= 0 or scale_users <= 10:
        print("bench: --reps must be ≥ 1, --duration > 0, --scale-users > 10", file=sys.stderr)
        return 2

    # Ctrl-C must work even when started with SIGINT ignored (a background job); children get the default.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _on_signal)
    # 10,000 users need 10,000 sockets: lift the soft limit for us and our children.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else 1 << 20, hard))

    if args.engine_root:
        root = Path(args.engine_root).resolve()
        if not (root / "workers" / "engine" / "__main__.py").is_file():
            print(f"bench: {root} has no workers/engine/__main__.py", file=sys.stderr)
            return 2
        tools.ENGINE_ROOT = root
    gen_core, server_core = _cores(args.gen_core, args.server_core)
    sysinfo.PINNED.update(gen=gen_core, server=server_core)
    try:
        prereq.ensure_system(install=not args.no_install, wire=wire_needed)
        locust_bin = None
        if "throughput" in which and not args.no_locust:
            locust_bin = str(prereq.ensure_locust(install=not args.no_install))
    except prereq.PrereqError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 1

    started = dt.datetime.now(dt.UTC).replace(microsecond=0)
    doc: dict[str, Any] = {
        "started": started.isoformat().replace("+00:00", "Z"),
        "command": "python -m bench " + shlex.join(sys.argv[1:] if argv is None else argv),
        "machine": machine(),
        "versions": versions(locust_bin),
        "settings": {
            "gen_core": gen_core,
            "server_core": server_core,
            "reps": reps,
            "duration_s": duration,
            "quick": quick,
            "wire": wire_needed,
            "engine_python": sys.executable,
            "engine_root": str(tools.ENGINE_ROOT),
            "engine_commit": _commit(tools.ENGINE_ROOT),
        },
    }
    print(f"bench: {doc['command']} — {doc['machine']['nproc']} × {doc['machine']['cpu_model']}, {doc['versions']}")
    t0 = time.monotonic()
    try:
        with Nginx(core=server_core, module=prereq.echo_module_path()) as ng:
            nginx_v = doc["versions"]["nginx"]
            print(f"bench: nginx {nginx_v} on 127.0.0.1:{ng.port} (core {server_core}), files in {ng.tmp}")
            ctx = suites.Context(nginx=ng, gen_core=gen_core, locust_bin=locust_bin, quiet_wait_s=args.quiet_wait)
            for name in which:
                if name == "throughput":
                    doc[name] = suites.throughput(ctx, reps=reps, duration=duration)
                elif name == "accuracy":
                    doc[name] = suites.accuracy(
                        ctx, reps=reps, duration=duration, wire=args.wire, capture_core=server_core
                    )
                elif name == "phase":
                    doc[name] = phase.experiment(ctx, reps=reps, duration=duration, server_core=server_core)
                else:
                    doc[name] = suites.scale(
                        ctx,
                        reps=reps,
                        users=scale_users,
                        duration=scale_duration,
                        think_time=args.scale_think_time,
                        ramp_up=scale_ramp,
                        base_users=10,
                        base_duration=min(5.0 if quick else 10.0, scale_duration),
                    )
    except KeyboardInterrupt:
        print("\nbench: interrupted; stopping everything it started", file=sys.stderr)
        return 130
    except RuntimeError as exc:  # nginx would not start or answer as configured
        print(f"bench: {exc}", file=sys.stderr)
        return 1
    finally:
        REGISTRY.stop_all()

    doc["elapsed_s"] = round(time.monotonic() - t0, 1)
    render = report.RENDER | {"phase": phase.render}
    sections = {name: render[name](doc, doc[name]) for name in which}
    print()
    for name in which:
        print(sections[name], end="\n\n")
    path = report.write_json(doc)
    print(f"bench: raw figures in {os.path.relpath(path)}; {doc['elapsed_s']:.0f} s in all")
    sections = {k: v for k, v in sections.items() if k in BENCHMARKS}  # the phase experiment has no section
    if write_readme and sections:
        report.update_readme(sections)
        print(f"bench: results written to {os.path.relpath(report.README)}")
    else:
        print("bench: bench/README.md left as it was (--quick, --no-readme or phase; pass --readme to write it)")
    return 0


def _commit(root: Path) -> str:
    """The engine checkout's commit, with "+changes" when its workers/ differ from it."""
    head = capture(["git", "-C", str(root), "rev-parse", "--short", "HEAD"])
    if not head or " " in head:
        return "?"
    dirty = capture(["git", "-C", str(root), "status", "--porcelain", "--", "workers"])
    return head + ("+changes" if dirty else "")


def _cores(gen: int, server: int) -> tuple[int | None, int | None]:
    allowed = os.sched_getaffinity(0)
    if gen != server and {gen, server} <= allowed:
        return gen, server
    print(
        f"bench: cores {gen} and {server} are not both available (we may use {sorted(allowed)}): running unpinned; "
        "figures will not be comparable with pinned runs",
        file=sys.stderr,
    )
    return None, None


if __name__ == "__main__":
    sys.exit(main())
