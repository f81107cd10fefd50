"""A command for pipelines: start a plan's run, wait for it and its verdict, write JUnit XML and a Markdown
summary, exit with its outcome.

Only the standard library, so a CI job needs nothing but Python 3 and this file::

    PLIMSOLL_TOKEN=plim_… python -m portal.client run --url https://plimsoll.example \
        --plan CODE --wait --junit junit.xml --summary-md summary.md \
        --fail-on regression,degradation --label build=$SHA --label branch=$BRANCH

Exit codes (docs/ci.md):
  0  passed (or done, or finished without thresholds)
  1  thresholds failed
  2  the run ended in error, partial or cancelled (by someone else)
  3  timed out (--timeout): the client stopped the run it started
  4  could not tell: Plimsoll stayed unreachable (or answered 5xx) for more than OUTAGE_S while waiting,
     or the verdict a --fail-on needs did not come
  5  Plimsoll unreachable, or it refused the request (token, plan, a busy environment, bad labels)
  6  regressed against the plan's baseline (with --fail-on regression)
  7  degradation found in the soak (with --fail-on degradation)
  8  incomplete: materially less load than planned, so the run was not judged (always; naming it in
     --fail-on is accepted)
  9  stopped by its criteria: the target was plainly broken (a stop criterion of the plan broke), always
  130, 143  interrupted (SIGINT, SIGTERM): the client stopped the run it started
When several apply, the first in this order wins: 2, 1, 6, 7, 8.
"""

import argparse
import json
import os
import random
import signal
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from http.client import HTTPMessage

PASSED, FAILED, ERROR, TIMED_OUT, COULD_NOT_TELL, REFUSED = 0, 1, 2, 3, 4, 5
REGRESSION, DEGRADATION, INCOMPLETE, STOPPED = 6, 7, 8, 9
FAIL_ON = {"regression": REGRESSION, "degradation": DEGRADATION, "incomplete": INCOMPLETE}
# The server holds each call this long at most while the run goes on (its long-poll limit is 60 s).
POLL_S = 30
# While waiting, a portal that is unreachable or answers 5xx (its database or broker restarting)
# is asked again every RETRY_S; after OUTAGE_S of nothing but failures the outcome is unknown.
OUTAGE_S = 60.0
RETRY_S = 2.0
# A busy environment (409) is asked again this often with --wait-for-environment.
BUSY_RETRY_S = 5.0
# The verdict is computed on the bookkeeping queue after the run ends: asked for this often.
VERDICT_POLL_S = 2.0
# A 429 without a usable Retry-After waits this long.
THROTTLED_S = 5.0
# Every call waits out a 429 (its Retry-After) and asks again, for this long at most in all (while
# waiting for a run, until --timeout instead): the start, the plan's look-up, the JUnit download alike.
THROTTLE_BUDGET_S = 300.0


class ApiError(Exception):
    def __init__(self, message: str, *, status: int = 0, transient: bool = False, retry_after: float | None = None):
        super().__init__(message)
        self.status = status
        # A network error or a 5xx: the portal (or what it stands on) may be back in a moment.
        self.transient = transient
        # 429: the seconds the server asked for (Retry-After).
        self.retry_after = retry_after


class Interrupted(Exception):
    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _retry_after(value: str | None) -> float:
    try:
        return max(0.0, float(value))
    except (TypeError, ValueError):
        return THROTTLED_S  # absent, or an HTTP date: wait a little


def _request(
    method: str,
    url: str,
    token: str,
    *,
    body: dict | None = None,
    timeout: float = POLL_S + 30,
    until: float | None = None,
) -> tuple[int, bytes, HTTPMessage]:
    """One call; a 429 is waited out (its Retry-After) and the call made again while that ends before
    ``until`` (THROTTLE_BUDGET_S from now by default). A throttled request was refused before anything
    was done, so asking again is safe for a POST too."""
    until = time.monotonic() + THROTTLE_BUDGET_S if until is None else until
    while True:
        try:
            return _request_once(method, url, token, body=body, timeout=timeout)
        except ApiError as exc:
            if exc.retry_after is None or time.monotonic() + exc.retry_after > until:
                raise
            path = urllib.parse.urlsplit(url).path
            _say(f"Plimsoll asks to slow down (429 on {method} {path}); asking again in {exc.retry_after:.0f} s.")
            # Up to a tenth more (1 s at most), at random: pipelines throttled together do not all come back
            # in the same instant, where all but the limit's worth would be refused again.
            time.sleep(exc.retry_after + random.uniform(0, min(1.0, exc.retry_after / 10)))


