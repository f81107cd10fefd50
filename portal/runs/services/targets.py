"""Target safety and one-run-at-a-time: the allowlist, and the run that holds an environment or a target."""

import logging

from django.db import connection

from workers.engine.targets import BadTargetURL, TargetNotAllowed, check_url, parse_target_url

from ..models import (
    Run,
)

log = logging.getLogger(__name__)
Status = Run.Status


class RunError(Exception):
    """A run cannot be created or started; the message is for the user."""


def allowlist():
    """Where load may go (PLIMSOLL_ALLOWED_TARGETS) without the site's own services: the checks before a run
    and, handed to the engine by the shard task, every connection it opens (workers/engine/targets.py)."""
    from portal.outbound import targets_allowlist

    return targets_allowlist()


class EnvironmentBusy(RunError):
    """Another run is on the environment: two runs never overlap on one system under test."""

    def __init__(self, run: Run):
        self.run = run
        super().__init__(
            f"Run #{run.number} ({run.plan_name}) is on the environment “{run.environment_name}” now: "
            "two runs never share a system under test, because each would measure the other's load. "
            "Wait for it to end, or stop it."
        )


def websocket_targets(snapshot: dict) -> list[tuple[str, str]]:
    """(URL, "WebSocket step “…” of “…”") of each WebSocket step of an engine plan that names its own
    ws:// or wss:// origin: connections beyond the base URL, checked before a run like the base URL."""
    found = []
    for case in snapshot.get("test_cases") or []:
        for step in case.get("steps") or []:
            path = str(step.get("path", ""))
            if step.get("websocket") is not None and (path[:5].lower() == "ws://" or path[:6].lower() == "wss://"):
                found.append((path, f"WebSocket step “{step.get('name', '')}” of “{case.get('name', '')}”"))
    return found


def check_targets(base_url: str, snapshot: dict | None = None) -> None:
    """The allowlist check of a run: its base URL, then every WebSocket step's own origin.

    Raises TargetNotAllowed (the step named) or OSError, as ``check_url``.
    """
    allow = allowlist()
    check_url(base_url, allow)
    for url, where in websocket_targets(snapshot or {}):
        try:
            check_url(url, allow)
        except TargetNotAllowed as exc:
            raise TargetNotAllowed(f"{exc} (the {where})") from None


def target_refusal(base_url: str, snapshot: dict | None = None) -> str | None:
    """Why a run against ``base_url`` would be refused at start (the allowlist), or None.

    ``snapshot``: the engine plan, whose WebSocket steps may connect to ws:// or wss:// origins of
    their own, checked the same way. The start task checks again (DNS may change in between); the
    API asks first, so that a pipeline gets the reason in its answer (422) instead of a run that
    ends in error.
    """
    try:
        check_targets(base_url, snapshot)
    except TargetNotAllowed as exc:
        return f"Target refused, no request was sent: {exc}"
    except OSError as exc:
        return f"Cannot resolve the target {base_url}: {exc}"
    return None


def active_run_on(environment_id: int) -> Run | None:
    """The run that holds the environment now, if any (queued runs hold it too)."""
    return Run.objects.filter(environment_id=environment_id, status__in=Run.ACTIVE).order_by("id").first()


class TargetBusy(EnvironmentBusy):
    """Another run loads the same target (scheme, host, port) through another environment."""

    def __init__(self, run: Run, origin: str, *, visible: bool = True):
        self.run = run
        # Another team's run is not named (its project is a 404 to this user), only that it exists.
        holder = (
            f"Run #{run.number} ({run.plan_name}) of project “{run.project.name}”, through the environment "
            f"“{run.environment_name}”,"
            if visible
            else "A run of another team"
        )
        RunError.__init__(
            self,
            f"{holder} is loading {origin} now: two runs never share a system under test, "
            "because each would measure the other's load. Wait for it to end, or stop it.",
        )


def _target_origin(base_url: str) -> str | None:
    """``scheme://host:port`` of a base URL, the unit of one-run-at-a-time (None when it does not parse)."""
    try:
        return parse_target_url(base_url).origin
    except BadTargetURL:
        return None


def active_run_on_target(base_url: str) -> Run | None:
    """The active run, on any environment, whose snapshot loads the same scheme, host and port.

    Takes a transaction-scoped advisory lock on the target first, so two runs created at once
    on two environments pointing at one system cannot both pass the check.
    """
    origin = _target_origin(base_url)
    if origin is None:
        return None

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [f"plimsoll-target:{origin}"])
    # SQLite (the embedded default) needs no lock: its transactions are IMMEDIATE, so writers queue.
    # Active runs are few (one per target), so comparing their origins in Python is cheap.
    for run in Run.objects.filter(status__in=Run.ACTIVE).select_related("project__team").order_by("id"):
        if _target_origin(run.plan_snapshot.get("base_url", "")) == origin:
            return run
    return None
