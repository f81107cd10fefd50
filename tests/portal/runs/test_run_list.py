"""The runs list at scale (issue 15, item 5): start order, filters that survive paging, links, constant queries."""

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from portal.history.models import TuningChange
from portal.projects.models import Environment, MixEntry, Plan, Project
from portal.runs.models import Run
from portal.runs.views import RUNS_PER_PAGE
from portal.schedules.models import RunVerdict
from tests.portal.runs.factories import plan_run

pytestmark = pytest.mark.django_db

BIG_SUMMARY_PAGES = 40  # each run's summary carries a pages table the list must not load


def _summary(apd, *, verdict="passed"):
    pages = [{"label": f"Page {i}", "apd_ms": apd, "p95_ms": apd * 2, "pages": 100} for i in range(BIG_SUMMARY_PAGES)]
    totals = {"apd_ms": apd, "p95_ms": apd * 2, "pages_per_s": 12.5, "error_rate_pct": 0.5}
    return {"verdict": verdict, "totals": totals, "pages": pages, "windows": [{"totals": totals}]}


@pytest.fixture
def other(team, test_case):
    """A second project of alice's team, with its own environment and plan."""
    project = Project.objects.create(team=team, name="Extranet")
    env = Environment.objects.create(project=project, name="Perf lab", base_url="http://127.0.0.1:8002")
    plan = Plan.objects.create(project=project, environment=env, name="Soak", users=3, ramp_up=1, hold=5)
    MixEntry.objects.create(plan=plan, test_case=test_case, weight=1)
    return plan


def make_run(plan, number, *, start=None, created=None, status=Run.Status.PASSED, user=None, summary=None, **kw):
    run = plan_run(
        plan,
        number=number,
        status=status,
        start_at=start,
        created_by=user,
        summary=summary,
        **kw,
    )
    if created is not None:
        Run.objects.filter(id=run.id).update(created_at=created)
    return run


def numbers(html: str) -> list[str]:
    """The runs of the list in order, as "project/#n" (links are unique per run)."""
    table = html.split('id="runs"', 1)[1].split("</table>", 1)[0]
    return re.findall(r'<a href="/runs/[^"]+/">#(\d+)</a>', table)


def test_the_list_is_in_start_order_across_projects_with_queued_runs_by_creation(alice_client, plan, other):
    now = timezone.now()
    make_run(plan, 7, start=now - timedelta(days=3))  # a high number, but old
    make_run(other, 1, start=now - timedelta(hours=1))  # another project's new run comes first
    make_run(plan, 8, start=now - timedelta(days=2))
    make_run(other, 2, status=Run.Status.QUEUED, created=now - timedelta(minutes=5))  # queued: by its creation
    html = alice_client.get(reverse("runs:list")).content.decode()
    assert numbers(html) == ["2", "1", "8", "7"]
    assert "(queued)" in html


def test_names_link_and_the_tuning_change_is_shown(alice_client, plan, alice):
    change = TuningChange.objects.create(
        environment=plan.environment,
        number=3,
        title="Add an index on the custom field",
        status=TuningChange.Status.APPLIED,
        applied_at=timezone.now(),
    )
    make_run(plan, 1, start=timezone.now(), tuning_change=change, user=alice, summary=_summary(120))
    make_run(plan, 2, start=timezone.now() - timedelta(hours=1))
    html = alice_client.get(reverse("runs:project", args=[plan.project.code])).content.decode()
    assert f'<a href="{plan.get_absolute_url()}">Smoke</a>' in html
    assert f'<a href="{plan.environment.get_absolute_url()}">Staging</a>' in html
    assert f'href="{change.get_absolute_url()}"' in html and "#3 Add an index on the custom field" in html
    assert "initial configuration" in html  # run #2 ran before any change
    assert "120 ms" in html and "240 ms" in html and ">alice<" in html


def test_each_filter_keeps_only_its_runs(alice_client, alice, bob, plan, other, team):
    now = timezone.now()
    a = make_run(plan, 1, start=now - timedelta(days=10), user=alice, summary=_summary(100))
    b = make_run(
        plan,
        2,
        start=now - timedelta(days=1),
        user=bob,
        status=Run.Status.FAILED,
        summary=_summary(900, verdict="failed"),
    )
    c = make_run(other, 1, start=now, user=alice, summary=_summary(50))
    d = make_run(other, 2, status=Run.Status.RUNNING, start=now)
    RunVerdict.objects.create(run=c, verdict=RunVerdict.Verdict.REGRESSED, headline="APD 40 → 50 ms")
    url = reverse("runs:list")

    def listed(**params):
        response = alice_client.get(url, params)
        assert response.status_code == 200
        html = response.content.decode()
        return sorted(numbers(html)) if 'id="runs"' in html else []

    def of(*runs):
        return sorted(str(r.number) for r in runs)

    assert listed() == of(a, b, c, d)
    assert listed(project=plan.project.code) == of(a, b)
    assert listed(plan=other.code) == of(c, d)
    assert listed(environment=other.environment.code) == of(c, d)
    assert listed(status="failed") == of(b)
    assert listed(status="active") == of(d)
    assert listed(verdict="passed") == of(a, c)
    assert listed(verdict="failed") == of(b)
    assert listed(verdict="baseline_regressed") == of(c)
    assert listed(started_by="bob") == of(b)
    day = timezone.localdate(now - timedelta(days=1))
    assert listed(since=day.isoformat(), until=day.isoformat()) == of(b)
    assert listed(since=timezone.localdate(now).isoformat()) == of(c, d)
    assert listed(plan=plan.code, started_by="alice") == of(a)


