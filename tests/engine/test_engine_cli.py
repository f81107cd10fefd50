import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from workers.engine import __main__ as cli

REPO = Path(__file__).resolve().parents[2]


def run_cli(*args, env_allow=None):
    env = {k: v for k, v in os.environ.items() if k != "PLIMSOLL_ALLOWED_TARGETS"}
    if env_allow is not None:
        env["PLIMSOLL_ALLOWED_TARGETS"] = env_allow
    return subprocess.run(
        [sys.executable, "-m", "workers.engine", "run", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_json_output_is_one_object_with_the_figures(target):
    result = run_cli("--url", f"{target.url}/", "--users", "3", "--duration", "1", "--json")

    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert {"requests", "errors", "duration_s", "rps", "bytes_in", "latency_ms"} <= set(summary)
    assert set(summary["latency_ms"]) == {"p50", "p90", "p99", "max"}
    assert summary["requests"] == target.served > 0
    assert summary["errors"] == 0
    assert 0 < summary["latency_ms"]["p50"] <= summary["latency_ms"]["p99"] <= summary["latency_ms"]["max"]
    assert summary["rps"] == pytest.approx(summary["requests"] / summary["duration_s"], rel=0.01)


def test_json_windows_leave_the_ramp_up_out(target):
    result = run_cli("--url", f"{target.url}/", "--users", "3", "--ramp-up", "1", "--duration", "1", "--json")

    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    (window,) = summary["windows"]
    assert {k: window[k] for k in ("label", "start_s", "end_s", "seconds")} == {
        "label": "Hold",
        "start_s": 1,
        "end_s": 2,
        "seconds": 1,
    }
    assert 0 < window["requests"] < summary["requests"] == target.served
    assert window["rps"] == window["requests"]  # over one second
    assert 0 < window["latency_ms"]["p50"] <= window["latency_ms"]["p99"] <= window["latency_ms"]["max"]
    assert set(window["loop_lag_ms"]) == {"p99", "max"}
    assert 0 <= window["loop_lag_ms"]["p99"] <= window["loop_lag_ms"]["max"]


def test_the_text_summary_has_a_line_per_window(target):
    result = run_cli("--url", f"{target.url}/", "--users", "2", "--ramp-up", "1", "--duration", "1")

    assert result.returncode == 0, result.stderr
    assert "window    Hold, seconds 1 to 2: requests " in result.stdout


@pytest.mark.parametrize("mode", ["fixed", "uniform", "exponential"])
def test_think_mode_sets_the_plans_think_time_mode(mode):
    args = cli.build_parser().parse_args(
        ["run", "--url", "http://127.0.0.1:1/", "--think-time", "0.5", "--think-mode", mode]
    )

    plan = cli._plan(args)

    assert plan.think_time_mode == mode
    assert plan.test_cases[0].steps[0].think_time == 0.5


def test_an_unknown_think_mode_is_refused(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["run", "--url", "http://127.0.0.1:1/", "--think-mode", "gaussian"])

    assert exc.value.code == 2
    assert "invalid choice: 'gaussian'" in capsys.readouterr().err


def test_a_private_address_exits_2_before_any_traffic(monkeypatch, capsys):
    # Belt and braces: if the check were broken, the run would fail the test instead of sending traffic.
    monkeypatch.setattr(cli, "_execute", lambda *a: pytest.fail("the run started"))
    monkeypatch.setattr(socket.socket, "connect", lambda *a: pytest.fail("a connection was attempted"))

    code = cli.main(["run", "--url", "http://10.0.0.5:80/", "--users", "1", "--duration", "1", "--json"])

    assert code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "http://10.0.0.5:80 resolves to 10.0.0.5, which is not in the allowed targets" in captured.err


def test_a_name_that_rebinds_after_the_first_check_exits_2_with_the_reason(monkeypatch, capsys):
    # given: DNS that answers loopback to the CLI's check, then a private address to the runner's
    answers = iter([["127.0.0.1"], ["10.0.0.5"]])
    real = socket.getaddrinfo

    def rebinding(host, port, *args, **kwargs):
        if host != "rebind.test":
            return real(host, port, *args, **kwargs)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port)) for a in next(answers)]

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    monkeypatch.setattr(socket.socket, "connect", lambda *a: pytest.fail("a connection was attempted"))
    # when
    code = cli.main(["run", "--url", "http://rebind.test:8001/", "--users", "1", "--duration", "1", "--json"])
    # then
    assert code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "plimsoll: http://rebind.test:8001 resolves to 10.0.0.5, which is not in the allowed targets "
        "(127.0.0.0/8, ::1/128, localhost)\n"
    )


def test_the_allowlist_comes_from_the_environment_or_allow(other_target):
    url = f"{other_target.url}/"

    refused = run_cli("--url", url, "--duration", "0.2", env_allow="127.0.0.1/32")
    refused_by_flag = run_cli("--url", url, "--duration", "0.2", "--allow", "127.0.0.1/32")

    assert refused.returncode == refused_by_flag.returncode == 2
    assert "not in the allowed targets (127.0.0.1/32)" in refused.stderr
    assert other_target.served == 0


def test_a_plan_file_runs_and_prints_a_summary(target, tmp_path):
    plan = {
        "base_url": target.url,
        "test_cases": [{"name": "Browse", "steps": [{"name": "Home", "path": "/", "text_present": "Welcome"}]}],
        "profile": {"users": 20, "hold": 60},
    }
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))

    result = run_cli("--plan", str(path), "--users", "2", "--duration", "0.5")

    assert result.returncode == 0, result.stderr
    assert ": 2 users, 0.5 s hold" in result.stdout
    assert "errors 0 (0.00 %)" in result.stdout
    assert "0 s  users" in result.stderr  # a progress line per second


def test_a_bad_plan_file_names_the_field(tmp_path, capsys):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"base_url": "http://127.0.0.1:1", "test_cases": [], "profile": {}}))

    code = cli.main(["run", "--plan", str(path)])

    assert code == 2
    assert "test_cases: must be a non-empty list" in capsys.readouterr().err


def test_a_bad_allowlist_is_named(capsys):
    code = cli.main(["run", "--url", "http://127.0.0.1:1/", "--allow", "127.0.0.0/8,not a host"])

    assert code == 2
    assert "'not a host' is neither" in capsys.readouterr().err