def _request_once(method: str, url: str, token: str, *, body: dict | None, timeout: float):
    req = urllib.request.Request(url, method=method, headers={"Authorization": f"Bearer {token}"})
    if method == "POST":
        req.add_header("Content-Type", "application/json")
        req.data = json.dumps(body or {}).encode()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as response:
            return response.status, response.read(), response.headers
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        try:
            detail = json.loads(raw).get("detail") or raw.decode(errors="replace")
        except (ValueError, AttributeError):
            detail = raw.decode(errors="replace")[:500]
        retry_after = _retry_after(exc.headers.get("Retry-After")) if exc.code == 429 else None
        raise ApiError(
            f"{method} {url}: HTTP {exc.code}: {detail}",
            status=exc.code,
            transient=exc.code >= 500,
            retry_after=retry_after,
        ) from None
    except (urllib.error.URLError, OSError) as exc:
        raise ApiError(f"{method} {url}: {exc}", transient=True) from None


def _json(method: str, url: str, token: str, **kwargs) -> dict:
    return json.loads(_request(method, url, token, **kwargs)[1])


def _say(message: str) -> None:
    print(message, flush=True)


def _sleep(seconds: float, deadline: float | None = None) -> None:
    if deadline is not None:
        seconds = min(seconds, max(0.0, deadline - time.monotonic()))
    time.sleep(seconds)


class Waiter:
    """GETs while waiting: through an outage (OUTAGE_S) and a throttle (429, Retry-After) alike."""

    def __init__(self, token: str, deadline: float):
        self.token, self.deadline = token, deadline
        # A long-poll the server answered at once (X-Plimsoll-Wait: capped): the Retry-After it asked for.
        self.capped_for: float | None = None

    def get(self, url: str) -> dict | None:
        """The answer, or None when the portal stayed unreachable for OUTAGE_S (raises on a refusal)."""
        failing_since = None
        while True:
            try:
                _status, raw, headers = _request("GET", url, self.token, until=self.deadline)
            except ApiError as exc:
                if exc.retry_after is not None:  # still throttled when --timeout comes: could not tell
                    _say(f"Plimsoll asks to slow down (429) past --timeout: {exc}")
                    _sleep(exc.retry_after, self.deadline)
                    return None
                if not exc.transient:
                    raise
                failing_since = failing_since or time.monotonic()
                if time.monotonic() - failing_since > OUTAGE_S:
                    _say(f"Plimsoll did not answer for more than {OUTAGE_S:.0f} s: {exc}")
                    return None
                _say(f"Plimsoll did not answer ({exc}); asking again in {RETRY_S:.0f} s.")
                time.sleep(RETRY_S)
                continue
            capped = headers.get("X-Plimsoll-Wait") == "capped"
            self.capped_for = _retry_after(headers.get("Retry-After")) if capped else None
            return json.loads(raw)


def _labels(pairs: list[str]) -> dict:
    labels = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--label {pair!r}: write name=value, e.g. --label build=3f2a1c")
        labels[key] = value
    return labels


def _results(url: str, token: str) -> list[dict]:
    """Every item of a paginated list."""
    items = []
    while url:
        page = _json("GET", url, token)
        items += page.get("results", [])
        url = page.get("next")
    return items


def resolve_plan(base: str, token: str, plan: str, project: str | None) -> str:
    """The plan's code: given as such, or found by its project's name and its own name."""
    if not project:
        return plan
    projects = [p for p in _results(f"{base}/api/v1/projects/", token) if p["name"] == project]
    if not projects:
        raise ApiError(f"No project named “{project}” in your teams.", status=404)
    query = urllib.parse.urlencode({"project": projects[0]["code"]})
    plans = [p for p in _results(f"{base}/api/v1/plans/?{query}", token) if p["name"] == plan]
    if not plans:
        raise ApiError(f"No plan named “{plan}” in the project “{project}”.", status=404)
    return plans[0]["code"]


def start(base: str, token: str, plan_code: str, body: dict, wait_for_environment: float) -> dict:
    """Starts the run; a busy environment (409) is waited for up to ``wait_for_environment`` seconds."""
    url = f"{base}/api/v1/plans/{plan_code}/runs/"
    until = time.monotonic() + wait_for_environment
    while True:
        try:
            return _json("POST", url, token, body=body)  # a 429 is waited out in _request
        except ApiError as exc:
            left = until - time.monotonic()
            if exc.status == 409 and left > 0:
                _say(f"The environment is busy ({exc}); trying again in {BUSY_RETRY_S:.0f} s ({left:.0f} s left).")
                _sleep(BUSY_RETRY_S, until)
                continue
            raise


def stop(run: dict, token: str, why: str) -> None:
    try:
        # A cancelled CI job is killed soon after its signal: a throttled stop is asked again for 30 s at most.
        _request("POST", f"{run['url']}stop/", token, timeout=30, until=time.monotonic() + 30)
        _say(f"Stopped run #{run['number']} ({why}): {run['web_url']}")
    except ApiError as exc:
        _say(f"Could not stop run #{run['number']} ({why}): {exc}. Stop it at {run['web_url']}")


