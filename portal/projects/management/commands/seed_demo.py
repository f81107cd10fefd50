"""Seeds the demo team, project, environment, test cases and plans (idempotent).

Only ``make run`` calls this: the demo account exists because someone asked for it,
never through migrations.
"""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

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
                "configuration": [
                    {"key": "search.index", "value": "off"},
                    {"key": "compression", "value": "off"},
                    {"key": "latency_ms", "value": "0"},
                ],
            },
        )
        if env.base_url != base_url:
            env.base_url = base_url
            env.save()
        Server.objects.get_or_create(
            environment=env, name="demo", defaults={"role": "web + database", "hardware": "this machine (loopback)"}
        )
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
        self.stdout.write(f"Demo ready: project “{project}” for user {DEMO_USERNAME} (password {DEMO_PASSWORD}).")
