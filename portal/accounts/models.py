from django.conf import settings
from django.db import models

from portal.common import TimeStamped, new_code


class Team(TimeStamped):
    """A group of people who share projects; every tenant object belongs to one team."""

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
