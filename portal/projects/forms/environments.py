"""An environment and its servers (the formset, and the rows as the service's ServerSpec)."""

from django import forms
from django.conf import settings
from django.core.validators import validate_slug
from django.forms import inlineformset_factory

from .. import rules
from ..models import Environment, Server
from .projects import ProjectScopedForm
from .text import format_configuration, parse_configuration


class EnvironmentForm(ProjectScopedForm):
    name_taken = "This project already has an environment called “{name}”."

    # A CharField read by rules.clean_base_url (the strict target parser, with its reasons), not Django's
    # URLField, whose "Enter a valid URL." came first for htp://… and 127.1.
    base_url = forms.CharField(
        label="Base URL",
        max_length=500,
        widget=forms.URLInput(),
    )

    configuration_text = forms.CharField(
        label="Configuration",
        required=False,
        strip=False,  # line numbers in messages count the blank lines too
        widget=forms.Textarea(attrs={"rows": 8, "placeholder": "sql.startup_flags = -T1118\niis.max_processes = 7"}),
        help_text="The initial configuration: one <code>key = value</code> per line, in the order you want "
        "them listed. Blank lines and lines starting with # are ignored. Afterwards it changes only through "
        "tuning changes, recorded on the environment's page.",
    )

    class Meta:
        model = Environment
        fields = [
            "name",
            "base_url",
            "config_url",
            "description",
            "metrics_interval_s",
            "prometheus_url",
            "generator_pool",
            "trace_url_template",
            "otlp_endpoint",
            "protocol",
        ]
        widgets = {
            "description": forms.Textarea(attrs={"rows": 3}),
            "config_url": forms.URLInput(),
            "prometheus_url": forms.URLInput(attrs={"placeholder": "http://prometheus:9090"}),
            "trace_url_template": forms.TextInput(attrs={"placeholder": "https://tempo.example/trace/{trace_id}"}),
            "otlp_endpoint": forms.URLInput(attrs={"placeholder": "http://otel-collector:4318"}),
        }

    # Write-only: stored encrypted, never rendered back (an empty box keeps the stored token).
    prometheus_token = forms.CharField(
        label="Prometheus bearer token",
        required=False,
        strip=True,
        max_length=4000,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text="Optional: sent as Authorization: Bearer …; stored encrypted and never shown. "
        "Leave empty to keep the current one.",
    )
    prometheus_token_clear = forms.BooleanField(label="Forget the stored token", required=False)
    ca_bundle_file = forms.FileField(
        label="CA bundle",
        required=False,
        help_text="For a system whose certificates a private CA signs: its CA certificates as a PEM file "
        "(<code>-----BEGIN CERTIFICATE-----</code> …), trusted besides the system's CAs. Certificates are "
        "verified. Leave empty to keep the current bundle.",
        widget=forms.ClearableFileInput(attrs={"accept": ".pem,.crt,.cer,.txt"}),
    )
    ca_bundle_clear = forms.BooleanField(label="Remove the CA bundle", required=False)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["metrics_interval_s"].required = False
        self.fields["protocol"].required = False  # left out (older clients): unchanged
        # The example is where this instance's demo target listens (make run DEMO_PORT=…), not a fixed port.
        demo, base_url = settings.DEMO_BASE_URL, self.fields["base_url"]
        base_url.help_text = f"Scheme, host and port of the system under test, e.g. {demo} (the bundled demo target)"
        base_url.widget.attrs["placeholder"] = demo
        if config_url := self.fields.get("config_url"):
            config_url.help_text = (
                "Optional: where the system under test reports its actual configuration, as a JSON object of "
                f"key → value (the bundled demo target's: {demo}/_demo/config). Verify on the environment's page, "
                "each run as it starts and each tuning change once applied compare it with the ledger."
            )
        if self.instance.pk:
            # Once the environment exists its configuration changes only through tuning changes
            # (portal.history), so that every run can name the configuration it measured.
            del self.fields["configuration_text"]
        else:
            self.fields["configuration_text"].initial = format_configuration(self.instance.configuration or [])

    def clean_base_url(self):
        url, messages = rules.clean_base_url(self.cleaned_data["base_url"])
        if messages:
            raise forms.ValidationError(messages)
        return url

    def clean_generator_pool(self):
        # The pool names a Celery queue (engine.<pool>): letters, digits, - and _ only.
        pool = self.cleaned_data.get("generator_pool", "").strip()
        if pool:
            validate_slug(pool)
        return pool

    def clean_metrics_interval_s(self):
        # Optional in the form (older clients and the API post none): empty keeps the current value.
        value = self.cleaned_data.get("metrics_interval_s")
        return value if value is not None else (self.instance.metrics_interval_s or 5)

    def clean_configuration_text(self):
        return parse_configuration(self.cleaned_data["configuration_text"])

    def clean_protocol(self):
        return self.cleaned_data.get("protocol") or self.instance.protocol or "auto"

    def clean_ca_bundle_file(self):
        upload = self.cleaned_data.get("ca_bundle_file")
        if not upload:
            return None
        if upload.size > rules.MAX_CA_BUNDLE_BYTES:
            raise forms.ValidationError(f"A CA bundle is at most {rules.MAX_CA_BUNDLE_BYTES // 1024} KB.")
        try:
            text = upload.read().decode("ascii")
        except UnicodeDecodeError:
            raise forms.ValidationError(
                "This file is not PEM text (a binary .der certificate?): convert it with "
                "openssl x509 -inform der -in ca.der -out ca.pem"
            ) from None
        bundle, messages = rules.clean_ca_bundle(text)
        if messages:
            raise forms.ValidationError(messages)
        if not bundle:
            raise forms.ValidationError("The file is empty.")
        return bundle

    def service_values(self) -> dict:
        """The cleaned form as services.environment_save's keyword arguments (without servers)."""
        data = self.cleaned_data
        values = {k: data[k] for k in self.Meta.fields}  # the model's fields this form edits, as they are
        if data.get("ca_bundle_file"):
            values["ca_bundle"] = data["ca_bundle_file"]
            values["ca_bundle_name"] = self.files["ca_bundle_file"].name
        elif data.get("ca_bundle_clear"):
            values["ca_bundle"] = ""
        if data.get("prometheus_token_clear"):
            values["prometheus_token"] = ""
        elif data.get("prometheus_token"):
            values["prometheus_token"] = data["prometheus_token"]
        if "configuration_text" in self.fields:
            values["configuration"] = data["configuration_text"]
        return values


