from django.conf import settings
from django.db import models
from django.urls import reverse

from portal.common import new_code
from portal.projects.models import Project


class Event(models.TextChoices):
    RUN_FINISHED = "run_finished", "Run finished"
    THRESHOLDS_FAILED = "thresholds_failed", "Run failed its thresholds"
    RUN_ERROR = "run_error", "Run ended in error, partial, incomplete or stopped by its criteria"
    REGRESSION = "regression", "Regression against the baseline"
    DEGRADATION = "degradation", "Degradation found"
    SCHEDULE_SKIPPED = "schedule_skipped", "Schedule skipped or missed a fire"
    EXPERIMENT_FINISHED = "experiment_finished", "Experiment finished"
    CHANGE_APPLIED = "change_applied", "Tuning change applied"


class Channel(models.Model):
    """Where a project's notifications go (e-mail, a webhook or Grafana's annotations) and which events it wants.

    A Grafana channel is a webhook whose body is an annotation (``POST <url>/api/annotations``, Bearer
    ``token``): the same deliveries, signature and retries (portal.notifications.grafana).
    """

    team_path = "project__team"

    class Kind(models.TextChoices):
        EMAIL = "email", "E-mail"
        WEBHOOK = "webhook", "Webhook"
        GRAFANA = "grafana", "Grafana annotations"

    class Format(models.TextChoices):
        PLIMSOLL = "plimsoll", "Plimsoll JSON"
        SLACK = "slack", "Slack incoming webhook"
        TEAMS = "teams", "Microsoft Teams (MessageCard)"

    code = models.UUIDField(default=new_code, unique=True, editable=False)
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="channels")
    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=10, choices=Kind.choices)
    events = models.JSONField(default=list, help_text="The Event values this channel wants")
    emails = models.TextField(blank=True, help_text="E-mail: addresses, comma-separated")
    url = models.URLField(max_length=500, blank=True, help_text="Webhook: where the POST goes")
    payload_format = models.CharField(max_length=10, choices=Format.choices, default=Format.PLIMSOLL)
    # Kept readable (not hashed): the portal signs every delivery with it. Shown once, at creation.
    secret = models.CharField(max_length=100, blank=True)
    # Grafana: a service account token, Fernet-encrypted (grafana.token_encrypt); never shown back.
    token = models.TextField(blank=True)
    dashboard_uid = models.CharField(
        max_length=40,
        blank=True,
        help_text="Grafana: the dashboard the annotations belong to (empty: the organization)",
    )
    panel_id = models.PositiveIntegerField(null=True, blank=True, help_text="Grafana: one panel of that dashboard")
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name", "id"]

    def __str__(self):
        return self.name

    def get_absolute_url(self):
        return reverse("notifications:project", args=[self.project.code]) + f"#channel-{self.code}"

    @property
    def recipients(self) -> list[str]:
        return [a.strip() for a in self.emails.split(",") if a.strip()]


class Delivery(models.Model):
    """One notification to one channel, with every attempt's outcome: the channel's delivery log.

    Unique on (channel, key): a notification task delivered twice makes one delivery.
    """

    team_path = "channel__project__team"

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        SENDING = "sending", "Sending"
        RETRYING = "retrying", "Will retry"
        SENT = "sent", "Sent"
        FAILED = "failed", "Failed"

    channel = models.ForeignKey(Channel, on_delete=models.CASCADE, related_name="deliveries")
    key = models.CharField(max_length=100, help_text="What it is about: run:12, fire:7, test:<time>")
    event = models.CharField(max_length=20)
    payload = models.JSONField()
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    response_snippet = models.TextField(blank=True)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    next_attempt_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [models.UniqueConstraint(fields=["channel", "key"], name="delivery_unique_key")]

    def __str__(self):
        return f"{self.channel_id} {self.key}: {self.status}"


class MailAddress(models.Model):
    """An address a team's e-mail channels may send to once its owner confirmed it (issue 30: no open relay).

    A channel's addresses get a confirmation mail with a single-use link (a random token, stored as its
    SHA-256, good for CONFIRM_DAYS); deliveries and tests go only to confirmed addresses.
    """

    team_path = "team"

    team = models.ForeignKey("accounts.Team", on_delete=models.CASCADE, related_name="mail_addresses")
    email = models.EmailField(help_text="Lower-cased")
    token_hash = models.CharField(max_length=64, blank=True, db_index=True)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    requested_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    confirmed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team", "email"], name="mail_address_unique_per_team")]

    def __str__(self):
        return f"{self.email} ({'confirmed' if self.confirmed_at else 'awaiting confirmation'})"
