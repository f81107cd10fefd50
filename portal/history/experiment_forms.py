"""Forms of trial sets and experiments.

The change an experiment makes is described by the tuning-change form
(``portal.history.forms.ChangeForm``), shown beside ``ExperimentForm`` with the prefix
``change``: both forms have a ``title``, and the change form needs the plan's
environment, which is why the experiment page fixes the plan first (``?plan=<code>``).
"""

from django import forms

from portal.projects.models import Plan, Project

from .models import MAX_TRIALS, Experiment, TuningChange

CHANGE_PREFIX = "change"


class RunChoiceField(forms.ModelMultipleChoiceField):
    def label_from_instance(self, run):
        started = (run.start_at or run.created_at).strftime("%Y-%m-%d %H:%M")
        source = f" — {run.source_label}" if run.source_label else ""
        taken = " (already in a trial set)" if run.trial_set_id else ""
        return f"#{run.number} {run.plan_name}, {started}{source}{taken}"


class TrialSetFromRunsForm(forms.Form):
    """Runs that already exist (imported ones above all) gathered into a trial set (issue 18)."""

    runs = RunChoiceField(
        queryset=None,
        to_field_name="code",
        widget=forms.CheckboxSelectMultiple,
        help_text="Finished runs of this environment, measured under one configuration, in no other trial set.",
    )
    label = forms.CharField(
        max_length=200, required=False, help_text="Optional: what this set measures, e.g. “last quarter, JMeter”."
    )

    def __init__(self, *args, environment, **kwargs):
        from portal.runs.models import Run

        super().__init__(*args, **kwargs)
        self.fields["runs"].queryset = (
            Run.objects.filter(environment=environment).exclude(status__in=Run.ACTIVE).order_by("-number")
        )


class TrialSetForm(forms.Form):
    """N runs of a plan in a row: the number, and an optional label to find the set again."""

    size = forms.IntegerField(
        label="Trials",
        min_value=1,
        max_value=MAX_TRIALS,
        initial=3,
        help_text=f"Runs of the plan one after the other (1 to {MAX_TRIALS}); three give a spread to weigh "
        "a difference against.",
    )
    label = forms.CharField(
        max_length=200,
        required=False,
        help_text="Optional: what this set measures, e.g. “before the index”.",
    )


class PlanChoiceForm(forms.Form):
    """The first step of a new experiment: the plan (and so the environment) it measures."""

    plan = forms.ModelChoiceField(queryset=Plan.objects.none(), empty_label=None, to_field_name="code")

    def __init__(self, data=None, *, project: Project, **kwargs):
        super().__init__(data, **kwargs)
        self.fields["plan"].queryset = project.plans.select_related("environment").order_by("name")
        self.fields["plan"].label_from_instance = lambda plan: f"{plan.name} (on {plan.environment.name})"


class ExperimentForm(forms.ModelForm):
    class Meta:
        model = Experiment
        fields = ["title", "description", "trials", "apply_mode"]
        widgets = {
            "description": forms.Textarea(attrs={"rows": 3}),
            "apply_mode": forms.RadioSelect,
        }
        help_texts = {
            "title": "The question it answers, in a few words: “Index on work_items.area”.",
            "trials": f"Runs of the plan before the change, and as many after (1 to {MAX_TRIALS}).",
        }

    def check_with_change(self, change_form) -> None:
        """An experiment applied by hook needs the change's hook URL: say so next to the mode.

        Called once both forms are valid; the service refuses the same thing, but here the
        message lands next to the field the user has to change.
        """
        hook_url = (change_form.cleaned_data or {}).get("hook_url")
        control = (change_form.cleaned_data or {}).get("category") == TuningChange.Category.CONTROL
        if self.cleaned_data.get("apply_mode") == Experiment.ApplyMode.HOOK and not hook_url and not control:
            self.add_error(
                "apply_mode",
                "Applying by hook needs the change's hook URL below; without one, choose “by hand”.",
            )
