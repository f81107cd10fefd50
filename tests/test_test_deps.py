"""`make test` does its own set-up: what the tests need from Debian, through one script also used by .ci/run."""

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "install-test-deps.sh"
FILES = {
    "chromium": "usr/bin/chromium",
    "jmeter": "usr/share/jmeter/bin/ApacheJMeter.jar",
    "jmeter-http": "usr/share/jmeter/lib/ext/ApacheJMeter_http.jar",
    "default-jdk-headless": "usr/bin/javac",
    "nginx-light": "usr/sbin/nginx",
    "prometheus": "usr/bin/prometheus",
    "iproute2": "sbin/ip",
}


def check(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(SCRIPT), "--check"],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "PLIMSOLL_TEST_DEPS_ROOT": str(root)},
    )


def lay(root: Path, *packages: str) -> None:
    for package in packages:
        path = root / FILES[package]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
        path.chmod(0o755)


def test_a_machine_with_everything_passes(tmp_path):
    lay(tmp_path, *FILES)
    result = check(tmp_path)
    assert result.returncode == 0 and result.stderr == ""


def test_each_missing_package_stops_with_the_exact_command(tmp_path):
    for missing in FILES:
        root = tmp_path / missing
        lay(root, *(p for p in FILES if p != missing))
        result = check(root)
        assert result.returncode == 1, missing
        assert f"apt-get update && apt-get install -y {missing}'" in result.stderr, result.stderr


def test_a_fresh_machine_is_told_every_package_at_once(tmp_path):
    result = check(tmp_path)
    assert result.returncode == 1
    everything = "chromium jmeter jmeter-http default-jdk-headless nginx-light prometheus iproute2"
    assert f"apt-get install -y {everything}" in result.stderr


def test_make_test_and_ci_run_the_script_before_the_tests():
    # make -n prints the recipe without running it: the script comes before the lanes' runner (whose every pytest
    # is in scripts/run-tests.sh).
    plan = subprocess.run(["make", "-n", "test"], cwd=ROOT, capture_output=True, text=True, timeout=60).stdout
    lines = plan.splitlines()
    first_tests = next(i for i, line in enumerate(lines) if "scripts/run-tests.sh" in line or "pytest" in line)
    assert any("scripts/install-test-deps.sh" in line for line in lines[:first_tests]), plan
    assert "pytest" in (ROOT / "scripts" / "run-tests.sh").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "bash scripts/install-test-deps.sh" in ci
    assert ci.index("\nbash scripts/install-test-deps.sh") < ci.rindex("\nmake test")


def as_root(tmp_path: Path, root: Path, installs: tuple[str, ...]) -> subprocess.CompletedProcess:
    """The script as root on a machine whose apt-get (a stand-in on PATH: the real one needs root and the
    network) records what it was asked and lays down the files of the packages in ``installs``."""
    shims = tmp_path / "bin"
    shims.mkdir()
    (shims / "id").write_text("#!/bin/sh\necho 0\n")
    lays = " ".join(f"{root}/{FILES[p]}" for p in installs)
    (shims / "apt-get").write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {tmp_path}/apt.log\n'
        f'if [ "$1" = install ]; then for f in {lays}; do\n'
        '  mkdir -p "$(dirname "$f")"; : > "$f"; chmod +x "$f"\n'
        "done; fi\n"
    )
    for shim in shims.iterdir():
        shim.chmod(0o755)
    return subprocess.run(
        ["bash", str(SCRIPT)],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "PLIMSOLL_TEST_DEPS_ROOT": str(root), "PATH": f"{shims}:/usr/bin:/bin"},
    )


def test_as_root_it_installs_exactly_what_is_missing_then_checks_again(tmp_path):
    root = tmp_path / "machine"
    lay(root, "chromium", "nginx-light", "prometheus", "iproute2")

    result = as_root(tmp_path, root, ("jmeter", "jmeter-http", "default-jdk-headless"))

    assert result.returncode == 0, result.stderr
    assert (tmp_path / "apt.log").read_text().splitlines() == [
        "update -q",
        "install -y -q jmeter jmeter-http default-jdk-headless",
    ]


def test_as_root_a_package_that_installs_elsewhere_stops_before_the_tests(tmp_path):
    root = tmp_path / "machine"
    lay(root, *(p for p in FILES if p != "chromium"))

    result = as_root(tmp_path, root, ())  # apt-get succeeds, but no /usr/bin/chromium appears

    assert result.returncode == 1
    assert "installed, but still missing what the tests run: chromium" in result.stderr
