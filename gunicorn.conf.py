"""gunicorn settings for the portal (Procfile and docker/entrypoint.sh pass --config gunicorn.conf.py).

Drops the ``Server: gunicorn`` header: it tells a scanner which server and which of its
bugs to try, and tells users nothing. gunicorn has no option for it, so the response's
default headers are filtered; this runs in the master before the workers fork.
"""

from gunicorn.http import wsgi

# The access log leaves out the tokens of share links, invitations and password resets.
logger_class = "portal.gunicorn_logging.RedactingLogger"

_default_headers = wsgi.Response.default_headers


def _without_server_header(self):
    return [line for line in _default_headers(self) if not line.lower().startswith("server:")]


wsgi.Response.default_headers = _without_server_header


def when_ready(server):
    """Warns once at start when SITE_URL (links in mail and webhooks) names another address than the one served."""
    import os

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    from django.conf import settings

    from portal.site_url import mismatch

    bound = [tuple(listener.sock.getsockname()[:2]) for listener in server.LISTENERS if listener.FAMILY != 1]
    if problem := mismatch(settings.SITE_URL, bound):
        server.log.warning(problem)


def post_worker_init(worker):
    """Long-polls may hold half of this worker's threads, so the other half always answer pages (issue 30).

    On SIGTERM (a restart, a deploy, HUP's old workers) the held long-polls answer at once with the
    run's state: without that, each would keep the worker up to --graceful-timeout (30 s) and then be
    cut off with the worker. gunicorn set its own SIGTERM handler already; this one comes first.
    """
    import signal

    from portal.api import longpoll

    longpoll.configure_for_threads(worker.cfg.threads)
    graceful_exit = worker.handle_exit

    def handle_exit(sig, frame):
        longpoll.stop_waiting()
        graceful_exit(sig, frame)

    signal.signal(signal.SIGTERM, handle_exit)
