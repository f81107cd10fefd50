"""Forms of the projects pages.

ModelForms validate a UniqueConstraint only when every field in it is on the form, and
``project`` (or ``team``) never is, so each form checks its name itself and says why.
"""

import re
from urllib.parse import urlsplit

from django import forms
from django.conf import settings
from django.forms import inlineformset_factory

from portal.accounts.models import Team

from .models import Environment, MixEntry, Plan, Project, Server, Step, TestCase

# Header field names are RFC 9110 tokens.
HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


def human_duration(seconds: float) -> str:
    """45 s, 12 min 5 s, 3 h 2 min (the runs pages' ``seconds`` filter, for messages)."""
    value = int(round(seconds))
    if value < 60:
        return f"{value} s"
    if value < 3600:
        m, s = divmod(value, 60)
        return f"{m} min {s} s" if s else f"{m} min"
    h, rest = divmod(value, 3600)
    return f"{h} h {rest // 60} min" if rest // 60 else f"{h} h"


def parse_configuration(text: str) -> list[dict]:
    """``key = value`` lines into the ordered [{"key", "value"}] list; blank and # lines are skipped."""
    entries, errors, seen = [], [], {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            errors.append(f"line {number}: expected key = value")
        elif key in seen:
            errors.append(f"line {number}: key {key} appears twice (first on line {seen[key]})")
        else:
            seen[key] = number
            entries.append({"key": key, "value": value})
    if errors:
        raise forms.ValidationError(errors)
    return entries


def format_configuration(configuration: list[dict]) -> str:
    return "\n".join(f"{item['key']} = {item['value']}" for item in configuration)


def parse_headers(text: str) -> dict[str, str]:
    """``Name: value`` lines into a dict; blank lines are skipped."""
    headers, errors, seen = {}, [], {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        name, sep, value = line.partition(":")
        name, value = name.strip(), value.strip()
        if not sep or not name:
            errors.append(f"line {number}: expected Name: value")
        elif not HEADER_NAME.match(name):
            errors.append(f"line {number}: “{name}” is not a valid header name")
        elif name.lower() in seen:
            errors.append(f"line {number}: header {name} appears twice (first on line {seen[name.lower()]})")
        else:
            seen[name.lower()] = number
            headers[name] = value
    if errors:
        raise forms.ValidationError(errors)
    return headers


def format_headers(headers: dict) -> str:
    return "\n".join(f"{name}: {value}" for name, value in headers.items())


class ProjectForm(forms.ModelForm):
    """Create (with ``teams``, the user's writable teams) or edit (without) a project."""

    class Meta:
        model = Project
        fields = ["name", "description"]
        widgets = {"description": forms.Textarea(attrs={"rows": 3})}

    def __init__(self, *args, teams=None, **kwargs):
        super().__init__(*args, **kwargs)
        if teams is not None:
            if len(teams) > 1:
                self.fields["team"] = forms.ModelChoiceField(
                    queryset=Team.objects.filter(pk__in=[t.pk for t in teams]).order_by("name"),
                    to_field_name="code",
                    help_text="Its members will see the project; editors can change it.",
                )
            else:
                self.instance.team = teams[0]

    def clean(self):
        cleaned = super().clean()
        team = cleaned.get("team") if "team" in self.fields else self.instance.team
        name = cleaned.get("name")
        if team and name:
            clash = Project.objects.filter(team=team, name__iexact=name).exclude(pk=self.instance.pk)
            if clash.exists():
                self.add_error("name", f"{team} already has a project called “{name}”.")
        return cleaned


class ProjectScopedForm(forms.ModelForm):
    """A form for something that lives in a project; its name is unique in the project."""

    name_taken = "This project already has one called “{name}”."

    def __init__(self, *args, project: Project, **kwargs):
        super().__init__(*args, **kwargs)
        self.project = project
        self.instance.project = project

    def clean_name(self):
        name = self.cleaned_data["name"].strip()
        model = self._meta.model
        if model.objects.filter(project=self.project, name__iexact=name).exclude(pk=self.instance.pk).exists():
            raise forms.ValidationError(self.name_taken.format(name=name))
        return name


class EnvironmentForm(ProjectScopedForm):
    name_taken = "This project already has an environment called “{name}”."

    base_url = forms.URLField(
        label="Base URL",
        max_length=500,
        assume_scheme="http",
        help_text=Environment._meta.get_field("base_url").help_text,
        widget=forms.URLInput(attrs={"placeholder": "http://127.0.0.1:8001"}),
    )

    configuration_text = forms.CharField(
        label="Configuration",
        required=False,
        widget=forms.Textarea(attrs={"rows": 8, "placeholder": "sql.startup_flags = -T1118\niis.max_processes = 7"}),
        help_text="One <code>key = value</code> per line, in the order you want them listed. "
        "Blank lines and lines starting with # are ignored.",
    )

    class Meta:
        model = Environment
        fields = ["name", "base_url", "description"]
        widgets = {"description": forms.Textarea(attrs={"rows": 3})}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["configuration_text"].initial = format_configuration(self.instance.configuration or [])

    def clean_base_url(self):
        url = self.cleaned_data["base_url"]
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            raise forms.ValidationError("Use an http:// or https:// URL.")
        if not parts.hostname:
            raise forms.ValidationError("Give a host name, e.g. http://127.0.0.1:8001")
        if parts.username or parts.password:
            raise forms.ValidationError("Leave credentials out of the URL; put them in a step's headers.")
        if parts.path not in ("", "/") or parts.query or parts.fragment:
            raise forms.ValidationError(
                "Give only scheme, host and port (e.g. http://shop.test:8080); paths belong in the test cases' steps."
            )
        return f"{parts.scheme}://{parts.netloc}"

    def clean_configuration_text(self):
        return parse_configuration(self.cleaned_data["configuration_text"])

    def save(self, commit=True):
        self.instance.configuration = self.cleaned_data["configuration_text"]
        return super().save(commit=commit)


ServerFormSet = inlineformset_factory(
    Environment,
    Server,
    fields=["name", "role", "hardware"],
    extra=2,
    can_delete=True,
    help_texts={"role": ""},
    widgets={
        "name": forms.TextInput(attrs={"placeholder": "web-01"}),
        "role": forms.TextInput(attrs={"placeholder": "web"}),
        "hardware": forms.TextInput(attrs={"placeholder": "4 vCPU, 16 GB"}),
    },
)


class TestCaseForm(ProjectScopedForm):
    __test__ = False  # not a pytest test class
    name_taken = "This project already has a test case called “{name}”."

    class Meta:
        model = TestCase
        fields = ["name", "description"]
        widgets = {"description": forms.Textarea(attrs={"rows": 3})}


class StepForm(forms.ModelForm):
    headers_text = forms.CharField(
        label="Headers",
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "placeholder": "Accept: text/html"}),
        help_text="One <code>Name: value</code> per line.",
    )

    class Meta:
        model = Step
        fields = [
            "name",
            "method",
            "path",
            "headers_text",
            "body",
            "think_time",
            "expect_status",
            "text_present",
            "text_absent",
        ]
        widgets = {
            "body": forms.Textarea(attrs={"rows": 3}),
            "path": forms.TextInput(attrs={"placeholder": "/search?q=report"}),
        }

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["headers_text"].initial = format_headers(self.instance.headers or {})
        self.fields["think_time"].widget.attrs["step"] = "any"
        self.fields["method"].choices = [(m, m) for m in Step.Method.values]
        # Several step forms can be on one page at once (one being edited, one being added).
        self.auto_id = f"id_step_{self.instance.code if self.instance.pk else 'new'}_%s"

    def clean_path(self):
        path = self.cleaned_data["path"].strip()
        if not path.startswith("/"):
            raise forms.ValidationError("Start the path with /, it is relative to the environment's base URL")
        return path

    def clean_headers_text(self):
        return parse_headers(self.cleaned_data["headers_text"])

    def save(self, commit=True):
        self.instance.headers = self.cleaned_data["headers_text"]
        return super().save(commit=commit)


