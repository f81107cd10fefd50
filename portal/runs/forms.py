"""The result-file upload form (issue 18): several files at once, one imported run each."""

from django import forms
from django.conf import settings

from . import result_files
from .models import Run


class MultipleFileInput(forms.ClearableFileInput):
    allow_multiple_selected = True


class MultipleFileField(forms.FileField):
    """Django's documented recipe for a field that takes several files."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("widget", MultipleFileInput(attrs={"accept": ".json,.csv,.jtl,.xml,.log,.gz"}))
        super().__init__(*args, **kwargs)

    def clean(self, data, initial=None):
        single = super().clean
        return [single(d, initial) for d in data] if isinstance(data, list | tuple) else [single(data, initial)]


class ResultUploadForm(forms.Form):
    files = MultipleFileField(
        label="Result files",
        help_text="k6 JSON lines (<code>--out json=results.json</code>) or CSV (<code>--out csv=results.csv</code>); "
        "JMeter JTL, CSV or XML (<code>jmeter -n -t plan.jmx -l results.jtl</code>); Locust's "
        "<code>PREFIX_stats_history.csv</code> (<code>--csv PREFIX --csv-full-history</code>); Gatling's text "
        "<code>simulation.log</code> (3.0 to 3.9). Gzipped too; one run per file, "
        f"at most {settings.PLIMSOLL_RESULT_UPLOAD_MAX_MB} MB each, read in the background.",
    )
    format = forms.ChoiceField(
        label="Format",
        choices=[("", "Detect from the content"), *[(f, f) for f in result_files.FORMATS]],
        required=False,
    )

    plan = forms.ModelChoiceField(
        queryset=None,
        required=False,
        to_field_name="code",
        empty_label="None",
        help_text="Optional: the plan these results stand for. The runs then join its journey and comparisons, "
        "and its thresholds judge them.",
    )

    def __init__(self, *args, environment, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["plan"].queryset = environment.project.plans.order_by("name")

    def clean_files(self):
        files = self.cleaned_data["files"]
        limit = settings.PLIMSOLL_RESULT_UPLOAD_MAX_MB
        too_big = [f.name for f in files if f.size > limit * 1024 * 1024]
        if too_big:
            raise forms.ValidationError(f"Over the {limit} MB limit: {', '.join(too_big)}. Nothing was imported.")
        return files


class RunFilterForm(forms.Form):
    """The runs list's filters, read from the query string (GET), so a filtered list can be linked and paged.

    Every choice is cut to the user's teams (and to the project on a project's runs page): a
    code from elsewhere is simply not a valid choice. ``filter`` applies the valid fields and
    ignores the others, whose errors the form shows.
    """

    PASSED_FAILED = [("passed", "Thresholds passed"), ("failed", "Thresholds failed")]

    project = forms.ModelChoiceField(queryset=None, required=False, to_field_name="code", empty_label="All projects")
    plan = forms.ModelChoiceField(queryset=None, required=False, to_field_name="code", empty_label="All plans")
    environment = forms.ModelChoiceField(
        queryset=None, required=False, to_field_name="code", empty_label="All environments"
    )
    status = forms.ChoiceField(required=False)
    verdict = forms.ChoiceField(required=False)
    started_by = forms.ModelChoiceField(
        queryset=None, required=False, to_field_name="username", empty_label="Anyone", label="Started by"
    )
    since = forms.DateField(required=False, label="From", widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(required=False, label="To", widget=forms.DateInput(attrs={"type": "date"}))

    def __init__(self, data, *, user, project=None):
        from django.apps import apps
        from django.contrib.auth import get_user_model

        from portal.accounts.access import scoped
        from portal.projects.models import Environment, Plan, Project

        # By name: the schedules app sits above runs (the layers contract), its verdicts are read here.
        RunVerdict = apps.get_model("schedules", "RunVerdict")  # noqa: N806

        super().__init__(data)
        self.project = project
        if project is not None:
            del self.fields["project"]
            self.fields["plan"].queryset = project.plans.order_by("name")
            self.fields["environment"].queryset = project.environments.order_by("name")
        else:
            self.fields["project"].queryset = scoped(Project.objects.all(), user).order_by("name")
            self.fields["plan"].queryset = scoped(Plan.objects.select_related("project"), user).order_by(
                "project__name", "name"
            )
            self.fields["environment"].queryset = scoped(Environment.objects.select_related("project"), user).order_by(
                "project__name", "name"
            )
            self.fields["plan"].label_from_instance = lambda p: f"{p.project.name} · {p.name}"
            self.fields["environment"].label_from_instance = lambda e: f"{e.project.name} · {e.name}"
        self.fields["started_by"].queryset = (
            get_user_model().objects.filter(memberships__team__memberships__user=user).distinct().order_by("username")
        )
        self.fields["status"].choices = [("", "Any status"), ("active", "Active (queued to finishing)")] + list(
            Run.Status.choices
        )
        baseline = [
            (f"baseline_{value}", f"Against the baseline: {label.lower()}")
            for value, label in RunVerdict.Verdict.choices
        ]
        self.fields["verdict"].choices = [("", "Any verdict"), *self.PASSED_FAILED, *baseline]

    def clean(self):
        data = super().clean()
        since, until = data.get("since"), data.get("until")
        if since and until and since > until:
            self.add_error("until", "The end of the range is before its start.")
        return data

    @property
    def active(self) -> bool:
        """Whether any filter is set (the list's empty state then says so)."""
        return any(self.cleaned_data.get(name) for name in self.fields) if hasattr(self, "cleaned_data") else False

    def filter(self, runs):
        """``runs`` cut to the valid filters; the date range is on the start time (creation for a queued run)."""
        import datetime

        from django.utils import timezone

        self.is_valid()
        data = {k: v for k, v in self.cleaned_data.items() if k not in self.errors}
        if data.get("project"):
            runs = runs.filter(project=data["project"])
        if data.get("plan"):
            runs = runs.filter(plan=data["plan"])
        if data.get("environment"):
            runs = runs.filter(environment=data["environment"])
        status = data.get("status")
        if status == "active":
            runs = runs.filter(status__in=Run.ACTIVE)
        elif status:
            runs = runs.filter(status=status)
        verdict = data.get("verdict")
        if verdict in ("passed", "failed"):
            runs = runs.filter(summary__verdict=verdict)
        elif verdict:
            runs = runs.filter(baseline_verdict__verdict=verdict.removeprefix("baseline_"))
        if data.get("started_by"):
            runs = runs.filter(created_by=data["started_by"])
        zone = timezone.get_current_timezone()
        if data.get("since"):
            start = datetime.datetime.combine(data["since"], datetime.time.min, tzinfo=zone)
            runs = runs.filter(started__gte=start)
        if data.get("until"):
            end = datetime.datetime.combine(data["until"] + datetime.timedelta(days=1), datetime.time.min, tzinfo=zone)
            runs = runs.filter(started__lt=end)
        return runs
