"""gunicorn's access log without the secrets that travel in paths.

A share link (``/s/<token>/…``), an invitation (``/invitations/<token>/``) and a password
reset (``/password-reset/<uid>/<token>/``) are opened by whoever has their path, so an access
log that kept them would be a list of open doors. ``gunicorn.conf.py`` installs this logger;
the token is replaced by ``[token]`` in the request line and the path.
"""

import re

from gunicorn.glogging import Logger

SECRET_IN_PATH = re.compile(r"(/s/|/invitations/|/password-reset/[^/\s?]+/)(?!sent/|done/)[^/\s?]+")


def redact(text: str | None) -> str | None:
    return SECRET_IN_PATH.sub(r"\1[token]", text) if text else text


class RedactingLogger(Logger):
    def atoms(self, resp, req, environ, request_time):
        atoms = super().atoms(resp, req, environ, request_time)
        for key in ("r", "U", "f"):  # request line, path, referrer
            atoms[key] = redact(atoms.get(key))
        return atoms
