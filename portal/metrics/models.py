from django.db import models

from portal.runs.models import Run


class MetricCollection(models.Model):
    """Scraping the servers of one run's environment: what to scrape, and how far it got.

    ``servers`` is a snapshot taken when the run starts ([{"id", "name", "role", "url",
    "counter_set"}]), so editing a server later never changes what a report shows. Each scrape
    round (a *tick*) is claimed by a conditional UPDATE of ``next_tick``, so a tick delivered
    twice runs once; ``heartbeat_at`` lets the watchdog restart a chain that was lost.
    """

    team_path = "run__project__team"

    run = models.OneToOneField(Run, on_delete=models.CASCADE, related_name="metric_collection")
    interval_s = models.PositiveSmallIntegerField()
    servers = models.JSONField(default=list)
    next_tick = models.IntegerField(default=-1)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    done = models.BooleanField(default=False)
    restarts = models.PositiveIntegerField(default=0)

    def __str__(self):
        return f"metrics of run {self.run_id}"


class ServerSample(models.Model):
    """One scrape of one server during a run: the counter set's raw values, or the reason for a gap.

    ``values`` is a list in the order of the counter set's series (plus denominators; see
    ``countersets`` for how a counter set may gain a series without misreading older rows),
    not a dict, to keep a row small: a server scraped every 5 s adds 720 rows an hour, each a
    few dozen numbers. Rates are computed when read, from consecutive rows.
    """

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="server_samples")
    server_id = models.PositiveIntegerField(help_text="the Server's id at the run's start (kept if it is deleted)")
    tick = models.IntegerField()
    offset_s = models.FloatField(help_text="seconds since the run's start_at, mid-way through the scrape")
    values = models.JSONField(null=True, blank=True)
    error = models.CharField(max_length=300, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "server_id", "tick"], name="serversample_unique")]

    def __str__(self):
        return f"run {self.run_id} server {self.server_id} tick {self.tick}"
