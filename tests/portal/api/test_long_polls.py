"""Issue 30 item 5: long-polls cannot take every web thread (a real gunicorn, as the Procfile runs it).

Eight ``?wait=60`` long-polls held all 2 × 4 gunicorn threads and the login page hung. Now each
process lets half its threads long-poll and each token holds at most two long-polls at once; the
rest answer at once with the current state (``X-Plimsoll-Wait: capped``).
"""

import http.client
import threading
import time

import pytest
from django.utils import timezone

from portal.accounts.services import token_create
from portal.runs.models import Run
from tests.gunicorn import Gunicorn
from tests.processes import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.serial]


@pytest.fixture
def active_run(plan, alice):
    return Run.objects.create(
        project=plan.project,
        number=1,
        plan=plan,
        environment=plan.environment,
        plan_name=plan.name,
        environment_name=plan.environment.name,
        plan_snapshot=plan.to_engine_dict(),
        analysis_settings=plan.analysis_settings(),
        created_by=alice,
        status=Run.Status.RUNNING,
    )


def _long_poll(port: int, secret: str, code, answers: list):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        started = time.monotonic()
        conn.request("GET", f"/api/v1/runs/{code}/?wait=30", headers={"Authorization": f"Bearer {secret}"})
        response = conn.getresponse()
        body = response.read()
        answers.append((response.status, response.getheader("X-Plimsoll-Wait"), time.monotonic() - started, body))
    finally:
        conn.close()


def _start(port, secrets, code) -> tuple[list, list]:
    answers: list = []
    threads = [threading.Thread(target=_long_poll, args=(port, s, code, answers), daemon=True) for s in secrets]
    for t in threads:
        t.start()
    return threads, answers


def _login_page_seconds(url: str) -> float:
    conn = http.client.HTTPConnection(url.removeprefix("http://").split(":")[0], int(url.rsplit(":", 1)[1]), timeout=10)
    try:
        started = time.monotonic()
        conn.request("GET", "/login/")
        response = conn.getresponse()
        response.read()
        assert response.status == 200
        return time.monotonic() - started
    finally:
        conn.close()


def test_the_site_answers_pages_under_50_parallel_long_polls(tmp_path, alice, team, active_run):
    secrets = [token_create(user=alice, team=team, name=f"pipeline {i}", scope="read")[1] for i in range(25)] * 2
    server = Gunicorn(tmp_path, workers=2, threads=4)  # the Procfile's
    try:
        # when: 50 long-polls at once (25 tokens, two each)
        threads, answers = _start(server.port, secrets, active_run.code)
        wait_until(lambda: len(answers) >= 46, timeout=30, what="the capped long-polls' answers")
        time.sleep(1)
        # then: the login page answers quickly, again and again, while the held long-polls wait
        assert max(_login_page_seconds(server.url) for _ in range(5)) < 2.0
        held = len(secrets) - len(answers)
        assert 1 <= held <= 4  # at most half of each process's four threads
        assert all(status == 200 and capped == "capped" for status, capped, _, _ in answers)
        assert all(b'"status":"running"' in body for *_, body in answers)
        # and the held long-polls end when the run does
        Run.objects.filter(pk=active_run.pk).update(status=Run.Status.PASSED, finished_at=timezone.now())
        for t in threads:
            t.join(20)
    finally:
        server.close()
    assert len(answers) == len(secrets)
    ended = [a for a in answers if a[1] is None]
    assert len(ended) == held
    assert all(status == 200 and b'"status":"passed"' in body for status, _, _, body in ended)


def test_one_token_holds_at_most_two_long_polls(tmp_path, alice, team, active_run):
    secret = token_create(user=alice, team=team, name="pipeline", scope="read")[1]
    server = Gunicorn(tmp_path, workers=1, threads=12)  # six slots in the process: the token's limit binds
    try:
        threads, answers = _start(server.port, [secret] * 5, active_run.code)
        wait_until(lambda: len(answers) >= 3, timeout=30, what="the capped long-polls' answers")
        time.sleep(1.5)
        assert len(answers) == 3
        assert all(capped == "capped" and seconds < 5 for _, capped, seconds, _ in answers)
        # when one held long-poll ends, the token may long-poll again
        Run.objects.filter(pk=active_run.pk).update(status=Run.Status.PASSED, finished_at=timezone.now())
        for t in threads:
            t.join(20)
    finally:
        server.close()
    assert [capped for _, capped, _, _ in answers].count(None) == 2


def test_a_worker_with_two_threads_holds_one_long_poll(tmp_path, alice, team, active_run):
    """The cap follows the worker's --threads (gunicorn.conf.py's post_worker_init), not a fixed number."""
    secrets = [token_create(user=alice, team=team, name=f"pipeline {i}", scope="read")[1] for i in range(3)]
    server = Gunicorn(tmp_path, workers=1, threads=2)
    try:
        threads, answers = _start(server.port, secrets, active_run.code)
        wait_until(lambda: len(answers) >= 2, timeout=30, what="the capped long-polls' answers")
        time.sleep(1.5)
        assert len(answers) == 2 and all(capped == "capped" for _, capped, _, _ in answers)
        assert _login_page_seconds(server.url) < 2.0  # the other thread serves pages
        Run.objects.filter(pk=active_run.pk).update(status=Run.Status.PASSED, finished_at=timezone.now())
        for t in threads:
            t.join(20)
    finally:
        server.close()
    assert [capped for _, capped, _, _ in answers].count(None) == 1
