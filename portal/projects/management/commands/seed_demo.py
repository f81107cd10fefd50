"""Seeds the demo team, project, environment, test cases, plans and a ready experiment (idempotent).

Only ``make run`` calls this: the demo account exists because someone asked for it,
never through migrations.
"""

import json

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from portal.history import services as history
from portal.history.models import Experiment, TuningChange, config_dict
from portal.projects.models import Environment, MixEntry, Plan, PlanLevel, Project, Server, Step, TestCase

DEMO_USERNAME = "demo"
DEMO_PASSWORD = "demo"

TEST_CASES = {
    "Browse articles": [
        {"name": "Home", "path": "/", "text_present": "Plimsoll demo", "think_time": 2.0},
        {"name": "Article list", "path": "/articles", "think_time": 2.0},
        {"name": "Article", "path": "/articles/7", "think_time": 3.0},
    ],
    "Search work items": [
        {"name": "Home", "path": "/", "text_present": "Plimsoll demo", "think_time": 1.0},
        {"name": "Search by area", "path": "/search?q=Area+042", "text_absent": "Traceback", "think_time": 2.0},
    ],
    # An authenticated path: the form's CSRF token is extracted and posted back with the login.
    "Log in and read account": [
        {
            "name": "Login form",
            "path": "/login",
            "think_time": 2.0,
            "extract": [{"name": "csrf", "source": "form_field", "expression": "csrfmiddlewaretoken"}],
        },
        {
            "name": "Log in",
            "method": "POST",
            "path": "/login",
            "body_type": "form",
            "body": "username=demo&password=demo&csrfmiddlewaretoken={{csrf}}",
            "text_present": "Welcome",
            "think_time": 3.0,
        },
        {"name": "Account", "path": "/account", "text_present": "Welcome", "think_time": 2.0},
    ],
}


# The demo target's knobs (demo/knobs.py) at their defaults, as a DBA would write them down. The
# index is named for what it is in the database (the knob that builds it is ``search.index``).
INITIAL_CONFIGURATION = [
    {"key": "db.index.work_items.area", "value": "off"},
    {"key": "tempdb.files", "value": "1"},
    {"key": "token_cache.cap", "value": "0"},
    {"key": "documents.storage", "value": "database"},
    {"key": "compression", "value": "off"},
    {"key": "latency_ms", "value": "0"},
    {"key": "web_garden.processes", "value": "1"},
]
# Keys earlier seeds wrote, under the name they have now.
RENAMED_KEYS = {"search.index": "db.index.work_items.area"}

SEARCH_PLAN = "Search: 20 users, 20 s"
# Issue 19: the tempdb story as a capacity search whose scalability model shows σ falling with 8 files.
TEMPDB_PLAN = "Capacity search: tempdb, 1 → 8 users"
TEMPDB_LEVELS = (1, 2, 3, 4, 6, 8)
EXPERIMENT_TITLE = "Index on work_items.area"
INDEX_CHANGE = {
    "category": TuningChange.Category.INDEX,
    "title": "Add index ix_work_items_area",
    "reason": "The TFS story: searches on a custom field (work_items.area) scanned the whole work-items table, "
    "so every search read every row and search pages took seconds under load. A nonclustered index on the "
    "field turns each search into an index lookup.",
    "reference": "https://learn.microsoft.com/en-us/sql/relational-databases/indexes/create-nonclustered-indexes",
    "hook_method": TuningChange.HookMethod.POST,
    "hook_body": json.dumps({"search.index": "on"}),
    "hook_content_type": "application/json",
}
INDEX_EDITS = [{"key": "db.index.work_items.area", "value": "on"}]


def initial_configuration(environment: Environment) -> list[dict]:
    """The demo environment's configuration with every demo knob present.

    Keys missing from an environment an earlier seed made are added at their defaults,
    values already there are kept. Once a tuning change has been applied the ledger owns
    the configuration, so it is left exactly as it is.
    """
    if environment.changes.filter(status=TuningChange.Status.APPLIED).exists():
        return environment.configuration
    current = config_dict(environment.configuration)
    for old, new in RENAMED_KEYS.items():
        if old in current and new not in current:
            current[new] = current.pop(old)
    wanted = [{"key": item["key"], "value": current.pop(item["key"], item["value"])} for item in INITIAL_CONFIGURATION]
    return wanted + [{"key": key, "value": value} for key, value in current.items()]


