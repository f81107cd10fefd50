from django.conf import settings
from django.db import models

from portal.common import TimeStamped, new_code


class ShareLink(TimeStamped):
    """A link that opens one result read-only for anyone who has it, until it expires or is revoked.

    Only the SHA-256 of its token is stored (``portal.tokens``); ``prefix`` (its first
    characters) lets people tell links apart in the *Shared links* list. What it opens is
    fixed at creation: a run, two sides of a comparison (run or trial-set codes), an
    experiment, or an environment's journey for one plan.
    """

    class Kind(models.TextChoices):
        RUN = "run", "Run report"
        COMPARISON = "comparison", "Comparison"
        EXPERIMENT = "experiment", "Experiment"
        JOURNEY = "journey", "Journey"

    code = models.UUIDField(default=new_code, unique=True, editable=False)
    project = models.ForeignKey("projects.Project", on_delete=models.CASCADE, related_name="share_links")
    kind = models.CharField(max_length=12, choices=Kind.choices)
    run = models.ForeignKey("runs.Run", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    experiment = models.ForeignKey(
        "history.Experiment", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    environment = models.ForeignKey(
        "projects.Environment", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    plan = models.ForeignKey("projects.Plan", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    # A comparison's sides: the code of a run or a trial set of the project, before and after.
    before_code = models.UUIDField(null=True, blank=True)
    after_code = models.UUIDField(null=True, blank=True)
    title = models.CharField(max_length=200)
    note = models.CharField(max_length=200, blank=True)
    token_hash = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=8)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    expires_at = models.DateTimeField()
    revoked_at = models.DateTimeField(null=True, blank=True)
    open_count = models.PositiveIntegerField(default=0)
    last_opened_at = models.DateTimeField(null=True, blank=True)

    team_path = "project__team"

    def __str__(self):
        return f"{self.get_kind_display()}: {self.title}"

    def is_open(self, now) -> bool:
        return self.revoked_at is None and self.expires_at > now


class ShareEvent(models.Model):
    """The record of a link's life: created, opened (the page, not its chart data) and revoked."""

    class Action(models.TextChoices):
        CREATED = "created", "created"
        OPENED = "opened", "opened"
        REVOKED = "revoked", "revoked"

    link = models.ForeignKey(ShareLink, on_delete=models.CASCADE, related_name="events")
    action = models.CharField(max_length=10, choices=Action.choices)
    at = models.DateTimeField(auto_now_add=True)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        indexes = [models.Index(fields=["link", "at"])]

    def __str__(self):
        return f"{self.link} {self.action} at {self.at:%Y-%m-%d %H:%M}"


class ProjectSharing(models.Model):
    """Whether a project's results may be shared; a project without a row may (the default).

    A separate row rather than a field on Project, so turning sharing off never touches the
    project's own table. Off, every existing link of the project stops working at once.
    """

    project = models.OneToOneField("projects.Project", on_delete=models.CASCADE, related_name="sharing")
    enabled = models.BooleanField(default=True)
    changed_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    changed_at = models.DateTimeField(auto_now=True)

    def __str__(self):
        return f"sharing {'on' if self.enabled else 'off'} for {self.project}"