def wait_for_end(run: dict, waiter: Waiter) -> dict | None:
    status = run["status"]
    while run["is_active"]:
        left = waiter.deadline - time.monotonic()
        if left <= 0:
            return run
        answer = waiter.get(f"{run['url']}?wait={min(POLL_S, max(1, int(left)))}")
        if answer is None:
            return None
        run = answer
        if run["status"] != status:
            status = run["status"]
            _say(f"Run #{run['number']}: {status}")
        if run["is_active"] and waiter.capped_for is not None:
            # The server's long-polls were all taken, so it answered at once: asking again straight
            # away would make this a busy loop against a crowded server.
            _sleep(waiter.capped_for, waiter.deadline)
    return run


def wait_for_verdict(run: dict, waiter: Waiter) -> dict:
    """The run once its verdict against the baseline is known (or the deadline passed: still pending)."""
    while (run.get("baseline_verdict") or {}).get("verdict") == "pending" and time.monotonic() < waiter.deadline:
        _sleep(VERDICT_POLL_S, waiter.deadline)
        answer = waiter.get(run["url"])
        if answer is None:
            break
        run = answer
    return run


def degraded(run: dict) -> bool:
    """A degradation in the run itself, or a soak figure regressed against the baseline's."""
    if ((run.get("summary") or {}).get("degradation") or {}).get("degraded"):
        return True
    rows = (run.get("baseline_verdict") or {}).get("rows") or []
    return any(r.get("soak") and r["verdict"] == "regressed" for r in rows)


def outcome(run: dict, fail_on: set[str] = frozenset()) -> int:
    status, verdict = run["status"], run.get("baseline_verdict") or {}
    if status == "stopped":
        # A stop criterion broke: the target was plainly broken, so never passed (issue 24), whatever --fail-on says.
        return STOPPED
    if status not in ("passed", "done", "finished", "failed", "incomplete"):
        return ERROR
    if status == "incomplete":
        # Never a verdict on load that did not run (issue 25): its own code, whatever --fail-on says.
        return INCOMPLETE
    if status == "failed":
        return FAILED
    if "regression" in fail_on and verdict.get("verdict") == "regressed":
        return REGRESSION
    if "degradation" in fail_on and degraded(run):
        return DEGRADATION
    return PASSED


def summary_markdown(run: dict) -> str:
    """A pull-request comment: the headline, the moved figures as a table, the run's link."""
    verdict = run.get("baseline_verdict") or {}
    lines = [f"### Plimsoll: run #{run['number']} of {run['plan_name']}: {run['status']}", ""]
    if labels := run.get("labels"):
        lines += [" · ".join(f"`{k}: {v}`" for k, v in labels.items()), ""]
    if stopped := run.get("stopped_by"):
        lines += [f"🛑 **Stopped by its criteria:** {stopped['sentence']}", ""]
    if verdict:
        mark = {"regressed": "🔴", "improved": "🟢"}.get(verdict["verdict"], "⚪")
        provisional = " (provisional)" if verdict.get("provisional") else ""
        lines += [f"{mark} **{verdict['headline']}**{provisional}", ""]
        moved = [r for r in verdict.get("rows") or [] if r["verdict"] in ("regressed", "improved")]
        if moved:
            lines += ["| Page | Figure | Baseline | This run | Change | Verdict |", "|" + " --- |" * 6]
            for r in moved:
                page = "Soak" if r.get("soak") else (r["page"] or "All pages")
                cells = (page, r["figure"], r["before"], r["after"], r["change"], r["verdict"])
                lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
            lines.append("")
        if verdict.get("method"):
            lines += [f"<sub>{verdict['method']}</sub>", ""]
    failed = [t for t in run.get("thresholds") or [] if t["passed"] is False]
    for t in failed:
        actual = "nothing measured" if t["actual"] is None else f"{t['actual']:g} {t['unit']}"
        lines.append(f"- ❌ {t['window']}: {t['name']} {actual} (limit {t['op']} {t['limit']:g} {t['unit']})")
    if run.get("error_message"):
        lines.append(f"- {run['error_message']}")
    lines += ["", f"[Run #{run['number']} in Plimsoll]({run['web_url']})", ""]
    return "\n".join(lines)


