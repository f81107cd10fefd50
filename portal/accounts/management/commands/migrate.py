"""``manage.py migrate``, Django's, that says what to run when it cannot reach its database.

On PostgreSQL the database must exist before the first migrate (Django creates tables, not
databases); without it Django ended in a 40-line OperationalError traceback (issue 28). Here the
command names the database and the command that creates it. See docs/operations/postgresql-redis.md.
"""

from django.core.management.base import CommandError
from django.core.management.commands.migrate import Command as DjangoMigrate
from django.db import OperationalError, connections


def _unreachable(settings_dict: dict, exc: OperationalError) -> str:
    name, user = settings_dict["NAME"], settings_dict.get("USER") or "postgres"
    host, port = settings_dict.get("HOST") or "localhost", settings_dict.get("PORT") or "5432"
    reason = " ".join(str(exc).split()) or type(exc).__name__
    if f'database "{name}" does not exist' in str(exc):
        return (
            f'The PostgreSQL database "{name}" does not exist on {host}:{port}. Create it first, then migrate again:\n'
            f"    createdb -h {host} -p {port} -U {user} {name}\n"
            f"(or: psql -h {host} -p {port} -U {user} -c 'CREATE DATABASE \"{name}\"'). "
            "See docs/operations/postgresql-redis.md."
        )
    return (
        f'Cannot connect to the database "{name}" on {host}:{port}: {reason}\n'
        "Is PostgreSQL running there, and is DATABASE_URL right (postgres://user:password@host:port/name)? "
        "See docs/operations/postgresql-redis.md."
    )


class Command(DjangoMigrate):
    def handle(self, *args, **options):
        connection = connections[options["database"]]
        if connection.vendor == "postgresql":
            try:
                connection.ensure_connection()
            except OperationalError as exc:
                raise CommandError(_unreachable(connection.settings_dict, exc)) from None
        return super().handle(*args, **options)
