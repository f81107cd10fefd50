"""Real JMeter and real Locust results become imported runs whose figures equal the tools' own (issue 18).

JMeter is Debian's ``jmeter`` package (2.13, started through tests/e2e/tools/PermissiveJMeter.java
because of Debian's newer XStream); Locust is the PyPI package in its own virtualenv,
``bench/.venv-locust`` (as the benchmark installs it: gevent monkey-patches the standard library, so
it stays out of the app's venv). Each runs a few seconds against the demo target on loopback; its
file is imported through the command; the imported run's request count equals the tool's own count
and what the demo served, and its mean and percentiles agree with the tool's within the precision
the file allows (JTL: exact samples in ms; Locust: percentiles, so marked approximate). Locust's
users stop by themselves (tests/e2e/tools/locustfile.py says why).
"""

import csv
import io
import math
import shutil
import subprocess
from pathlib import Path

import pytest
from django.core.management import call_command

from bench.prereq import LOCUST_VENV, PrereqError, ensure_locust
from portal.projects.models import Environment
from portal.runs.models import Run

pytestmark = [pytest.mark.e2e, pytest.mark.django_db]

TOOLS = Path(__file__).parent / "tools"
JMETER_HOME = Path("/usr/share/jmeter")


def _import(path, environment) -> Run:
    out = io.StringIO()
    call_command(
        "import_results",
        str(path),
        "--project",
        environment.project.name,
        "--environment",
        environment.name,
        stdout=out,
        stderr=io.StringIO(),
    )
    (url,) = out.getvalue().split()
    return Run.objects.get(code=url.rstrip("/").split("/")[-1])


@pytest.fixture
def environment(project, demo_target):
    return Environment.objects.create(project=project, name="Demo", base_url=demo_target.base_url)


@pytest.fixture(scope="module")
def jmeter(tmp_path_factory):
    """A command line that runs Debian's JMeter 2.13 in non-GUI mode."""
    if shutil.which("javac") is None or not (JMETER_HOME / "bin" / "ApacheJMeter.jar").exists():
        pytest.fail("JMeter is missing: apt-get install jmeter jmeter-http (Debian's package) and a JDK")
    folder = tmp_path_factory.mktemp("jmeter")
    jars = [JMETER_HOME / "bin" / "ApacheJMeter.jar", *sorted((JMETER_HOME / "lib").glob("*.jar"))]
    jars += sorted((JMETER_HOME / "lib" / "ext").glob("*.jar"))
    classpath = ":".join(map(str, jars))
    subprocess.run(
        ["javac", "-d", str(folder), "-cp", classpath, str(TOOLS / "PermissiveJMeter.java")], check=True, timeout=120
    )
    return ["java", f"-Djmeter.home={JMETER_HOME}", "-cp", f"{folder}:{classpath}", "PermissiveJMeter", "-n"]


def _run_jmeter(jmeter, demo_target, out: Path, *properties: str) -> dict:
    host, port = demo_target.base_url.split("//")[1].split(":")
    demo_target.reset()
    done = subprocess.run(
        [*jmeter, "-t", str(TOOLS / "import.jmx"), "-l", str(out), "-j", str(out.with_suffix(".log"))]
        + [f"-Jhost={host}", f"-Jport={port.rstrip('/')}", "-Jloops=40", *properties],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=out.parent,  # JMeter writes files of its own in its working folder
    )
    assert done.returncode == 0 and out.exists(), done.stdout[-2000:] + done.stderr[-2000:]
    return demo_target.counters()