class PlanForm(ProjectScopedForm):
    name_taken = "This project already has a plan called “{name}”."

    class Meta:
        model = Plan
        fields = [
            "name",
            "description",
            "environment",
            "users",
            "ramp_up",
            "hold",
            "ramp_down",
            "think_time_mode",
            "request_timeout",
            "threshold_apd_ms",
            "threshold_p95_ms",
            "threshold_error_rate_pct",
        ]
        widgets = {"description": forms.Textarea(attrs={"rows": 2})}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Only this project's environments are choices, so another project's is "not one of the choices".
        self.fields["environment"].queryset = self.project.environments.all()
        self.fields["environment"].to_field_name = "code"
        self.fields["environment"].empty_label = None
        for name in ("ramp_up", "hold", "ramp_down", "request_timeout", "threshold_error_rate_pct"):
            self.fields[name].widget.attrs["step"] = "any"

    def clean(self):
        cleaned = super().clean()
        parts = [cleaned.get(name) for name in ("ramp_up", "hold", "ramp_down")]
        if all(p is not None for p in parts):
            total, limit = sum(parts), settings.PLIMSOLL_MAX_RUN_SECONDS
            if total > limit:
                self.add_error(
                    "hold",
                    f"Ramp-up, hold and ramp-down add up to {human_duration(total)}; "
                    f"the longest run allowed is {human_duration(limit)}.",
                )
        return cleaned


class MixAddForm(forms.ModelForm):
    """Adds one of the project's test cases, not yet in the mix, to a plan."""

    class Meta:
        model = MixEntry
        fields = ["test_case", "weight"]

    def __init__(self, *args, plan: Plan, **kwargs):
        super().__init__(*args, **kwargs)
        self.instance.plan = plan
        self.fields["test_case"].queryset = plan.project.test_cases.exclude(mix_entries__plan=plan)
        self.fields["test_case"].to_field_name = "code"
        self.fields["test_case"].empty_label = None
        self.fields["weight"].widget.attrs.update(min=1, style="max-width:6rem")


class MixWeightForm(forms.ModelForm):
    class Meta:
        model = MixEntry
        fields = ["weight"]
