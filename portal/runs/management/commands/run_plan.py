"""Starts a plan from the shell and, with --wait, waits for its verdict (for scripts and CI).

Exit codes: 0 passed, 1 failed thresholds, 2 error / partial / cancelled, 3 timed out waiting,
4 could not tell: the database stayed unreachable for longer than OUTAGE_LIMIT_S while waiting
(the run may still be going; its page shows how it ended), 8 incomplete, 9 stopped by its criteria.
"""

import json
import time

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError, connection

from portal.projects.models import Plan
from portal.runs.models import Run
from portal.runs.services import RunError, run_create

# How long --wait waits through a database outage before it exits with COULD_NOT_TELL.
OUTAGE_LIMIT_S = 60
COULD_NOT_TELL = 4


class Command(BaseCommand):
    help = "Starts a run of a plan (by project and plan name) as a user; --wait prints the summary as JSON."

    def add_arguments(self, parser):
        parser.add_argument("project", help="project name")
        parser.add_argument("plan", help="plan name")
        parser.add_argument("--user", required=True, help="username the run is started as (must be an editor)")
        parser.add_argument("--wait", action="store_true", help="wait until the run ends and print its summary")
        parser.add_argument("--timeout", type=float, default=3600, help="seconds to wait at most (with --wait)")

    def handle(self, *args, project, plan, user, wait, timeout, **options):
        from portal.accounts.access import require_write, scoped

        try:
            actor = get_user_model().objects.get(username=user)
        except get_user_model().DoesNotExist:
            raise CommandError(f"no user called {user!r}") from None
        try:
            plan_obj = scoped(Plan.objects.select_related("project", "environment"), actor).get(
                project__name=project, name=plan
            )
        except Plan.DoesNotExist:
            raise CommandError(f"{user} has no plan {plan!r} in a project {project!r}") from None
        try:
            require_write(actor, plan_obj)
            run = run_create(plan=plan_obj, user=actor)
        except (RunError, Exception) as exc:
            raise CommandError(str(exc) or type(exc).__name__) from None
        run.refresh_from_db()
        if run.status == Run.Status.ERROR:
            raise CommandError(f"Run #{run.number} could not start: {run.error_message}")
        self.stderr.write(f"Run #{run.number} queued: {run.get_absolute_url()}")
        if not wait:
            return
        deadline = time.monotonic() + timeout
        unreachable_since = None
        while time.monotonic() < deadline:
            try:
                run.refresh_from_db()
            except DatabaseError as exc:
                # An outage of the database (or of its network) is waited through, up to a limit.
                connection.close()
                now = time.monotonic()
                if unreachable_since is None:
                    unreachable_since = now
                    self.stderr.write(f"The database is unreachable ({str(exc).strip()}); waiting for it.")
                elif now - unreachable_since > OUTAGE_LIMIT_S:
                    self.stderr.write(
                        f"Could not tell how run #{run.number} ended: the database has been unreachable for "
                        f"{OUTAGE_LIMIT_S} s. See {run.get_absolute_url()} once it is back."
                    )
                    raise SystemExit(COULD_NOT_TELL) from None
                time.sleep(1)
                continue
            if unreachable_since is not None:
                self.stderr.write("The database is back.")
                unreachable_since = None
            if run.status in Run.FINISHED:
                break
            time.sleep(0.5)
        else:
            self.stderr.write(f"Run #{run.number} still {run.status} after {timeout:.0f} s")
            raise SystemExit(3)
        self.stdout.write(
            json.dumps(
                {
                    "run": str(run.code),
                    "number": run.number,
                    "status": run.status,
                    "error": run.error_message,
                    "summary": run.summary,
                },
                indent=2,
            )
        )
        if run.status not in (Run.Status.PASSED, Run.Status.DONE, Run.Status.FINISHED):
            # 8: incomplete, as portal/client.py (the run achieved materially less load than planned).
            raise SystemExit({Run.Status.FAILED: 1, Run.Status.INCOMPLETE: 8, Run.Status.STOPPED: 9}.get(run.status, 2))
