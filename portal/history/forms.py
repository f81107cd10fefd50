"""Forms of the results history: a tuning change and an external measurement.

A tuning change is written the way people think of a configuration: the whole of it as
``key = value`` lines, edited in place. The form turns the text into ``edits`` (the keys
set, added or removed) against the environment's current configuration, because edits
are what a change applies: another change applied in between keeps its own keys.
"""

import hashlib
import json
from datetime import timedelta

from django import forms
from django.conf import settings
from django.utils import timezone

from portal import outbound
from portal.projects.forms import format_configuration, parse_configuration
from portal.runs.models import Run
from workers.engine import safejson

from .models import ExternalMeasurement, TuningChange, apply_edits, config_diff

UNCHANGED = "The configuration is unchanged: edit a value, add or remove a key."
CONTROL_CHANGES_NOTHING = (
    "A control changes nothing: leave the configuration as it is (it is recorded unchanged), "
    "or choose another category."
)
CONTROL_HOOK = "A control changes nothing, so it has no hook to send: leave the hook URL empty."
# A clock a little ahead of the server's is fine; a date next week is a typo.
FUTURE_TOLERANCE = timedelta(minutes=5)
COMMON_UNITS = ["s", "min", "h", "ms", "GB", "MB", "TB", "MB/s", "items", "%"]
# Units of durations and sizes: a measurement in one of them cannot be negative (matched ignoring case).
NON_NEGATIVE_UNITS = {
    *("ms", "s", "sec", "secs", "second", "seconds", "min", "mins", "minute", "minutes", "h", "hr", "hrs"),
    *("hour", "hours", "d", "day", "days", "b", "byte", "bytes", "kb", "mb", "gb", "tb", "pb"),
    *("kib", "mib", "gib", "tib", "kb/s", "mb/s", "gb/s", "items", "rows"),
}


def edits_between(before: list[dict], after: list[dict]) -> list[dict]:
    """The edits ([{key, value}], None removes) that turn configuration ``before`` into ``after``."""
    return [{"key": d["key"], "value": d["after"]} for d in config_diff(before, after)]


