"""How fast a k6 result file is read, and in how much memory: ``.venv/bin/python -m bench.import_results``.

Writes synthetic k6 JSON lines as k6 writes them (per request its http_reqs, http_req_duration
and the seven other http_req_* samples, over 4 labels, all in 5 minutes: the sizes differ in
requests per second), then reads each file in a fresh process and prints lines, seconds, lines per second
and the reader's peak memory above the interpreter's. The reader keeps per-second aggregates
only, so the memory should not grow with the file.
"""

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

OTHER = (
    "http_req_blocked",
    "http_req_connecting",
    "http_req_tls_handshaking",
    "http_req_sending",
    "http_req_waiting",
    "http_req_receiving",
    "http_req_failed",
)
LABELS = ("Home", "Search", "Article", "Login")
SECONDS = 300


def write(path: Path, requests: int) -> None:
    start = 1_790_000_000
    with path.open("w") as f:
        for i in range(requests):
            label = LABELS[i % len(LABELS)]
            second = start + i * SECONDS // requests  # the same 5 minutes, more or fewer requests a second
            t = datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{i % 1000:03d}123456Z"
            tags = {
                "name": label,
                "url": f"http://127.0.0.1:8001/{label.lower()}",
                "status": "200",
                "expected_response": "true",
                "method": "GET",
                "proto": "HTTP/1.1",
                "scenario": "default",
            }
            for metric, value in (("http_reqs", 1), ("http_req_duration", 3.5 + i % 97), *((m, 0.1) for m in OTHER)):
                f.write(
                    json.dumps({"metric": metric, "type": "Point", "data": {"time": t, "value": value, "tags": tags}})
                )
                f.write("\n")


def measure(path: str) -> None:
    """In a fresh process: read the file, print seconds and peak memory growth (kB)."""
    from portal.runs import result_files

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    results = result_files.read(Path(path))
    elapsed = time.perf_counter() - started
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    print(json.dumps({"seconds": elapsed, "lines": results.lines, "requests": results.requests, "grown_kb": grown}))


def main() -> None:
    print(f"{'requests':>9} {'lines':>10} {'MB':>7} {'read s':>7} {'lines/s':>9} {'requests/s':>10} {'memory +MB':>10}")
    with tempfile.TemporaryDirectory() as folder:
        for requests in (20_000, 100_000, 300_000):
            path = Path(folder) / f"k6-{requests}.json"
            write(path, requests)
            out = subprocess.run(
                [sys.executable, "-m", "bench.import_results", "--measure", str(path)],
                capture_output=True,
                text=True,
                check=True,
                cwd=Path(__file__).resolve().parent.parent,
            )
            m = json.loads(out.stdout)
            size = os.path.getsize(path) / 1e6
            print(
                f"{m['requests']:>9,} {m['lines']:>10,} {size:>7.0f} {m['seconds']:>7.1f} "
                f"{m['lines'] / m['seconds']:>9,.0f} {m['requests'] / m['seconds']:>10,.0f} "
                f"{m['grown_kb'] / 1024:>10.1f}"
            )
            path.unlink()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--measure"]:
        measure(sys.argv[2])
    else:
        main()
