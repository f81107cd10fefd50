"""Creates an API token for first set-up and scripts on the server; the secret is the last line printed."""

import uuid

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from portal.accounts.models import ApiToken
from portal.accounts.services import TOKEN_DEFAULT_DAYS, token_create


class Command(BaseCommand):
    help = "Creates an API token for USERNAME in a team; prints its secret (shown once) on the last line."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--team", required=True, help="the team's name (or code)")
        parser.add_argument("--scope", required=True, choices=ApiToken.Scope.values)
        parser.add_argument("--name", default="command line", help="what uses the token")
        parser.add_argument(
            "--expires-days", type=int, default=TOKEN_DEFAULT_DAYS, help="days until it expires (0: never)"
        )

    def handle(self, *args, username, team, scope, name, expires_days, **options):
        try:
            user = get_user_model().objects.get(username=username)
        except get_user_model().DoesNotExist:
            raise CommandError(f"no user called {username!r}") from None
        found = user.teams.filter(name=team).first()
        if found is None:
            try:
                found = user.teams.filter(code=uuid.UUID(team)).first()
            except ValueError:  # not a code either
                pass
        if found is None:
            raise CommandError(f"{username} is not a member of a team called {team!r}")
        try:
            token, secret = token_create(
                user=user, team=found, name=name, scope=scope, expires_days=expires_days or None
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        expiry = token.expires_at.strftime("%Y-%m-%d") if token.expires_at else "never"
        self.stderr.write(f"Token “{token.name}” ({token.scope}) for {username} in {found}, expires {expiry}.")
        self.stdout.write(secret)
