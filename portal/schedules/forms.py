"""The schedule form: the simple forms and cron in one, checked by the same rules as the service."""

from django import forms

from . import timing
from .models import DEFAULT_LAST_N, Baseline, Schedule


class ScheduleForm(forms.Form):
    plan = forms.ModelChoiceField(queryset=None, help_text="The plan this schedule runs")
    kind = forms.ChoiceField(choices=Schedule.Kind.choices, label="Runs")
    at_time = forms.TimeField(
        required=False, label="At (HH:MM)", help_text="Time of day; for every N hours, the minute past the hour"
    )
    every_hours = forms.IntegerField(required=False, min_value=1, max_value=23, label="Every N hours")
    cron = forms.CharField(
        required=False,
        max_length=100,
        label="Cron expression",
        help_text="minute hour day-of-month month day-of-week, e.g. <code>0 2 * * 1-5</code>",
    )
    time_zone = forms.CharField(max_length=64, initial="UTC", help_text="e.g. Europe/Berlin, America/New_York, UTC")
    enabled = forms.BooleanField(required=False, initial=True, label="Enabled (untick to pause)")
    ends_on = forms.DateField(required=False, label="Ends on", help_text="Optional: no fire after this day")
    busy_wait_minutes = forms.IntegerField(
        min_value=0,
        max_value=24 * 60,
        initial=30,
        label="Busy environment: wait (min)",
        help_text="When another run is on the environment at fire time, wait this long for it, then skip",
    )
    catch_up_hours = forms.FloatField(
        min_value=0,
        max_value=48,
        initial=2,
        label="Missed fire: still run if less late than (h)",
        help_text="When the scheduler was down at fire time; later than this, the fire is recorded as missed",
    )

    def __init__(self, *args, project, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["plan"].queryset = project.plans.order_by("name")
        self.fields["time_zone"].widget.attrs["list"] = "time-zones"

    def clean(self):
        data = super().clean()
        if self.errors:
            return data
        try:
            timing.zone(data["time_zone"])
        except timing.ScheduleSpecError as exc:
            self.add_error("time_zone", str(exc))
            return data
        try:
            data["expression"] = timing.cron_for(
                kind=data["kind"], at=data.get("at_time"), every_hours=data.get("every_hours"), cron=data.get("cron")
            )
        except timing.ScheduleSpecError as exc:
            field = {"cron": "cron", "hours": "every_hours"}.get(data["kind"], "at_time")
            self.add_error(field, str(exc))
        return data

    @classmethod
    def initial_for(cls, schedule: Schedule) -> dict:
        return {
            "plan": schedule.plan_id,
            "kind": schedule.kind,
            "at_time": schedule.at_time,
            "every_hours": schedule.every_hours,
            "cron": schedule.cron,
            "time_zone": schedule.time_zone,
            "enabled": schedule.enabled,
            "ends_on": schedule.ends_on,
            "busy_wait_minutes": schedule.busy_wait_minutes,
            "catch_up_hours": schedule.catch_up_hours,
        }


class BaselineForm(forms.Form):
    kind = forms.ChoiceField(choices=Baseline.Kind.choices, label="Judge each run against")
    last_n = forms.IntegerField(
        min_value=1, max_value=20, initial=DEFAULT_LAST_N, label="N (for the last N valid runs)"
    )
    run = forms.ModelChoiceField(queryset=None, required=False, label="Pinned run")
    trial_set = forms.ModelChoiceField(queryset=None, required=False, label="Pinned trial set")
    tolerance_pct = forms.FloatField(
        min_value=0,
        max_value=1000,
        initial=10,
        label="Tolerance (%)",
        help_text="Regressed only when a figure is beyond the noise AND more than this much worse",
    )

    def __init__(self, *args, plan, **kwargs):
        super().__init__(*args, **kwargs)
        from portal.runs.models import Run

        self.fields["run"].queryset = plan.runs.filter(status__in=Run.FINISHED).order_by("-number")
        self.fields["run"].label_from_instance = lambda r: (
            f"Run #{r.number} · {r.status} · {r.created_at:%Y-%m-%d %H:%M}"
        )
        self.fields["trial_set"].queryset = plan.trial_sets.order_by("-created_at")
