"""Issue 30 item 5: long-polls cannot take every web thread (a real gunicorn, as the Procfile runs it).

Eight ``?wait=60`` long-polls held all 2 × 4 gunicorn threads and the login page hung. Now each
process lets half its threads long-poll and each account (and token) holds at most two long-polls at
once; the rest answer at once with the current state (``X-Plimsoll-Wait: capped``). The per-account and
per-token caps are tested without a server, in test_long_poll_slots.py.
"""

import http.client
import signal
import threading
import time

import pytest
from django.utils import timezone

from portal.accounts.models import Membership
from portal.accounts.services import token_create
from portal.runs.models import Run
from tests.gunicorn import Gunicorn
from tests.processes import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.serial]


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


def test_the_site_answers_pages_under_50_parallel_long_polls(tmp_path, alice, team, active_run, django_user_model):
    # five accounts (alice and four viewers: a viewer's read token is enough), five tokens each, two long-polls a token
    viewers = [django_user_model.objects.create_user(f"viewer{n}", password="x") for n in range(4)]
    Membership.objects.bulk_create([Membership(team=team, user=v, role=Membership.Role.VIEWER) for v in viewers])
    secrets = [
        token_create(user=user, team=team, name=f"pipeline {i}", scope="read")[1]
        for user in (alice, *viewers)
        for i in range(5)
    ] * 2
    server = Gunicorn(tmp_path, workers=2, threads=4)  # the Procfile's
    try:
        # when: 50 long-polls at once (25 tokens, two each)
        threads, answers = _start(server.port, secrets, active_run.code)
        wait_until(lambda: len(answers) >= 46, timeout=30, what="the capped long-polls' answers")
        time.sleep(1)
        # then: the login page answers quickly, again and again, while the held long-polls wait
        assert max(_login_page_seconds(server.url) for _ in range(5)) < 2.0
        held = len(secrets) - len(answers)
        assert 2 <= held <= 4  # at most half of each process's four threads (two accounts' worth at least)
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


def test_a_worker_with_two_threads_holds_one_long_poll_and_answers_it_when_stopped(tmp_path, alice, team, active_run):
    """The cap follows the worker's --threads (gunicorn.conf.py's post_worker_init), not a fixed number;
    on SIGTERM (a restart) the held long-poll answers at once instead of holding the worker until it is cut."""
    secrets = [token_create(user=alice, team=team, name=f"pipeline {i}", scope="read")[1] for i in range(3)]
    server = Gunicorn(tmp_path, workers=1, threads=2)
    try:
        threads, answers = _start(server.port, secrets, active_run.code)
        wait_until(lambda: len(answers) >= 2, timeout=30, what="the capped long-polls' answers")
        time.sleep(1.5)
        assert len(answers) == 2 and all(capped == "capped" for _, capped, _, _ in answers)
        assert _login_page_seconds(server.url) < 2.0  # the other thread serves pages

        # when: the server is told to stop while one long-poll waits (for 30 s; gunicorn's graceful timeout is 30 s)
        stopping = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        for t in threads:
            t.join(20)
        server.proc.wait(20)
        stopped_in = time.monotonic() - stopping
    finally:
        server.close()

    # then: it answered the run's current state, to be asked again later, and the server stopped at once
    assert len(answers) == 3, server.output()[-2000:]
    status, capped, _, body = answers[-1]
    assert (status, capped) == (200, "capped") and b'"status":"running"' in body
    assert stopped_in < 5, stopped_in