class Command(BaseCommand):
    help = "Creates the demo user, team and project (safe to run again: nothing is created twice)."

    def add_arguments(self, parser):
        parser.add_argument("--base-url", default="http://127.0.0.1:8001", help="where the demo target listens")

    @transaction.atomic
    def handle(self, *args, base_url, **options):
        User = get_user_model()
        user, created = User.objects.get_or_create(username=DEMO_USERNAME)
        if created:
            user.set_password(DEMO_PASSWORD)
            user.save()
        team = user.teams.get()
        if team.name != "Demo team":
            team.name = "Demo team"
            team.save()
        project, _ = Project.objects.get_or_create(
            team=team,
            name="Demo intranet",
            defaults={"description": "The bundled demo target, standing in for a slow intranet site."},
        )
        env, _ = Environment.objects.get_or_create(
            project=project,
            name="Demo target",
            defaults={
                "base_url": base_url,
                "description": "The bundled demo system under test (python -m demo), started by make run.",
                "configuration": INITIAL_CONFIGURATION,
            },
        )
        configuration = initial_configuration(env)
        # What Verify reads (portal/projects/drift.py): the knobs under the ledger's names (demo/app.py).
        config_url = f"{base_url}/_demo/config"
        if env.base_url != base_url or env.configuration != configuration or env.config_url != config_url:
            env.base_url = base_url
            env.configuration = configuration
            env.config_url = config_url
            env.save()
        server, _ = Server.objects.get_or_create(
            environment=env, name="demo", defaults={"role": "web + database", "hardware": "this machine (loopback)"}
        )
        # Server metrics (issue 14): the demo's own /metrics, so the first run already shows server charts.
        metrics_url = f"{base_url.rstrip('/')}/metrics"
        if (server.metrics_url, server.counter_set) != (metrics_url, "demo"):
            server.metrics_url, server.counter_set = metrics_url, "demo"
            server.save(update_fields=["metrics_url", "counter_set"])
        cases = {}
        for name, steps in TEST_CASES.items():
            tc, created = TestCase.objects.get_or_create(project=project, name=name)
            if created:
                for position, step in enumerate(steps):
                    Step.objects.create(test_case=tc, position=position, **step)
            cases[name] = tc
        plan, created = Plan.objects.get_or_create(
            project=project,
            name="Smoke: 20 users, 30 s",
            defaults={
                "environment": env,
                "description": "A quick look: 20 users browsing and searching.",
                "users": 20,
                "ramp_up": 5,
                "hold": 30,
                "ramp_down": 0,
                "threshold_apd_ms": 500,
                "threshold_p95_ms": 1500,
                "threshold_error_rate_pct": 1.0,
            },
        )
        if created:
            MixEntry.objects.create(plan=plan, test_case=cases["Browse articles"], weight=3, position=0)
            MixEntry.objects.create(plan=plan, test_case=cases["Search work items"], weight=1, position=1)
            MixEntry.objects.create(plan=plan, test_case=cases["Log in and read account"], weight=1, position=2)
        capacity, created = Plan.objects.get_or_create(
            project=project,
            name="Capacity: 10 → 80 users in steps",
            defaults={
                "environment": env,
                "description": "The Exchange suite's shape in miniature: four levels, each ramped, held and measured.",
                "profile_kind": Plan.ProfileKind.STEPS,
                "threshold_apd_ms": 500,
                "threshold_p95_ms": 1500,
                "threshold_error_rate_pct": 1.0,
            },
        )
        if created:
            for position, users in enumerate((10, 20, 40, 80)):
                PlanLevel.objects.create(
                    plan=capacity, position=position, users=users, ramp_up=10, hold=30, ramp_down=5, quiet=5
                )
            MixEntry.objects.create(plan=capacity, test_case=cases["Browse articles"], weight=3, position=0)
            MixEntry.objects.create(plan=capacity, test_case=cases["Search work items"], weight=1, position=1)
        search, created = Plan.objects.get_or_create(
            project=project,
            name=SEARCH_PLAN,
            defaults={
                "environment": env,
                "description": "Searches on the custom field work_items.area, short enough to run three times on "
                "either side of a change: the plan of the ready experiment.",
                "profile_kind": Plan.ProfileKind.CONSTANT,
                "users": 20,
                "hold": 20,
                "threshold_apd_ms": 500,
                "threshold_error_rate_pct": 1.0,
            },
        )
        if created:
            MixEntry.objects.create(plan=search, test_case=cases["Search work items"], weight=1, position=0)
        soak, created = Plan.objects.get_or_create(
            project=project,
            name="Soak: token cache, 20 users for 15 min",
            defaults={
                "environment": env,
                "description": "SharePoint's security-token cache in miniature: with token_cache.cap = 0 the cache "
                "grows with every page until its clean-up stalls requests (at about 100,000 pages, some 9 minutes "
                "in); the report marks the onset. Record a tuning change to token_cache.cap = 1024 (the story's "
                "-T4618) and run it again. The cache only empties when the demo's counters are reset.",
                "profile_kind": Plan.ProfileKind.CONSTANT,
                "users": 20,
                "hold": 900,
                "threshold_error_rate_pct": 1.0,
                "degradation_steady_s": 120,
                "degradation_sustain_s": 30,
                # Unattended at night: a dead target stops the run (the stall slows pages, it does not fail them).
                "stop_criteria": [{"metric": "error_rate_pct", "above": 50, "window_s": 60}],
            },
        )
        if created:
            home = cases.get("Home page")
            if home is None:
                home, _ = TestCase.objects.get_or_create(project=project, name="Home page")
                if not home.steps.exists():
                    Step.objects.create(test_case=home, position=0, name="Home", path="/", think_time=0.1)
            MixEntry.objects.create(plan=soak, test_case=home, weight=1, position=0)
        tempdb, created = Plan.objects.get_or_create(
            project=project,
            name=TEMPDB_PLAN,
            defaults={
                "environment": env,
                "description": "The MOSS story's tempdb allocation contention, as a capacity search: an article page "
                "(it allocates from tempdb) without think time, six short levels of 1 to 8 users. With "
                "tempdb.files = 1 a single user already keeps the one allocation lock busy, so throughput stays "
                "flat: the report's scalability model reads contention σ near 1 (a serialized step limits the "
                "site to about 180 pages/s whatever the hardware) and the search ends done at the last level "
                "within 30 ms. Record a tuning change to tempdb.files = 8 (one file per processor, -T1118), "
                "run it again and compare the two runs: σ falls to about 0, the change removed contention.",
                "profile_kind": Plan.ProfileKind.STEPS,
                "threshold_apd_ms": 30,
                "threshold_error_rate_pct": 1.0,
                "capacity_search": True,
            },
        )
        if created:
            article, _ = TestCase.objects.get_or_create(project=project, name="Article page")
            if not article.steps.exists():
                Step.objects.create(test_case=article, position=0, name="Article", path="/articles/7", think_time=0)
            for position, users in enumerate(TEMPDB_LEVELS):
                PlanLevel.objects.create(plan=tempdb, position=position, users=users, ramp_up=1, hold=5)
            MixEntry.objects.create(plan=tempdb, test_case=article, weight=1, position=0)
        self._experiment(user=user, project=project, env=env, plan=search, base_url=base_url)
        self._nightly_soak(project=project, plan=soak)
        self.stdout.write(f"Demo ready: project “{project}” for user {DEMO_USERNAME} (password {DEMO_PASSWORD}).")

    def _nightly_soak(self, *, project, plan) -> None:
        """The soak plan every night at 02:00 UTC, paused: a team enables it on the Schedules page."""
        from datetime import time

        from portal.schedules.services import schedule_save

        if project.schedules.filter(plan=plan).exists():
            return
        schedule_save(
            project=project,
            plan=plan,
            kind="daily",
            at_time=time(2, 0),
            every_hours=None,
            cron="",
            time_zone="UTC",
            enabled=False,
            ends_on=None,
            busy_wait_minutes=30,
            catch_up_hours=2,
        )

    def _experiment(self, *, user, project, env, plan, base_url) -> None:
        """The TFS story ready to run: 3 searches' trials, the index by its hook, 3 trials after.

        Created once; while it has not started, its hook follows the demo target's address.
        """
        hook_url = f"{base_url.rstrip('/')}/_demo/knobs"
        experiment = Experiment.objects.filter(project=project, title=EXPERIMENT_TITLE).select_related("change").first()
        if experiment is not None:
            change = experiment.change
            if change.status == TuningChange.Status.PLANNED and change.hook_url != hook_url:
                change.hook_url = hook_url
                change.save(update_fields=["hook_url", "updated_at"])
            return
        change = history.change_create(environment=env, user=user, edits=INDEX_EDITS, hook_url=hook_url, **INDEX_CHANGE)
        history.experiment_create(
            plan=plan,
            user=user,
            title=EXPERIMENT_TITLE,
            description="Does the index on the searched custom field make searches faster, beyond the noise "
            "between trials? Press Start: three baseline trials, the index built through the demo target's "
            "admin endpoint, three trials after, then the comparison.",
            trials=3,
            apply_mode=Experiment.ApplyMode.HOOK,
            change=change,
        )
