"""The result-file upload form (issue 18): several files at once, one imported run each."""

from django import forms
from django.conf import settings

from . import result_files


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