def test_bad_filters_say_why_and_a_foreign_choice_is_not_a_choice(alice_client, charlie, plan):
    make_run(plan, 1, start=timezone.now())
    foreign = Project.objects.create(team=charlie.teams.get(), name="Theirs")
    html = alice_client.get(reverse("runs:list"), {"project": foreign.code}).content.decode()
    assert "Select a valid choice" in html
    html = alice_client.get(reverse("runs:list"), {"since": "2026-11-20", "until": "2026-11-01"}).content.decode()
    assert "The end of the range is before its start." in html
    assert alice_client.get(reverse("runs:list"), {"since": "yesterday"}).status_code == 200
    # Theirs is not offered either.
    assert "Theirs" not in alice_client.get(reverse("runs:list")).content.decode()


def test_no_match_has_its_own_empty_state(alice_client, plan):
    make_run(plan, 1, start=timezone.now(), status=Run.Status.PASSED)
    html = alice_client.get(reverse("runs:list"), {"status": "error"}).content.decode()
    assert 'id="no-match"' in html and "No runs yet" not in html


def _bulk(plan, other, users, n, changes):
    """n finished runs over two projects, alternating users and changes, each with a large summary."""
    now = timezone.now()
    snapshot = plan.to_engine_dict()
    runs = []
    for i in range(n):
        p = plan if i % 2 else other
        runs.append(
            Run(
                project=p.project,
                number=i + 1,
                plan=p,
                environment=p.environment,
                plan_name=p.name,
                environment_name=p.environment.name,
                plan_snapshot=snapshot,
                status=Run.Status.FAILED if i % 7 == 0 else Run.Status.PASSED,
                start_at=now - timedelta(minutes=n - i),
                created_by=users[(i // 2) % len(users)],
                tuning_change=changes[i % len(changes)] if p is plan else None,
                summary=_summary(100 + i % 50, verdict="failed" if i % 7 == 0 else "passed"),
            )
        )
    Run.objects.bulk_create(runs, batch_size=1000)
    created = list(Run.objects.filter(number__in=range(n - 40, n + 1)).order_by("id")[:20])
    RunVerdict.objects.bulk_create([RunVerdict(run=r, verdict="improved", headline="better") for r in created])


def test_ten_thousand_runs_list_in_a_constant_number_of_queries(
    alice_client, alice, bob, plan, other, django_assert_max_num_queries
):
    changes = [
        TuningChange.objects.create(
            environment=plan.environment, number=k, title=f"Change {k}", status="applied", applied_at=timezone.now()
        )
        for k in (1, 2, 3)
    ]
    url = reverse("runs:list")
    filtered = {"verdict": "passed", "plan": plan.code, "started_by": "alice", "since": "2000-01-01"}

    _bulk(plan, other, [alice, bob], 200, changes)
    small = {}
    for name, params in (("first", {}), ("last", {"page": "last"}), ("filtered", filtered)):
        with CaptureQueriesContext(connection) as queries:
            assert alice_client.get(url, params).status_code == 200
        small[name] = len(queries)

    Run.objects.all().delete()
    _bulk(plan, other, [alice, bob], 10_000, changes)
    for name, params in (("first", {}), ("last", {"page": "last"}), ("filtered", {**filtered, "page": 3})):
        with django_assert_max_num_queries(small[name]) as queries:
            response = alice_client.get(url, params)
        assert response.status_code == 200
        assert len(queries) == small[name], name  # the same count as for 200 runs: nothing per row
        rows = list(response.context["runs"])
        assert len(rows) == RUNS_PER_PAGE, (name, response.context["page"])
        # No row carries its summary or snapshot: their figures came out of the JSON in SQL.
        assert {"summary", "plan_snapshot"} <= rows[0].get_deferred_fields()
    html = response.content.decode()
    # The filters survive paging: the pager's links keep them.
    older = re.search(r'href="([^"]+)" rel="next"', html).group(1).replace("&amp;", "&")
    assert "page=4" in older and "verdict=passed" in older and f"plan={plan.code}" in older
    assert "started_by=alice" in older and "since=2000-01-01" in older
    assert small["first"] <= 14
