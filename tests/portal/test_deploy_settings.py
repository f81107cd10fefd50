"""Production settings (issue 10, item 4): the deploy check is clean for the Docker settings,
the secure defaults follow DEBUG and ALLOWED_HOSTS, and the portal under gunicorn sends the
Content-Security-Policy and no Server banner."""

import os
import secrets
import subprocess
import urllib.request

import pytest

from tests.processes import PYTHON, ROOT, free_port, wait_until

SECURE_NAMES = ["SESSION_COOKIE_SECURE", "CSRF_COOKIE_SECURE", "SECURE_SSL_REDIRECT", "SECURE_HSTS_SECONDS"]


def _env(tmp_path, **values) -> dict:
    """This process's environment without the variables the settings read, plus ``values``."""
    read = SECURE_NAMES + [
        "DEBUG",
        "ALLOWED_HOSTS",
        "SECRET_KEY",
        "SECURE_PROXY_SSL_HEADER",
        "DATABASE_URL",
        "SITE_URL",
    ]
    # The browser fixture sets DJANGO_ALLOW_ASYNC_UNSAFE in this process; a deployment never has it.
    read.append("DJANGO_ALLOW_ASYNC_UNSAFE")
    env = {k: v for k, v in os.environ.items() if k not in read and not k.startswith("SECURE_")}
    env.update(PLIMSOLL_VAR_DIR=str(tmp_path), **values)
    return env


def _docker_env() -> dict:
    """docker/.env.example as compose gives it to the web container, with the secrets filled in."""
    values = {}
    for line in (ROOT / "docker" / ".env.example").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, value = line.partition("=")
            values[name] = value
    values["SECRET_KEY"] = secrets.token_urlsafe(50)  # the example says: fill in
    values["DATABASE_URL"] = "postgres://plimsoll:secret@postgres:5432/plimsoll"  # as docker/compose.yml
    values["CELERY_BROKER_URL"] = "redis://redis:6379/0"
    return values


def _settings(env: dict, *names: str) -> list[str]:
    code = "import django, os; from django.conf import settings; django.setup(); " + "; ".join(
        f"print(repr(settings.{n}))" for n in names
    )
    environ = {**env, "DJANGO_SETTINGS_MODULE": "portal.settings"}
    result = subprocess.run([PYTHON, "-c", code], cwd=ROOT, env=environ, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def _deploy_check(env: dict) -> subprocess.CompletedProcess:
    """`manage.py check --deploy`, failing on any warning, as an operator runs it."""
    return subprocess.run(
        [PYTHON, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_deploy_check_is_clean_with_the_docker_settings(tmp_path):
    # when
    result = _deploy_check(_env(tmp_path, **_docker_env()))
    # then
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues (0 silenced)." in result.stdout


def test_the_deploy_check_is_clean_with_nothing_but_a_host_name_and_a_key(tmp_path):
    """Issue 30 item 8: W005 (HSTS subdomains) and W021 (preload) were left for every operator to meet."""
    env = _env(tmp_path, DEBUG="false", ALLOWED_HOSTS="plimsoll.example.com", SECRET_KEY=secrets.token_urlsafe(50))
    # when
    result = _deploy_check(env)
    # then: clean, with only the preload warning silenced (the operator's one-way choice)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues (1 silenced)." in result.stdout
    assert _settings(env, "SECURE_HSTS_INCLUDE_SUBDOMAINS", "SILENCED_SYSTEM_CHECKS") == ["True", "['security.W021']"]


def test_the_deploy_check_is_clean_with_an_https_site_url_and_a_key(tmp_path):
    """Issue 30 item 8: DEBUG off, a SECRET_KEY and SITE_URL=https://… (ALLOWED_HOSTS unset) gave W004, W008,
    W012 and W016, and the portal refused requests for its own name."""
    env = _env(tmp_path, DEBUG="false", SITE_URL="https://plimsoll.example.com", SECRET_KEY=secrets.token_urlsafe(50))
    # when
    result = _deploy_check(env)
    # then
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues (1 silenced)." in result.stdout
    assert _settings(env, *SECURE_NAMES) == ["True", "True", "True", "31536000"]
    # the portal answers the name its links carry
    assert " ".join(_settings(env, "ALLOWED_HOSTS")) == "['localhost', '127.0.0.1', '[::1]', 'plimsoll.example.com']"


def test_a_deployed_portal_is_secure_by_default(tmp_path):
    env = _env(tmp_path, DEBUG="false", ALLOWED_HOSTS="plimsoll.example.com", SECRET_KEY="x" * 60)
    assert _settings(env, *SECURE_NAMES) == ["True", "True", "True", "31536000"]


@pytest.mark.parametrize(
    "values",
    [
        {"DEBUG": "false", "ALLOWED_HOSTS": "localhost,127.0.0.1,[::1]"},  # a checkout on loopback
        {"DEBUG": "true", "ALLOWED_HOSTS": "plimsoll.example.com"},
    ],
)
def test_loopback_or_debug_keeps_plain_http_working(tmp_path, values):
    assert _settings(_env(tmp_path, **values), *SECURE_NAMES) == ["False", "False", "False", "0"]


def test_each_setting_can_be_set_and_the_proxy_header_is_read(tmp_path):
    env = _env(
        tmp_path,
        ALLOWED_HOSTS="plimsoll.example.com",
        SECURE_SSL_REDIRECT="false",
        SECURE_HSTS_SECONDS="600",
        SECURE_PROXY_SSL_HEADER="HTTP_X_FORWARDED_PROTO=https",
    )
    assert _settings(env, "SECURE_SSL_REDIRECT", "SECURE_HSTS_SECONDS", "SECURE_PROXY_SSL_HEADER") == [
        "False",
        "600",
        "('HTTP_X_FORWARDED_PROTO',",
        "'https')",
    ]


@pytest.mark.parametrize("value", ["X-Forwarded-Proto: https", "HTTP_X_FORWARDED_PROTO", "HTTP_X=", "proto=https"])
def test_a_malformed_proxy_header_names_the_variable(tmp_path, value):
    result = subprocess.run(
        [PYTHON, "manage.py", "check"],
        cwd=ROOT,
        env=_env(tmp_path, SECURE_PROXY_SSL_HEADER=value),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert f"SECURE_PROXY_SSL_HEADER={value!r}: expected HTTP_HEADER_NAME=value" in result.stderr


def test_gunicorn_sends_the_csp_and_no_server_banner(tmp_path):
    # given: the portal as the Procfile starts it
    port = free_port()
    env = _env(tmp_path, DATABASE_URL=os.environ.get("DATABASE_URL", ""))
    server = subprocess.Popen(
        [str(ROOT / ".venv/bin/gunicorn"), "portal.wsgi", "--config", "gunicorn.conf.py"]
        + ["--bind", f"127.0.0.1:{port}", "--workers", "1"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:

        def answer():
            try:
                return urllib.request.urlopen(f"http://127.0.0.1:{port}/login/", timeout=2)
            except OSError:
                return None

        # when
        response = wait_until(answer, timeout=30, what="gunicorn to answer")
        # then
        assert response.status == 200
        assert "Server" not in response.headers
        csp = response.headers["Content-Security-Policy"]
        assert "script-src 'self'" in csp and "style-src 'self'" in csp and "frame-ancestors 'none'" in csp
        assert "unsafe-inline" not in csp
        assert response.headers["X-Frame-Options"] == "DENY"
    finally:
        server.terminate()
        server.wait(timeout=10)