def fingerprint(configuration: list[dict]) -> str:
    """A short digest of a configuration, to notice that it changed while someone was editing it."""
    text = json.dumps(configuration or [], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def revert_prefill(change: TuningChange) -> dict:
    """What the change form starts from to undo an applied ``change``.

    The configuration is the current one with every key the change touched put back as
    it was before it (a key it added is removed again); keys other changes set since are
    left alone. When the hook body is a JSON object naming exactly the keys the change
    set, the body is turned back too (``{"search.index": "on"}`` → ``"off"``); otherwise
    it is copied as it was, for the user to edit. ``changed_since`` lists the keys a later
    change set again, whose revert would undo that later change too.
    """
    current = change.environment.configuration
    restore = [{"key": d["key"], "value": d["before"]} for d in change.diff]
    hook_body, body_reverted = change.hook_body, False
    try:
        body = safejson.loads(change.hook_body) if change.hook_body.strip() else None
    except ValueError:
        body = None
    before = {d["key"]: d["before"] for d in change.diff}
    now = {item["key"]: item["value"] for item in current}
    changed_since = [d["key"] for d in change.diff if now.get(d["key"]) != d["after"]]
    if isinstance(body, dict) and body and set(body) <= set(before) and all(before[k] is not None for k in body):
        hook_body = json.dumps({k: before[k] for k in body}, ensure_ascii=False)
        body_reverted = True
    return {
        "initial_configuration": apply_edits(current, restore),
        "initial": {
            "title": f"Revert: {change.title}"[: TuningChange._meta.get_field("title").max_length],
            "category": change.category,
            "reason": f"Undoes #{change.number} {change.title}.",
            "hook_method": change.hook_method,
            "hook_url": change.hook_url,
            "hook_body": hook_body,
            "hook_content_type": change.hook_content_type,
        },
        "body_reverted": body_reverted,
        "changed_since": changed_since,
    }


def _is_json(content_type: str) -> bool:
    media = content_type.split(";")[0].strip().lower()
    return media == "application/json" or media.endswith("+json")


class ChangeForm(forms.ModelForm):
    """A tuning change of ``environment``: what, why, the configuration after it, and its hook.

    After ``is_valid()``, ``edits`` holds the keys to set or remove; ``save(commit=False)``
    gives the unsaved change with its environment and edits (status *planned*), and
    ``change_fields`` the model fields for ``services.change_create``.
    """

    configuration = forms.CharField(
        label="Configuration after the change",
        required=False,
        strip=False,  # line numbers in messages count the blank lines too
        widget=forms.Textarea(attrs={"rows": 10, "spellcheck": "false"}),
        help_text="The whole configuration as it will be: edit a value, add a line or delete one. "
        "One <code>key = value</code> per line; blank lines and lines starting with # are ignored.",
    )
    # The configuration the text was based on; a change applied meanwhile is then noticed, not undone.
    based_on = forms.CharField(required=False, widget=forms.HiddenInput)
    reference = forms.URLField(
        label="Reference link",
        max_length=500,
        required=False,
        assume_scheme="https",
        help_text="A KB article, a ticket, a blog post…",
        widget=forms.URLInput(attrs={"placeholder": "https://learn.microsoft.com/…"}),
    )
    # A CharField read by the strict target parser (``clean_hook_url``), not Django's URLField: the
    # parser that judges the URL must be the one the request is sent with.
    hook_url = forms.CharField(
        label="Hook URL",
        max_length=500,
        required=False,
        help_text="Optional: an HTTP request Plimsoll sends to make the change, e.g. the demo target's "
        f"<code>{settings.DEMO_BASE_URL}/_demo/knobs</code>. Leave it empty when a person makes the change. "
        "Only the hosts in the PLIMSOLL_OUTBOUND_ALLOWED setting are called; redirects are not followed.",
        widget=forms.URLInput(attrs={"placeholder": f"{settings.DEMO_BASE_URL}/_demo/knobs"}),
    )

    class Meta:
        model = TuningChange
        fields = [
            "category",
            "title",
            "reason",
            "reference",
            "hook_method",
            "hook_url",
            "hook_body",
            "hook_content_type",
        ]
        widgets = {
            "title": forms.TextInput(attrs={"placeholder": "Enable -T1118"}),
            "reason": forms.Textarea(
                attrs={"rows": 3, "placeholder": "Allocation contention on tempdb (PAGELATCH_UP waits)"}
            ),
            "hook_body": forms.Textarea(
                attrs={"rows": 4, "placeholder": '{"search.index": "on"}', "spellcheck": "false"}
            ),
        }
        help_texts = {
            "hook_body": "Sent as is (GET sends none).",
            "hook_content_type": "",
            "category": "<em>Control</em> is “no change” (an A/A test): leave the configuration as it is and the "
            "hook empty; runs before and after it measure the noise floor.",
        }

    def __init__(self, data=None, *, environment, initial_configuration=None, **kwargs):
        super().__init__(data, **kwargs)
        self.environment = environment
        self.instance.environment = environment
        self.edits: list[dict] = []
        start = environment.configuration if initial_configuration is None else initial_configuration
        self.fields["configuration"].initial = format_configuration(start or [])
        self.fields["based_on"].initial = fingerprint(environment.configuration)
        # Accepting a baseline is an event of the ledger written by the regressed run's page, not a change to make.
        self.fields["category"].choices = [
            c for c in self.fields["category"].choices if c[0] != TuningChange.Category.BASELINE
        ]

    def clean_configuration(self):
        return parse_configuration(self.cleaned_data["configuration"])

    def clean_hook_url(self):
        url = self.cleaned_data["hook_url"].strip()
        if not url:
            return url
        if "://" not in url:
            url = f"http://{url}"  # as typed into the form: 127.0.0.1:8001/_demo/knobs
        try:
            outbound.parse_url(url)
        except outbound.OutboundRefused as exc:
            raise forms.ValidationError(str(exc)) from None
        try:
            outbound.check(url)
        except outbound.OutboundRefused as exc:
            raise forms.ValidationError(
                f"{exc} Hooks are sent only to the hosts the PLIMSOLL_OUTBOUND_ALLOWED setting allows "
                f"({outbound.notifications_allowlist()})."
            ) from None
        return url

    def clean(self):
        cleaned = super().clean()
        self._clean_edits(cleaned.get("configuration"), cleaned.get("based_on"), cleaned.get("category"))
        if cleaned.get("category") == TuningChange.Category.CONTROL and cleaned.get("hook_url"):
            self.add_error("hook_url", CONTROL_HOOK)
        body = cleaned.get("hook_body") or ""
        if body.strip():
            if cleaned.get("hook_method") == TuningChange.HookMethod.GET:
                self.add_error("hook_body", "A GET request carries no body: choose POST, PUT or PATCH, or empty it.")
            elif _is_json(cleaned.get("hook_content_type") or ""):
                try:
                    safejson.loads(body)
                except ValueError as exc:
                    self.add_error(
                        "hook_body",
                        f"This is not valid JSON ({exc}), and the content type says application/json.",
                    )
        return cleaned

    def _clean_edits(self, configuration, based_on, category=None) -> None:
        if configuration is None:  # the text had errors of its own
            return
        current = self.environment.configuration
        now = fingerprint(current)
        if based_on and based_on != now:
            # Offer the current configuration's fingerprint, so that saving again goes through.
            self.data = self.data.copy()
            self.data[self.add_prefix("based_on")] = now
            latest = self.environment.changes.filter(status=TuningChange.Status.APPLIED).order_by("-number").first()
            by = f" (change #{latest.number} “{latest.title}”)" if latest else ""
            self.add_error(
                "configuration",
                f"The environment's configuration changed while you were editing{by}. "
                "Compare your text with the current configuration and save again: "
                "every key in your text will be set as written.",
            )
            return
        self.edits = edits_between(current, configuration)
        if category == TuningChange.Category.CONTROL:
            if self.edits:
                self.add_error("configuration", CONTROL_CHANGES_NOTHING)
        elif not self.edits:
            self.add_error("configuration", UNCHANGED)

    @property
    def change_fields(self) -> dict:
        """The model's fields from the form, as ``services.change_create`` takes them."""
        return {name: self.cleaned_data[name] for name in self._meta.fields}

    def save(self, commit=True):
        self.instance.edits = self.edits
        return super().save(commit=commit)


class _ChangeChoice(forms.ModelChoiceField):
    def label_from_instance(self, obj):
        return f"#{obj.number} {obj.title} ({obj.applied_at:%Y-%m-%d %H:%M})"


class _RunChoice(forms.ModelChoiceField):
    def label_from_instance(self, obj):
        return f"Run #{obj.number} of {obj.plan_name} ({obj.created_at:%Y-%m-%d %H:%M}, {obj.get_status_display()})"


class MeasurementForm(forms.ModelForm):
    """An external measurement of ``environment``; its change and run are chosen among the environment's own.

    Names already used on the environment are offered (``known_names``) and a name typed
    in another case takes the existing spelling, so one figure keeps one series.
    """

    measured_at = forms.DateTimeField(
        label="Measured at",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"),
    )
    tuning_change = _ChangeChoice(
        queryset=TuningChange.objects.none(),
        required=False,
        to_field_name="code",
        label="Configuration",
        empty_label="The change in effect at that time",
        help_text="The configuration it was measured under.",
    )
    run = _RunChoice(
        queryset=Run.objects.none(),
        required=False,
        to_field_name="code",
        label="Run",
        empty_label="None",
        help_text="Optional: the run it was measured during, or for.",
    )

    class Meta:
        model = ExternalMeasurement
        fields = ["name", "unit", "value", "measured_at", "lower_is_better", "tuning_change", "run", "note"]
        widgets = {
            "name": forms.TextInput(attrs={"list": "measurement-names", "placeholder": "Database backup"}),
            "unit": forms.TextInput(attrs={"list": "measurement-units", "placeholder": "min"}),
            "note": forms.Textarea(attrs={"rows": 2}),
        }

    def __init__(self, data=None, *, environment, **kwargs):
        super().__init__(data, **kwargs)
        self.environment = environment
        self.instance.environment = environment
        self.known_names = list(environment.measurements.order_by("name").values_list("name", flat=True).distinct())
        used_units = environment.measurements.order_by().values_list("unit", flat=True).distinct()
        self.units = sorted(set(COMMON_UNITS) | set(used_units))
        self.fields["measured_at"].initial = lambda: timezone.localtime().replace(second=0, microsecond=0)
        self.fields["measured_at"].help_text = f"Time zone: {timezone.get_current_timezone_name()}."
        self.fields["tuning_change"].queryset = environment.changes.filter(status=TuningChange.Status.APPLIED).order_by(
            "-number"
        )
        self.fields["run"].queryset = environment.runs.filter(status__in=Run.FINISHED).order_by("-number")

    def clean_name(self):
        name = " ".join(self.cleaned_data["name"].split())
        same = next((known for known in self.known_names if known.lower() == name.lower()), None)
        return same or name

    def clean_unit(self):
        return self.cleaned_data["unit"].strip()

    def clean_measured_at(self):
        measured_at = self.cleaned_data["measured_at"]
        if measured_at > timezone.now() + FUTURE_TOLERANCE:
            raise forms.ValidationError("That is in the future: give the time it was measured.")
        return measured_at

    def clean(self):
        cleaned = super().clean()
        unit, value = cleaned.get("unit"), cleaned.get("value")
        if unit is not None and value is not None and value < 0 and unit.lower() in NON_NEGATIVE_UNITS:
            self.add_error("value", f"A measurement in {unit} cannot be negative: give the {unit} measured.")
        run, change = cleaned.get("run"), cleaned.get("tuning_change")
        if run is not None:
            if change is None:
                # Measured for a run: it belongs to the configuration the run ran under.
                cleaned["tuning_change"] = run.tuning_change
            elif run.tuning_change_id != change.id:
                ran_under = f"#{run.tuning_change.number}" if run.tuning_change else "the initial configuration"
                self.add_error(
                    "tuning_change",
                    f"Run #{run.number} ran under {ran_under}, not #{change.number}: "
                    "choose that, or leave the configuration to the run.",
                )
        return cleaned

    @property
    def measurement_fields(self) -> dict:
        """The model's fields from the form, as ``services.measurement_record`` takes them."""
        return {name: self.cleaned_data[name] for name in self._meta.fields}
