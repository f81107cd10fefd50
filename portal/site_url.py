"""The portal's own address in links that leave it (mail, webhooks, the CI client's output).

``SITE_URL`` names it; without it, the address that ``make run`` (the Procfile) serves on:
``PLIMSOLL_HOST`` and ``PLIMSOLL_PORT``. At start, gunicorn compares it with the addresses it
is bound to (``gunicorn.conf.py``), since a link to another port is dead or opens another instance.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

_ANY = {"", "0.0.0.0", "::", "[::]"}
_LOOPBACK_NAMES = {"localhost"}


def default_site_url(host: str | None, port: str | None) -> str:
    """The address the Procfile's web server answers on, as a browser on this machine would open it."""
    host = (host or "127.0.0.1").strip()
    if host in _ANY:
        host = "127.0.0.1"  # every address: this machine's loopback is one of them
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{(port or '8000').strip()}"


def _is_loopback(host: str) -> bool:
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def mismatch(site_url: str, bound: list[tuple[str, int]]) -> str | None:
    """Why links built on ``site_url`` do not reach a server bound to ``bound`` ((host, port) pairs), or None.

    Only what can be known from here: a SITE_URL on this machine's loopback must name a bound port;
    a public name (behind a proxy) is taken on trust.
    """
    parts = urlsplit(site_url)
    host = parts.hostname or ""
    if not _is_loopback(host) or not bound:
        return None
    port = parts.port or (443 if parts.scheme == "https" else 80)
    for bound_host, bound_port in bound:
        if bound_port == port and (bound_host in _ANY or _is_loopback(bound_host)):
            return None
    served = ", ".join(f"http://{h if ':' not in h else f'[{h}]'}:{p}" for h, p in bound)
    return (
        f"SITE_URL is {site_url} but this server answers on {served}: links in mail and webhooks "
        f"will not reach it. Unset SITE_URL (it then follows PLIMSOLL_PORT) or set it to the address people open."
    )


def host_header(site_url: str) -> str | None:
    """The Host a browser sends for ``site_url`` as ALLOWED_HOSTS spells it (``[::1]`` bracketed); None if none."""
    try:
        host = urlsplit(site_url).hostname
    except ValueError:
        return None
    if not host:
        return None
    return f"[{host}]" if ":" in host else host