class ServerForm(forms.ModelForm):
    """A server row; its metrics endpoint is checked like any outbound request (portal.metrics)."""

    counter_set = forms.ChoiceField(required=False)

    def __init__(self, *args, **kwargs):
        from portal.telemetry.countersets import CHOICES

        super().__init__(*args, **kwargs)
        self.fields["counter_set"].choices = [("", "—"), *CHOICES]

    def clean(self):
        data = super().clean()
        if "metrics_url" in data:
            url, errors = rules.server_errors(metrics_url=data["metrics_url"], counter_set=data.get("counter_set", ""))
            data["metrics_url"] = url
            for field, messages in errors.items():
                self.add_error(field, messages)
        if data.get("prometheus_selector"):
            # Whether the environment has a Prometheus is checked on save (services.environment_save),
            # where the environment's form and this row meet.
            from portal.telemetry.promql import parse_selector, selector_text

            try:
                data["prometheus_selector"] = selector_text(parse_selector(data["prometheus_selector"]))
            except ValueError as exc:
                self.add_error("prometheus_selector", str(exc))
            if not data.get("counter_set") and "counter_set" not in self.errors:
                self.add_error(
                    "counter_set", "Choose the counter set of the exporter Prometheus scrapes on this server."
                )
        return data


def server_specs(formset) -> list:
    """The formset's rows that are servers, in order, as services.ServerSpec (existing rows keep their id)."""
    from ..services import ServerSpec

    return [
        ServerSpec(
            name=f.cleaned_data["name"],
            role=f.cleaned_data.get("role", ""),
            hardware=f.cleaned_data.get("hardware", ""),
            metrics_url=f.cleaned_data.get("metrics_url", ""),
            counter_set=f.cleaned_data.get("counter_set", ""),
            prometheus_selector=f.cleaned_data.get("prometheus_selector", ""),
            id=f.instance.pk,
        )
        for f in formset.forms
        if f.cleaned_data and not formset._should_delete_form(f)
    ]


ServerFormSet = inlineformset_factory(
    Environment,
    Server,
    form=ServerForm,
    fields=["name", "role", "hardware", "metrics_url", "counter_set", "prometheus_selector"],
    extra=2,
    can_delete=True,
    help_texts={"role": ""},
    widgets={
        "name": forms.TextInput(attrs={"placeholder": "web-01"}),
        "role": forms.TextInput(attrs={"placeholder": "web"}),
        "hardware": forms.TextInput(attrs={"placeholder": "4 vCPU, 16 GB"}),
        "metrics_url": forms.TextInput(attrs={"placeholder": "http://web-01:9100/metrics"}),
        "prometheus_selector": forms.TextInput(attrs={"placeholder": 'instance="web-01:9100"'}),
    },
)
