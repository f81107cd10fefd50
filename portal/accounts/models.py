from django.conf import settings
from django.db import models

from portal.common import TimeStamped, new_code


class Team(TimeStamped):
    """A group of people who share projects; every tenant object belongs to one team."""

    team_path = ""  # for portal.accounts.access: a team is its own team

    code = models.UUIDField(default=new_code, unique=True, editable=False)
    name = models.CharField(max_length=100)
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, through="Membership", related_name="teams")

    def __str__(self):
        return self.name


class Membership(TimeStamped):
    """A user's role in a team: viewers read, editors create and run, owners also manage members."""

    class Role(models.TextChoices):
        OWNER = "owner", "Owner"
        EDITOR = "editor", "Editor"
        VIEWER = "viewer", "Viewer"

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.EDITOR)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["team", "user"], name="membership_unique", violation_error_message="Already a member."
            )
        ]

    def __str__(self):
        return f"{self.user} in {self.team} ({self.role})"

    @property
    def can_write(self) -> bool:
        return self.role in (self.Role.OWNER, self.Role.EDITOR)

    @property
    def can_manage(self) -> bool:
        return self.role == self.Role.OWNER


class Invitation(TimeStamped):
    """An owner's invitation to join a team with a role, sent by e-mail as a single-use link.

    The link's token is stored only as its hash (``portal.tokens``). It is used at most once
    (``accepted_at``), expires after ``INVITATION_DAYS``, and an owner can revoke it.
    """

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="invitations")
    email = models.EmailField()
    role = models.CharField(max_length=10, choices=Membership.Role.choices, default=Membership.Role.EDITOR)
    token_hash = models.CharField(max_length=64, unique=True)
    invited_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    expires_at = models.DateTimeField()
    accepted_at = models.DateTimeField(null=True, blank=True)
    accepted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    revoked_at = models.DateTimeField(null=True, blank=True)

    team_path = "team"

    def __str__(self):
        return f"{self.email} to {self.team} ({self.role})"

    def state(self, now) -> str:
        """pending, accepted, revoked or expired (in that order of precedence)."""
        if self.accepted_at is not None:
            return "accepted"
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at <= now:
            return "expired"
        return "pending"

    def is_for(self, user) -> bool:
        """Whether ``user``'s account has the invited address (e-mail addresses compare without case)."""
        return bool(user.email) and user.email.strip().lower() == self.email.strip().lower()


class ApiToken(TimeStamped):
    """A personal API token: a user's access to one team, limited by a scope and by the user's current role.

    The secret is shown once; only its SHA-256 is stored (like healthchecks' API keys), and the
    first characters stay visible so that a user can tell tokens apart. A SHA-256 without salt
    is enough: the secret is 32 random bytes, not a password anyone could guess.
    """

    team_path = "team"

    class Scope(models.TextChoices):
        READ = "read", "Read: see everything in the team"
        RUN = "run", "Run: read, and start and stop runs and trials"
        WRITE = "write", "Write: everything an editor can do"

    PREFIX_LENGTH = 12

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    scope = models.CharField(max_length=5, choices=Scope.choices, default=Scope.READ)
    prefix = models.CharField(max_length=PREFIX_LENGTH, db_index=True)
    secret_hash = models.CharField(max_length=64, unique=True)
    expires_at = models.DateTimeField(null=True, blank=True, help_text="Empty: never expires")
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self):
        return f"{self.name} ({self.prefix}…)"

    def is_usable(self, now) -> bool:
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > now)

    def allows(self, need: str) -> bool:
        """Whether the scope covers ``need`` (read < run < write)."""
        order = [self.Scope.READ, self.Scope.RUN, self.Scope.WRITE]
        return order.index(self.scope) >= order.index(need)


class ApiWrite(models.Model):
    """Who changed what through the API: the user and the token's name, for every write."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+")
    token_name = models.CharField(max_length=100, blank=True, help_text="Empty: the browser's session")
    method = models.CharField(max_length=7)
    path = models.CharField(max_length=500)
    status_code = models.PositiveSmallIntegerField()
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-at"]

    def __str__(self):
        return f"{self.method} {self.path} by {self.user} ({self.token_name or 'session'})"
