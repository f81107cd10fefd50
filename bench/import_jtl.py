"""A large JMeter JTL read by Plimsoll and by a peer, at several sizes: ``.venv/bin/python -m bench.import_jtl``.

Writes JTL CSV files as JMeter 5 writes them by default (17 columns, header line, timeStamp in
ms), at one constant rate (2,000 samples a second over 8 labels, 1 % errors), so a larger file
is a longer run: more samples *and* more seconds. Each file is then read in a fresh process
and the table gives its wall time, its CPU time (user + system: the fair figure on a shared
machine), its rate per CPU second and the process's peak resident memory (getrusage of the child,
so every tool is measured the same way, interpreter included):

- **Plimsoll**: ``portal.runs.result_files.read``, which the import runs before storing: the
  per-second per-label figures with latency histograms, spooled past a 60 s window.
- **parse-jtl** (npm, 1.1.0, `test-results-reporter/jtl-parser`): the JTL parser on npm, which
  returns per-label aggregates with percentiles; it reads the file into one string and keeps
  every sample's elapsed time. Installed by ``npm pack`` into ``bench/.npm-parse-jtl`` (no
  dependencies); skipped with a note when npm cannot fetch it.

JTL Reporter (the best-known JTL importer) is a set of Docker services (Node back end,
PostgreSQL), not a package this machine can install from PyPI, Debian or npm, so it is not
measured here; its documented failure on a 1.1 GB file is quoted in the README.

``--sizes 100,300,1000`` (MB, the default) sets the files' sizes; files are written to a
temporary folder and deleted. ``--store`` adds **Plimsoll+DB**: the whole import as
``manage.py import_results`` runs it (read, then the run's rows written in one transaction and
finalized) into the database of ``DATABASE_URL``, under a throwaway team deleted afterwards; its
wall time includes the database's work (its CPU time does not: PostgreSQL is another process).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
NPM_DIR = BENCH_DIR / ".npm-parse-jtl"
HEADER = (
    "timeStamp,elapsed,label,responseCode,responseMessage,threadName,dataType,success,failureMessage,"
    "bytes,sentBytes,grpThreads,allThreads,URL,Latency,IdleTime,Connect\n"
)
LABELS = ("Home", "Login", "Search", "Article", "Cart", "Checkout", "Profile", "Logout")
RATE = 2000  # samples a second
START_MS = 1_790_000_000_000


def write(path: Path, megabytes: int) -> int:
    """A JTL of about ``megabytes`` MB; returns its number of samples."""
    target = megabytes * 1_000_000
    written = samples = 0
    step_us = 1_000_000 // RATE
    with path.open("w") as f:
        f.write(HEADER)
        chunk = []
        while written < target:
            i = samples
            label = LABELS[i % len(LABELS)]
            elapsed = 20 + (i * 7919) % 480
            ts = START_MS + i * step_us // 1000
            if i % 100 == 99:
                row = (
                    f'{ts},{elapsed},{label},500,Internal Server Error,Thread Group 1-{i % 50 + 1},text,false,"",'
                    f"512,140,50,50,http://127.0.0.1:8001/{label.lower()},{elapsed - 3},0,1\n"
                )
            else:
                row = (
                    f"{ts},{elapsed},{label},200,OK,Thread Group 1-{i % 50 + 1},text,true,,"
                    f"{5000 + i % 900},140,50,50,http://127.0.0.1:8001/{label.lower()},{elapsed - 3},0,1\n"
                )
            chunk.append(row)
            written += len(row)
            samples += 1
            if len(chunk) >= 10_000:
                f.write("".join(chunk))
                chunk.clear()
        f.write("".join(chunk))
    return samples


def measure_plimsoll(path: str) -> None:
    """In a fresh process: read the file as the import does; print what it found."""
    from portal.runs import result_files

    results = result_files.read(Path(path))
    print(json.dumps({"samples": results.requests, "seconds_of_run": results.seconds}))
    results.discard()


def measure_store(path: str) -> None:
    """In a fresh process: the whole import (read, then store the run and finalize it) into DATABASE_URL.

    A throwaway team, project and environment hold the run; they are deleted afterwards.
    """
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    django.setup()
    from portal.accounts.models import Team
    from portal.projects.models import Environment, Project
    from portal.runs import services

    team = Team.objects.create(name="bench.import_jtl (deleted after the run)")
    try:
        project = Project.objects.create(team=team, name="bench")
        environment = Environment.objects.create(project=project, name="bench", base_url="http://127.0.0.1:8001")
        run, _ = services.run_import(environment=environment, user=None, path=Path(path), file_name=Path(path).name)
        print(json.dumps({"samples": run.summary["whole_run"]["hits"], "status": run.status}))
    finally:
        team.delete()


def ensure_parse_jtl() -> Path | None:
    index = NPM_DIR / "package" / "src" / "index.js"
    if index.exists():
        return index
    NPM_DIR.mkdir(exist_ok=True)
    try:
        subprocess.run(["npm", "pack", "parse-jtl@1.1.0"], cwd=NPM_DIR, check=True, capture_output=True, timeout=120)
        subprocess.run(["tar", "xzf", "parse-jtl-1.1.0.tgz"], cwd=NPM_DIR, check=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        print(f"bench: parse-jtl could not be fetched ({exc}); measuring Plimsoll alone", file=sys.stderr)
        return None
    return index


NODE_SCRIPT = """
const parse = require(process.argv[1]).parse;
const r = parse(process.argv[2]);
console.log(JSON.stringify({samples: r.total_requests.samples + r.total_transactions.samples}));
"""


def run_measured(argv: list[str], cwd: Path) -> dict:
    """Runs ``argv``; its wall time, peak RSS (MB), exit status and last output line."""
    started = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - started
    out, err = proc.stdout.read().decode(), proc.stderr.read().decode()
    proc.stdout.close()
    proc.stderr.close()
    proc.returncode = os.waitstatus_to_exitcode(status)
    cpu = usage.ru_utime + usage.ru_stime
    result = {"wall_s": elapsed, "cpu_s": cpu, "peak_mb": usage.ru_maxrss / 1024, "ok": proc.returncode == 0}
    if result["ok"]:
        result |= json.loads(out.strip().splitlines()[-1])
    else:
        lines = [line.strip() for line in err.strip().splitlines() if line.strip()]
        errors = [line for line in lines if "Error" in line] or lines
        result["error"] = (errors[-1] if errors else f"exit {proc.returncode}")[:120]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="100,300,1000", help="file sizes in MB, comma-separated")
    parser.add_argument(
        "--store", action="store_true", help="also time the whole import into DATABASE_URL (read, store, finalize)"
    )
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    peer = ensure_parse_jtl()
    print(
        f"{'MB':>6} {'samples':>11} {'tool':<11} {'wall s':>7} {'CPU s':>6} {'MB/CPU s':>8} {'samples/CPU s':>13} "
        f"{'peak RSS MB':>11}"
    )
    with tempfile.TemporaryDirectory(prefix="plimsoll-bench-jtl-") as folder:
        for megabytes in sizes:
            path = Path(folder) / f"results-{megabytes}.jtl"
            samples = write(path, megabytes)
            real_mb = path.stat().st_size / 1e6
            tools = [("Plimsoll", [sys.executable, "-m", "bench.import_jtl", "--measure", str(path)], ROOT)]
            if args.store:
                argv = [sys.executable, "-m", "bench.import_jtl", "--measure-store", str(path)]
                tools.append(("Plimsoll+DB", argv, ROOT))
            if peer is not None:
                tools.append(("parse-jtl", ["node", "-e", NODE_SCRIPT, str(peer), str(path)], Path("/")))
            for name, argv, cwd in tools:
                m = run_measured(argv, cwd)
                if m["ok"]:
                    assert m["samples"] == samples, (name, m, samples)  # noqa: S101 (both read every sample)
                    print(
                        f"{real_mb:>6.0f} {samples:>11,} {name:<11} {m['wall_s']:>7.1f} {m['cpu_s']:>6.1f} "
                        f"{real_mb / m['cpu_s']:>8.1f} {samples / m['cpu_s']:>13,.0f} {m['peak_mb']:>11.0f}"
                    )
                else:
                    print(f"{real_mb:>6.0f} {samples:>11,} {name:<11} fails after {m['wall_s']:.1f} s: {m['error']}")
            path.unlink()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--measure"]:
        measure_plimsoll(sys.argv[2])
    elif sys.argv[1:2] == ["--measure-store"]:
        measure_store(sys.argv[2])
    else:
        main()
