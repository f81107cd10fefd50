"""A plan: its load profile and levels, stop criteria and thresholds, degradation settings, and its mix."""

from django import forms
from django.core.validators import MaxValueValidator
from django.forms import BaseInlineFormSet, inlineformset_factory

from workers.engine.stop_criteria import CriteriaError, parse_text, rules_text

from .. import profiles, rules
from ..models import MixEntry, Plan, PlanLevel
from ..services import PLAN_VALUES
from .projects import ProjectScopedForm

MAX_LEVELS = rules.MAX_LEVELS


class LevelForm(forms.ModelForm):
    class Meta:
        model = PlanLevel
        fields = ["users", "ramp_up", "hold", "ramp_down", "quiet"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for name in ("ramp_up", "hold", "ramp_down", "quiet"):
            self.fields[name].widget.attrs["step"] = "any"
        for name, field in self.fields.items():
            field.widget.attrs.setdefault("aria-label", field.label)
            if name != "users":
                field.widget.attrs["min"] = "0"


class BaseLevelFormSet(BaseInlineFormSet):
    def live_forms(self) -> list[LevelForm]:
        """The rows that are levels, in order: filled in and not being removed."""
        return [f for f in self.forms if f.cleaned_data and not self._should_delete_form(f)]

    def clean(self):
        super().clean()
        if any(self.errors):
            return
        if message := rules.levels_error([f.instance for f in self.live_forms()]):
            raise forms.ValidationError(message)


LevelFormSet = inlineformset_factory(
    Plan,
    PlanLevel,
    form=LevelForm,
    formset=BaseLevelFormSet,
    extra=0,
    can_delete=True,
    max_num=MAX_LEVELS,
    validate_max=True,
)


# The plan's degradation settings (portal.stats.analysis.degradation), in the order the form shows them.
DEGRADATION_INPUTS = Plan.DEGRADATION_INPUTS
THRESHOLD_MAXIMA = rules.THRESHOLD_MAXIMA


class PlanForm(ProjectScopedForm):
    """A plan with its load profile; only the chosen kind's fields (or levels) are validated and saved."""

    name_taken = "This project already has a plan called “{name}”."
    # In the order the page shows them; each kind shows its own (Plan.PROFILE_FIELDS).
    PROFILE_INPUTS = Plan.PROFILE_INPUTS
    LEVELS_NEED_FIXING = "Some levels of the profile need fixing (see below)."

    stop_criteria = forms.CharField(
        label="Stop criteria",
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "placeholder": "error rate > 50 % over 60 s\npages/s < 1 over 30 s"}),
        help_text="One rule a line; the run stops itself when one breaks over its sliding window of the measured part "
        "(ramp-up excluded): error rate, APD, p50, p90, p95 or p99 above a limit, or pages/s below one. "
        "Window 5 to 3600 s, 60 s if you leave it out.",
    )

    class Meta:
        model = Plan
        # the plan's own values as the service and the API take them (services.PLAN_VALUES)
        fields = ["name", "description", "environment", *(v for v in PLAN_VALUES if v != "description")]
        widgets = {"description": forms.Textarea(attrs={"rows": 2})}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Only this project's environments are choices, so another project's is "not one of the choices".
        self.fields["environment"].queryset = self.project.environments.all()
        self.fields["environment"].to_field_name = "code"
        self.fields["environment"].empty_label = None
        self.fields["protocol"].required = False  # left out (older clients, scripts): the environment's
        for name in (*self.PROFILE_INPUTS, "request_timeout"):
            if isinstance(self.fields[name], forms.FloatField):
                self.fields[name].widget.attrs["step"] = "any"
        self.fields["threshold_error_rate_pct"].widget.attrs["step"] = "any"
        self.fields["threshold_min_pages_per_s"].widget.attrs["step"] = "any"
        self.fields["threshold_min_h2_share_pct"].widget.attrs["step"] = "any"
        self.fields["trace_sample_rate"].required = False  # left out: the plan's (1.0 for a new one)
        self.fields["trace_sample_rate"].widget.attrs.update(step="any", min=0, max=1)
        # Sane upper bounds, so that a slip ("1e30") is refused rather than failing every run.
        for name, most in THRESHOLD_MAXIMA.items():
            self.fields[name].validators.append(MaxValueValidator(most))
            self.fields[name].widget.attrs["max"] = most
        # Degradation settings always have a value: left empty, they keep the plan's (or the defaults).
        for name in DEGRADATION_INPUTS:
            self.fields[name].required = False
        for name in ("degradation_drop_pct", "degradation_rise_pct"):
            self.fields[name].widget.attrs["step"] = "any"
        # Each kind needs its own fields: clean() asks for them, so the browser must not ask for the others.
        for name in self.PROFILE_INPUTS:
            self.fields[name].required = False
        self.levels = self._level_formset()
        if not self.is_bound:
            self.initial["stop_criteria"] = rules_text(self.instance.stop_rules)

    def clean_stop_criteria(self):
        """The text's rules as the plan stores them; a malformed line is refused with its number and the reason."""
        try:
            return [rule.to_dict() for rule in parse_text(self.cleaned_data.get("stop_criteria") or "")]
        except CriteriaError as exc:
            raise forms.ValidationError(str(exc)) from None

    def _level_formset(self) -> BaseLevelFormSet:
        if self.is_bound:
            return LevelFormSet(self.data, instance=self.instance, prefix="levels")
        levels = LevelFormSet(instance=self.instance, prefix="levels")
        # One more row: without JavaScript, filling it adds a level (the page's script offers a button instead).
        levels.extra = 1
        if not levels.initial_form_count():
            # A first level to start from, taken from the ramp the plan had.
            p = self.instance
            levels.initial_extra = [
                {"users": p.users, "ramp_up": p.ramp_up, "hold": p.hold, "ramp_down": p.ramp_down, "quiet": 0}
            ]
        return levels

    @property
    def kind(self) -> str:
        kind = self.data.get("profile_kind") if self.is_bound else self.instance.profile_kind
        return profiles.kind_named(kind).name

    def kinds(self):
        """Every kind of profile, for its help paragraph on the page."""
        return profiles.ordered()

    def level_kinds(self) -> str:
        """The kinds that take levels, as the template's data-kinds toggle reads them."""
        return " ".join(kind.name for kind in profiles.ordered() if kind.uses_levels)

    def profile_fields(self):
        """(bound field, the kinds that use it as a space-separated string) for the template's toggle."""
        for name in self.PROFILE_INPUTS:
            kinds = [kind for kind, names in Plan.PROFILE_FIELDS.items() if name in names]
            yield self[name], " ".join(kinds)

    def clean(self):
        cleaned = super().clean()
        kind = cleaned.get("profile_kind")
        if kind is None:
            return cleaned
        for name in DEGRADATION_INPUTS:
            if cleaned.get(name) is None and name not in self._errors:
                cleaned[name] = getattr(self.instance, name)
        used = Plan.PROFILE_FIELDS[kind]
        for name in self.PROFILE_INPUTS:
            if name not in used:
                # Not part of this kind: neither checked nor changed, so switching back finds it as it was.
                self._errors.pop(name, None)
                cleaned[name] = getattr(self.instance, name)
            elif name not in self._errors and cleaned.get(name) is None and name not in Plan.OPTIONAL_PROFILE_FIELDS:
                self.add_error(name, forms.Field.default_error_messages["required"])
        if profiles.kind_named(kind).uses_levels:
            if self.levels.is_valid():
                self.instance._levels = [f.instance for f in self.levels.live_forms()]
            else:
                self.add_error(None, self.LEVELS_NEED_FIXING)
        else:
            self._check_duration(kind, cleaned)
        return cleaned

    def _check_duration(self, kind: str, cleaned: dict) -> None:
        if message := rules.profile_duration_error(kind, cleaned):
            self.add_error("hold", message)

    def clean_protocol(self):
        return self.cleaned_data.get("protocol") or Plan.Protocol.ENVIRONMENT

    def clean_trace_sample_rate(self):
        value = self.cleaned_data.get("trace_sample_rate")
        return value if value is not None else self.instance.trace_sample_rate

    def service_values(self) -> dict:
        """The cleaned form as services.plan_save's keyword arguments."""
        from ..services import LevelSpec

        data = self.cleaned_data
        levels = None
        if profiles.kind_named(data["profile_kind"]).uses_levels:
            levels = [
                LevelSpec(**{k: f.cleaned_data[k] for k in ("users", "ramp_up", "hold", "ramp_down", "quiet")})
                for f in self.levels.live_forms()
            ]
        return {
            "name": data["name"],
            "environment": data["environment"],
            "values": {k: data[k] for k in PLAN_VALUES},
            "levels": levels,
        }

    def profile_errors(self) -> dict[str, list[str]]:
        """The errors that concern the load profile (the preview ignores the name, thresholds, …)."""
        errors = {
            name: list(messages)
            for name, messages in self.errors.items()
            if name in self.PROFILE_INPUTS or name == "profile_kind"
        }
        if profiles.kind_named(self.kind).uses_levels and not self.levels.is_valid():
            if self.levels.non_form_errors():
                errors["levels"] = list(self.levels.non_form_errors())
            for form in self.levels.forms:
                if self.levels._should_delete_form(form):
                    continue
                for name, messages in form.errors.items():
                    errors[form.add_prefix(name)] = list(messages)
        return errors


