"""A command for pipelines: start a plan's run, wait for it, write JUnit XML, exit with its outcome.

Only the standard library, so a CI job needs nothing but Python 3 and this file::

    PLIMSOLL_TOKEN=plim_… python -m portal.client run --url https://plimsoll.example \
        --plan CODE --wait --junit junit.xml

Exit codes: 0 passed (or done: a capacity search that found its capacity), 1 thresholds failed,
2 error, partial, cancelled (or the API refused), 3 timed out, 4 could not tell (Plimsoll stayed
unreachable, or answered 5xx, for more than OUTAGE_S while the run was being waited for), 5 incomplete
(the run achieved materially less load than planned, so it was not judged: run it again).
"""

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request

PASSED, FAILED, ERROR, TIMED_OUT, COULD_NOT_TELL, INCOMPLETE = 0, 1, 2, 3, 4, 5
# The server holds each call this long at most while the run goes on (its long-poll limit is 60 s).
POLL_S = 30
# While waiting, a portal that is unreachable or answers 5xx (its database or broker restarting)
# is asked again every RETRY_S; after OUTAGE_S of nothing but failures the outcome is unknown.
OUTAGE_S = 60.0
RETRY_S = 2.0


class ApiError(Exception):
    def __init__(self, message: str, *, transient: bool = False):
        super().__init__(message)
        # A network error or a 5xx: the portal (or what it stands on) may be back in a moment.
        self.transient = transient


def _request(method: str, url: str, token: str, *, timeout: float = POLL_S + 30) -> tuple[int, bytes]:
    req = urllib.request.Request(url, method=method, headers={"Authorization": f"Bearer {token}"})
    if method == "POST":
        req.add_header("Content-Type", "application/json")
        req.data = b"{}"
    try:
        with urllib.request.urlopen(req, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        body = exc.read()
        try:
            detail = json.loads(body).get("detail") or body.decode(errors="replace")
        except (ValueError, AttributeError):
            detail = body.decode(errors="replace")[:500]
        raise ApiError(f"{method} {url}: HTTP {exc.code}: {detail}", transient=exc.code >= 500) from None
    except (urllib.error.URLError, OSError) as exc:
        raise ApiError(f"{method} {url}: {exc}", transient=True) from None


def _json(method: str, url: str, token: str, **kwargs) -> dict:
    return json.loads(_request(method, url, token, **kwargs)[1])


def _say(message: str) -> None:
    print(message, flush=True)


def outcome(run: dict) -> int:
    if run["status"] in ("passed", "done"):
        return PASSED
    if run["status"] == "failed":
        return FAILED
    if run["status"] == "incomplete":
        return INCOMPLETE
    return ERROR


def run_command(args, token: str) -> int:
    base = args.url.rstrip("/")
    run = _json("POST", f"{base}/api/v1/plans/{args.plan}/runs/", token)
    _say(f"Run #{run['number']} of {run['plan_name']} started: {run['web_url']}")
    if not args.wait:
        return PASSED
    deadline = time.monotonic() + args.timeout
    status = run["status"]
    failing_since = None
    while run["is_active"]:
        left = deadline - time.monotonic()
        if left <= 0:
            _say(f"Run #{run['number']} still {run['status']} after {args.timeout:.0f} s: giving up waiting.")
            return TIMED_OUT
        try:
            run = _json("GET", f"{run['url']}?wait={min(POLL_S, max(1, int(left)))}", token)
        except ApiError as exc:
            if not exc.transient:
                raise
            failing_since = failing_since or time.monotonic()
            if time.monotonic() - failing_since > OUTAGE_S:
                _say(f"Could not tell how run #{run['number']} ended: {exc} (for more than {OUTAGE_S:.0f} s).")
                return COULD_NOT_TELL
            _say(f"Plimsoll did not answer ({exc}); asking again in {RETRY_S:.0f} s.")
            time.sleep(RETRY_S)
            continue
        failing_since = None
        if run["status"] != status:
            status = run["status"]
            _say(f"Run #{run['number']}: {status}")
    for t in run.get("thresholds") or []:
        mark = "ok  " if t["passed"] else "FAIL"
        actual = "nothing measured" if t["actual"] is None else f"{t['actual']:g} {t['unit']}"
        _say(f"  {mark} {t['window']}: {t['name']} {actual} (limit {t['op']} {t['limit']:g} {t['unit']})")
    if run.get("error_message"):
        _say(f"  {run['error_message']}")
    if verdict := run.get("baseline_verdict"):  # a scheduled plan's run, once judged against its baseline
        _say(f"  Against the baseline: {verdict['verdict'].replace('_', ' ')}. {verdict['headline']}")
    if args.junit:
        _status, body = _request("GET", f"{run['url']}junit.xml", token)
        with open(args.junit, "wb") as f:
            f.write(body)
        _say(f"JUnit XML written to {args.junit}")
    _say(f"Run #{run['number']} {run['status']}: {run['web_url']}")
    return outcome(run)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m portal.client", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="start a plan's run (token from PLIMSOLL_TOKEN)")
    run.add_argument("--url", required=True, help="Plimsoll's base URL, e.g. https://plimsoll.example")
    run.add_argument("--plan", required=True, help="the plan's code (from its page or the API)")
    run.add_argument("--wait", action="store_true", help="wait for the run to end; exit with its outcome")
    run.add_argument("--timeout", type=float, default=3600, help="seconds to wait at most (default 3600)")
    run.add_argument("--junit", metavar="FILE", help="with --wait: write the run's JUnit XML here")
    args = parser.parse_args(argv)
    token = os.environ.get("PLIMSOLL_TOKEN", "").strip()
    if not token:
        print("Set PLIMSOLL_TOKEN to an API token (Tokens page, or manage.py create_token).", file=sys.stderr)
        return ERROR
    try:
        return run_command(args, token)
    except ApiError as exc:
        print(exc, file=sys.stderr)
        return ERROR


if __name__ == "__main__":
    sys.exit(main())