def report(run: dict, args, token: str) -> None:
    if stopped := run.get("stopped_by"):
        _say(f"  STOPPED by its criteria: {stopped['text']} broke: {stopped['sentence']}")
    for t in run.get("thresholds") or []:
        mark = "ok  " if t["passed"] else "n/a " if t["passed"] is None else "FAIL"
        actual = "nothing measured" if t["actual"] is None else f"{t['actual']:g} {t['unit']}"
        _say(f"  {mark} {t['window']}: {t['name']} {actual} (limit {t['op']} {t['limit']:g} {t['unit']})")
    if run.get("error_message"):
        _say(f"  {run['error_message']}")
    if verdict := run.get("baseline_verdict"):
        _say(f"  Against the baseline: {verdict['verdict'].replace('_', ' ')}. {verdict['headline']}")
    if args.junit:
        _status, body, _headers = _request("GET", f"{run['url']}junit.xml", token)
        with open(args.junit, "wb") as f:
            f.write(body)
        _say(f"JUnit XML written to {args.junit}")
    if args.summary_md:
        with open(args.summary_md, "w", encoding="utf-8") as f:
            f.write(summary_markdown(run))
        _say(f"Markdown summary written to {args.summary_md}")


def run_command(args, token: str) -> int:
    base = args.url.rstrip("/")
    fail_on = {f for f in (args.fail_on or "").split(",") if f}
    body = {"labels": _labels(args.label)}
    if args.note:
        body["note"] = args.note
    try:
        plan_code = resolve_plan(base, token, args.plan, args.project)
        run = start(base, token, plan_code, body, args.wait_for_environment)
    except ApiError as exc:
        print(f"Plimsoll refused or could not be reached: {exc}", file=sys.stderr)
        return REFUSED
    except Interrupted as exc:
        _say(f"Interrupted ({exc}) before a run started: nothing to stop.")
        return 128 + exc.signum
    _say(f"Run #{run['number']} of {run['plan_name']} started: {run['web_url']}")
    if not args.wait:
        return PASSED
    waiter = Waiter(token, time.monotonic() + args.timeout)
    try:
        ended = wait_for_end(run, waiter)
        if ended is None:
            _say(f"Could not tell how run #{run['number']} ended.")
            return COULD_NOT_TELL
        if ended["is_active"]:
            _say(f"Run #{run['number']} still {ended['status']} after {args.timeout:.0f} s: stopping it.")
            stop(ended, token, f"--timeout {args.timeout:g} s")
            return TIMED_OUT
        run = wait_for_verdict(ended, waiter)
    except Interrupted as exc:
        stop(run, token, f"the job was interrupted ({exc})")
        return 128 + exc.signum
    except ApiError as exc:
        print(f"Plimsoll refused: {exc}", file=sys.stderr)
        return REFUSED
    report(run, args, token)
    code = outcome(run, fail_on)
    pending = (run.get("baseline_verdict") or {}).get("verdict") == "pending"
    if pending and fail_on & {"regression", "degradation"} and code == PASSED:
        _say(f"Run #{run['number']}'s verdict against the baseline was still pending after {args.timeout:.0f} s.")
        return COULD_NOT_TELL
    _say(f"Run #{run['number']} {run['status']}: {run['web_url']} (exit {code})")
    return code


def _fail_on(text: str) -> str:
    unknown = {f for f in text.split(",") if f} - set(FAIL_ON)
    if unknown:
        causes = ", ".join(sorted(unknown))
        raise argparse.ArgumentTypeError(f"unknown cause {causes}: choose from {', '.join(FAIL_ON)}")
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m portal.client",
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="start a plan's run (token from PLIMSOLL_TOKEN)")
    run.add_argument("--url", required=True, help="Plimsoll's base URL, e.g. https://plimsoll.example")
    run.add_argument("--plan", required=True, help="the plan's code, or its name with --project")
    run.add_argument("--project", help="the project's name: --plan is then the plan's name")
    run.add_argument("--label", action="append", metavar="NAME=VALUE", help="a run label, e.g. build=3f2a1c (repeat)")
    run.add_argument("--note", help="a note stored with the run")
    run.add_argument("--wait", action="store_true", help="wait for the run and its verdict; exit with the outcome")
    run.add_argument("--timeout", type=float, default=3600, help="seconds to wait at most, then stop the run")
    run.add_argument("--junit", metavar="FILE", help="with --wait: write the run's JUnit XML here")
    run.add_argument("--summary-md", metavar="FILE", help="with --wait: write a Markdown summary here")
    run.add_argument(
        "--fail-on",
        type=_fail_on,
        default="",
        metavar="CAUSES",
        help="with --wait: also fail on regression, degradation, incomplete (comma-separated)",
    )
    run.add_argument(
        "--wait-for-environment",
        type=float,
        default=0,
        metavar="SECONDS",
        help="queue behind a run already on the environment for up to this long instead of failing",
    )
    args = parser.parse_args(argv)
    token = os.environ.get("PLIMSOLL_TOKEN", "").strip()
    if not token:
        print("Set PLIMSOLL_TOKEN to an API token (Tokens page, or manage.py create_token).", file=sys.stderr)
        return REFUSED

    def interrupted(signum, frame):
        raise Interrupted(signum)

    previous = {s: signal.signal(s, interrupted) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        return run_command(args, token)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


if __name__ == "__main__":
    sys.exit(main())