def _weight_field() -> forms.IntegerField:
    """A mix weight: 1 to 10,000, with one rule in its message whatever the number (the model field's
    PositiveIntegerField said "≥ 0" for −1 and its validator "≥ 1" for 0)."""
    message = "Give a whole number from 1 to 10,000."
    return forms.IntegerField(
        label="Weight",
        min_value=1,
        max_value=10_000,
        initial=1,
        error_messages={"min_value": message, "max_value": message, "invalid": message},
    )


class MixAddForm(forms.ModelForm):
    """Adds one of the project's test cases, not yet in the mix, to a plan."""

    weight = _weight_field()

    class Meta:
        model = MixEntry
        fields = ["test_case", "weight"]

    def __init__(self, *args, plan: Plan, **kwargs):
        super().__init__(*args, **kwargs)
        self.instance.plan = plan
        self.fields["test_case"].queryset = plan.project.test_cases.exclude(mix_entries__plan=plan)
        self.fields["test_case"].to_field_name = "code"
        self.fields["test_case"].empty_label = None
        self.fields["weight"].widget.attrs.update(min=1)  # its width is in plimsoll.css: the CSP refuses style=""


class MixWeightForm(forms.ModelForm):
    weight = _weight_field()

    class Meta:
        model = MixEntry
        fields = ["weight"]