def test_real_jmeter_jtl_csv_and_xml_import_with_jmeters_counts(jmeter, demo_target, environment, tmp_path):
    # given: JMeter's CSV JTL (2.13 writes it without a header line) and its XML JTL, each of a run
    jtl = tmp_path / "results.jtl"
    served = _run_jmeter(jmeter, demo_target, jtl)
    xml = tmp_path / "results.xml"
    served_xml = _run_jmeter(jmeter, demo_target, xml, "-Jjmeter.save.saveservice.output_format=xml")
    rows = list(csv.reader(jtl.open()))

    # when
    run = _import(jtl, environment)
    from_xml = _import(xml, environment)

    # then: every sample JMeter wrote, and every request the demo served
    assert (run.source["tool"], run.source["format"], run.status) == ("JMeter", "jmeter-csv", Run.Status.FINISHED)
    whole = run.summary["whole_run"]
    assert whole["hits"] == whole["pages"] == len(rows) == served["requests"] == 3 * 40 * 2
    assert whole["errors"] == 0
    assert {p["label"]: p["pages"] for p in run.summary["pages"]} == {"Home": 120, "Search": 120}
    # and: mean and 95th percentile as the samples give them (JMeter writes whole ms, the histogram is exact there)
    elapsed = sorted(int(r[1]) for r in rows)
    totals = run.summary["totals"]
    assert totals["apd_ms"] == pytest.approx(sum(elapsed) / len(elapsed), abs=0.006)  # the summary keeps 2 decimals
    assert totals["p95_ms"] == pytest.approx(elapsed[math.ceil(0.95 * len(elapsed)) - 1], rel=2**-10, abs=0.5)
    # and: the XML JTL of the second run gives its own counts
    assert from_xml.source["format"] == "jmeter-xml" and from_xml.source["version"] == "1.2"
    assert from_xml.summary["whole_run"]["hits"] == served_xml["requests"] == 240
    assert from_xml.summary["whole_run"]["errors"] == 0


@pytest.fixture(scope="module")
def locust_bin():
    try:
        return ensure_locust()
    except PrereqError as exc:
        pytest.fail(f"Locust could not be installed in {LOCUST_VENV}: {exc}")


def test_real_locust_history_imports_with_locusts_counts(locust_bin, demo_target, environment, tmp_path):
    # given: Locust headless, 3 users of 40 iterations each, its CSV with the full history
    demo_target.reset()
    prefix = tmp_path / "demo"
    done = subprocess.run(
        [str(locust_bin), "-f", str(TOOLS / "locustfile.py"), "--headless", "-u", "3", "-r", "3", "-t", "6s"]
        + ["--host", demo_target.base_url.rstrip("/"), "--csv", str(prefix), "--csv-full-history", "--only-summary"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    served = demo_target.counters()
    stats = {row["Name"]: row for row in csv.DictReader(Path(f"{prefix}_stats.csv").read_text().splitlines())}

    # when
    run = _import(Path(f"{prefix}_stats_history.csv"), environment)

    # then: Locust's own count, and what the demo served
    assert (run.source["tool"], run.source["format"], run.source["approximate"]) == ("Locust", "locust-csv", True)
    whole = run.summary["whole_run"]
    total = int(stats["Aggregated"]["Request Count"])
    assert whole["hits"] == total == served["requests"] == 3 * 40 * 2
    pages = {p["label"]: p["pages"] for p in run.summary["pages"]}
    assert pages == {"Home": int(stats["Home"]["Request Count"]), "Search": int(stats["Search"]["Request Count"])}
    # and: the mean is exact (from Locust's cumulative averages, to the summary's rounding); the median
    # is rebuilt from each second's rolling-window percentiles, so only roughly Locust's
    totals = run.summary["totals"]
    # and (issue 28): the mean, min and max are Locust's own totals (what its _stats.csv says), to the
    # summary's 2 decimals: the mean was clamped between rounded percentile points (2.50 for 2.20 ms)
    # and the max was the rolling window's 100 % (8.6 for 43.5 ms)
    aggregated = stats["Aggregated"]
    assert totals["apd_ms"] == pytest.approx(float(aggregated["Average Response Time"]), abs=0.006)
    assert totals["min_ms"] == pytest.approx(float(aggregated["Min Response Time"]), abs=0.006)
    assert totals["max_ms"] == pytest.approx(float(aggregated["Max Response Time"]), abs=0.006)
    assert float(stats["Home"]["50%"]) <= totals["p50_ms"] <= float(stats["Search"]["50%"])
