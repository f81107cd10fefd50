"""Forms of the projects pages.

ModelForms validate a UniqueConstraint only when every field in it is on the form, and
``project`` (or ``team``) never is, so each form checks its name itself and says why.
"""

import csv
import io
import re

from django import forms
from django.conf import settings
from django.core.validators import MaxValueValidator, validate_slug
from django.forms import BaseInlineFormSet, inlineformset_factory

from portal.accounts.models import Team
from workers.engine import variables
from workers.engine.stop_criteria import CriteriaError, parse_text, rules_text

from . import har, profiles, rules, services, wsactions
from .models import (
    DataSet,
    Environment,
    MixEntry,
    Plan,
    PlanLevel,
    Project,
    Server,
    Step,
    TestCase,
)

# Header field names are RFC 9110 tokens.
HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
# Variable and column names: what a ``{{name}}`` placeholder can hold (the engine's rule).
IDENTIFIER = re.compile(rf"^{variables.NAME.pattern}$")
NOT_AN_IDENTIFIER = "use letters, digits and _, not starting with a digit"

MAX_EXTRACTIONS = 50
MAX_RESOURCES = 100
MAX_DATA_SET_BYTES = 5 * 1024 * 1024
MAX_DATA_SET_ROWS = 100_000
MAX_DATA_SET_COLUMNS = 100
MAX_LEVELS = rules.MAX_LEVELS


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
        elif any(c.isspace() for c in key):
            errors.append(f"line {number}: the key “{key}” has a space; write keys without spaces, e.g. sql.max_dop")
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


def parse_extractions(text: str) -> list[dict]:
    """``name = source: expression`` lines into [{"name", "source", "expression"}]; blank lines are skipped."""
    items, errors, seen = [], [], {}
    sources = Step.Source.values
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        name, sep, rest = line.partition("=")
        source, colon, expression = rest.partition(":")
        name, expression = name.strip(), expression.strip()
        source = source.strip().lower().replace(" ", "_").replace("-", "_")
        if not sep or not colon or not name:
            errors.append(
                f"line {number}: expected name = source: expression, e.g. csrf = form_field: csrfmiddlewaretoken"
            )
        elif not IDENTIFIER.match(name):
            errors.append(f"line {number}: “{name}” is not a valid variable name ({NOT_AN_IDENTIFIER})")
        elif name in seen:
            errors.append(f"line {number}: {name} is already extracted on line {seen[name]}")
        elif source not in sources:
            errors.append(f"line {number}: the source must be one of {', '.join(sources)}, not “{source}”")
        elif not expression:
            errors.append(f"line {number}: give the {dict(Step.Source.choices)[source]} to extract after the colon")
        elif error := _expression_error(source, expression):
            errors.append(f"line {number}: {error}")
        else:
            seen[name] = number
            items.append({"name": name, "source": source, "expression": expression})
    if not errors and len(items) > MAX_EXTRACTIONS:
        errors.append(f"at most {MAX_EXTRACTIONS} extractions per step")
    if errors:
        raise forms.ValidationError(errors)
    return items


def _expression_error(source: str, expression: str) -> str | None:
    if source == Step.Source.REGEX:
        try:
            re.compile(expression)
        except re.error as exc:
            return f"the regex does not compile: {exc}"
    elif source == Step.Source.JSON:
        if not expression.startswith("$"):
            return f"a JSON path starts with $, e.g. $.items[0].id (not “{expression}”)"
        try:
            variables.parse_jsonpath(expression)
        except ValueError as exc:
            return f"“{expression}” is not a JSON path the engine reads ({exc}); e.g. $.items[0].id"
    elif source == Step.Source.HEADER and not HEADER_NAME.match(expression):
        return f"“{expression}” is not a valid header name"
    return None


def format_extractions(items: list[dict]) -> str:
    return "\n".join(f"{item['name']} = {item['source']}: {item['expression']}" for item in items)


def parse_resources(text: str) -> list[str]:
    """One path per line, each starting with /; blank lines are skipped."""
    paths, errors, seen = [], [], {}
    for number, raw in enumerate(text.splitlines(), start=1):
        path = raw.strip()
        if not path:
            continue
        if not path.startswith("/"):
            errors.append(f"line {number}: “{path}” must start with /, it is relative to the environment's base URL")
        elif any(c.isspace() for c in path):
            errors.append(f"line {number}: “{path}” contains a space; percent-encode it as %20")
        elif path in seen:
            errors.append(f"line {number}: {path} is listed twice (first on line {seen[path]})")
        else:
            seen[path] = number
            paths.append(path)
    if not errors and len(paths) > MAX_RESOURCES:
        errors.append(f"at most {MAX_RESOURCES} resources per step")
    if errors:
        raise forms.ValidationError(errors)
    return paths


def parse_data_set(upload) -> tuple[list[str], list[list[str]]]:
    """A CSV upload into (columns, rows): UTF-8, first row the column names, every row as long as the header."""
    if upload.size > MAX_DATA_SET_BYTES:
        raise forms.ValidationError(
            f"The file is {upload.size / 1024 / 1024:.1f} MB; the limit is {MAX_DATA_SET_BYTES // 1024 // 1024} MB."
        )
    raw = upload.read()
    if not raw.strip():
        raise forms.ValidationError("The file is empty: its first row names the columns, e.g. username,password")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise forms.ValidationError(
            f"The file is not UTF-8 text (byte 0x{raw[exc.start]:02x} at position {exc.start}). "
            "Save it as “CSV UTF-8” and upload it again."
        ) from None
    # strict: a stray or unclosed quote is an error to fix, not values silently run together
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    try:
        header = next(row for row in reader if row)
        columns = [name.strip() for name in header]
        _check_columns(columns)
        rows, ragged = [], []
        for number, row in enumerate((row for row in reader if row), start=2):
            if len(rows) == MAX_DATA_SET_ROWS:
                raise forms.ValidationError(
                    f"The file has more than {MAX_DATA_SET_ROWS:,} rows; keep the rows you need and upload it again."
                )
            if len(row) != len(columns):
                ragged.append(
                    f"row {number} has {len(row)} value{'' if len(row) == 1 else 's'}, the header has {len(columns)}"
                )
            rows.append(row)
    except csv.Error as exc:
        raise forms.ValidationError(f"line {reader.line_num} is not valid CSV: {exc}") from None
    if ragged:
        more = f" (and {len(ragged) - 5} more rows like these)" if len(ragged) > 5 else ""
        raise forms.ValidationError(f"{'; '.join(ragged[:5])}{more}. Every row needs one value per column.")
    if not rows:
        raise forms.ValidationError("The file names its columns but has no rows of values.")
    return columns, rows


def _check_columns(columns: list[str]) -> None:
    errors, seen = [], set()
    if len(columns) > MAX_DATA_SET_COLUMNS:
        raise forms.ValidationError(f"The file has {len(columns)} columns; at most {MAX_DATA_SET_COLUMNS} are allowed.")
    for number, name in enumerate(columns, start=1):
        if not name:
            errors.append(f"column {number} has no name")
        elif not IDENTIFIER.match(name):
            errors.append(f"column {number} “{name}” is not a valid name ({NOT_AN_IDENTIFIER})")
        elif name in seen:
            errors.append(f"column “{name}” appears twice")
        seen.add(name)
    if errors:
        raise forms.ValidationError(
            [f"The first row names the columns, as in {{{{username}}}}: {errors[0]}", *errors[1:]]
        )


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
        if messages := rules.name_taken(
            model, project=self.project, name=name, exclude_pk=self.instance.pk, message=self.name_taken
        ):
            raise forms.ValidationError(messages)
        return name


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
        values = {
            k: data[k]
            for k in (
                "name",
                "base_url",
                "config_url",
                "description",
                "metrics_interval_s",
                "prometheus_url",
                "generator_pool",
                "trace_url_template",
                "otlp_endpoint",
            )
        }
        values["protocol"] = data["protocol"]
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
    from .services import ServerSpec

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


class TestCaseForm(ProjectScopedForm):
    __test__ = False  # not a pytest test class
    name_taken = "This project already has a test case called “{name}”."

    class Meta:
        model = TestCase
        fields = ["name", "description"]
        widgets = {"description": forms.Textarea(attrs={"rows": 3})}


class StepForm(forms.ModelForm):
    """A step of ``test_case``; its ``{{names}}`` must come from earlier steps or the data set."""

    headers_text = forms.CharField(
        label="Headers",
        required=False,
        strip=False,  # line numbers in messages count the blank lines too
        widget=forms.Textarea(attrs={"rows": 3, "placeholder": "Accept: text/html"}),
        help_text="One <code>Name: value</code> per line.",
    )
    extract_text = forms.CharField(
        label="Extractions",
        required=False,
        strip=False,  # line numbers in messages count the blank lines too
        widget=forms.Textarea(
            attrs={"rows": 3, "placeholder": "csrf = form_field: csrfmiddlewaretoken\nid = json: $.items[0].id"}
        ),
        help_text="Values from this page's response for later steps, one <code>name = source: expression</code> "
        "per line. Sources: <code>regex</code> (the first group), <code>json</code> (a path such as "
        "<code>$.items[0].id</code>), <code>form_field</code> (an input's name), <code>header</code>. "
        "Later steps use the value as <code>{{name}}</code>.",
    )
    resources_text = forms.CharField(
        label="Resources",
        required=False,
        strip=False,  # line numbers in messages count the blank lines too
        widget=forms.Textarea(attrs={"rows": 3, "placeholder": "/static/site.css\n/img/logo.png"}),
        help_text="Fetched in parallel after the page, as a browser does: one path per line, starting with /.",
    )

    ws_actions_text = forms.CharField(
        label="Session actions",
        required=False,
        strip=False,  # messages keep their own spaces
        widget=forms.Textarea(
            attrs={
                "rows": 6,
                "class": "mono",
                "placeholder": 'send {"text": "hello {{name}}"}\nexpect contains hello\n  timeout 2\n'
                "expect json $.id\n  extract id = json: $.id\nwait 0.5\nsend bye {{id}}",
            }
        ),
        help_text="One action per line, in order: <code>send &lt;message&gt;</code>, "
        "<code>expect contains &lt;text&gt;</code>, <code>expect regex &lt;pattern&gt;</code>, "
        "<code>expect json &lt;path&gt;</code> (or <code>expect json $.id == 7</code>), "
        "<code>wait &lt;seconds&gt;</code>. Under an expect: <code>timeout &lt;seconds&gt;</code> and "
        "<code>extract name = regex: …</code> or <code>= json: …</code>. A message with line breaks is written "
        'as a JSON string: <code>send "a\nb"</code>. Messages use <code>{{name}}</code> like a body.',
    )

    class Meta:
        model = Step
        fields = [
            "name",
            "kind",
            "method",
            "path",
            "headers_text",
            "body_type",
            "body",
            "think_time",
            "timeout",
            "expect_status",
            "max_duration_ms",
            "text_present",
            "text_absent",
            "extract_text",
            "resources_text",
            "stream_kind",
            "stream_idle_timeout",
            "stream_last_event_contains",
            "ws_actions_text",
            "ws_hold",
            "recorded_protocol",
        ]
        widgets = {
            "recorded_protocol": forms.HiddenInput(),
            "body": forms.Textarea(attrs={"rows": 3}),
            "path": forms.TextInput(attrs={"placeholder": "/search?q=report"}),
        }
        help_texts = {
            "body": "<code>{{name}}</code> is replaced by an extracted value or a data-set column: URL-encoded in a "
            'form body; in a JSON body, JSON-escaped inside a string (<code>{"user": "{{username}}"}</code>) '
            'and inserted as it is outside one (<code>{"id": {{id}}}</code>). A JSON body must be valid JSON '
            "once each <code>{{…}}</code> in a string is replaced by a dummy text; one with a placeholder outside "
            "a string is checked again when it is sent.",
        }

    def __init__(self, *args, test_case: TestCase, **kwargs):
        super().__init__(*args, **kwargs)
        self.test_case = test_case
        self.fields["headers_text"].initial = format_headers(self.instance.headers or {})
        self.fields["extract_text"].initial = format_extractions(self.instance.extract or [])
        self.fields["resources_text"].initial = "\n".join(self.instance.resources or [])
        self.fields["ws_actions_text"].initial = wsactions.format_actions(self.instance.ws_actions or [])
        # Left out (older clients, the API's plain steps): the step's own values, a plain request for a new one.
        for name in ("kind", "stream_kind", "stream_idle_timeout", "ws_hold"):
            self.fields[name].required = False
        self.fields["path"].help_text = (
            "Relative to the environment's base URL, starting with /. A WebSocket session may name its own "
            "origin: ws://… or wss://… (checked against the allowed targets)"
        )
        for name in ("think_time", "timeout", "stream_idle_timeout", "ws_hold"):
            self.fields[name].widget.attrs["step"] = "any"
        self.fields["method"].choices = [(m, m) for m in Step.Method.values]
        # Several step forms can be on one page at once (one being edited, one being added).
        self.auto_id = f"id_step_{self.instance.code if self.instance.pk else 'new'}_%s"

    def clean_kind(self):
        return self.cleaned_data.get("kind") or self.instance.kind or Step.Kind.REQUEST

    def clean_stream_kind(self):
        return self.cleaned_data.get("stream_kind") or self.instance.stream_kind

    def clean_stream_idle_timeout(self):
        value = self.cleaned_data.get("stream_idle_timeout")
        return value if value is not None else self.instance.stream_idle_timeout

    def clean_ws_hold(self):
        value = self.cleaned_data.get("ws_hold")
        return value if value is not None else self.instance.ws_hold

    def clean_path(self):
        path = self.cleaned_data["path"].strip()
        if path[:5].lower() == "ws://" or path[:6].lower() == "wss://":
            return self._ws_url(path)
        if not path.startswith("/"):
            raise forms.ValidationError("Start the path with /, it is relative to the environment's base URL")
        return path

    def _ws_url(self, url: str) -> str:
        """An absolute ws:// or wss:// URL: parsed strictly, its host never a placeholder, and allowed now."""
        if self.cleaned_data.get("kind") != Step.Kind.WEBSOCKET:
            raise forms.ValidationError(
                "Only a WebSocket session can name a ws:// or wss:// URL; start the path with /"
            )
        origin_end = url.find("/", url.find("//") + 2)
        if "{{" in (url if origin_end < 0 else url[:origin_end]):
            raise forms.ValidationError(
                "The host of a ws:// or wss:// URL cannot be a {{variable}}: it is checked before the run"
            )
        from workers.engine.targets import BadTargetURL, parse_target_url

        try:
            parse_target_url(variables.PLACEHOLDER.sub("x", url), websocket=True)
        except BadTargetURL as exc:
            raise forms.ValidationError(str(exc)) from None
        if refusal := services.allowed_target(variables.PLACEHOLDER.sub("x", url)):
            raise forms.ValidationError(f"This WebSocket URL is {refusal}: a run would be refused.")
        return url

    def clean_ws_actions_text(self):
        try:
            return wsactions.parse_actions(self.cleaned_data["ws_actions_text"])
        except wsactions.ActionsError as exc:
            raise forms.ValidationError(exc.errors) from None

    def clean_headers_text(self):
        return parse_headers(self.cleaned_data["headers_text"])

    def clean_extract_text(self):
        return parse_extractions(self.cleaned_data["extract_text"])

    def clean_resources_text(self):
        return parse_resources(self.cleaned_data["resources_text"])

    def available_variables(self) -> set[str]:
        """The data set's columns and what the steps before this one extract."""
        steps = list(self.test_case.steps.all())
        if self.instance.pk:
            steps = steps[: next(i for i, s in enumerate(steps) if s.pk == self.instance.pk)]
        return self.test_case.variables_before([*steps, self.instance])[-1]

    def clean(self):
        cleaned = super().clean()
        # Taken before any add_error(), which removes the field from cleaned_data.
        texts = {
            "path": [cleaned["path"]] if "path" in cleaned else [],
            "headers_text": list(cleaned.get("headers_text", {}).values()),
            "body": [cleaned["body"]] if "body" in cleaned else [],
        }
        json_body = cleaned.get("body") if cleaned.get("body_type") == Step.BodyType.JSON else None
        if json_body and (message := _json_body_error(json_body)):
            self.add_error("body", message)
        available = self.available_variables()
        own = {item["name"] for item in cleaned.get("extract_text") or []}
        for field, values in texts.items():
            for message in _placeholder_errors(values, available, own):
                self.add_error(field, message)
        if cleaned.get("kind") == Step.Kind.WEBSOCKET:
            self._clean_websocket(cleaned, available)
        return cleaned

    def _clean_websocket(self, cleaned: dict, available: set[str]) -> None:
        """A session: a GET upgrade with its actions; what only a request has is refused, each field by name."""
        if cleaned.get("method", "GET") != "GET":
            self.add_error("method", "A WebSocket session opens with GET (the upgrade); choose GET")
        for field, what in (
            ("body", "a body"),
            ("resources_text", "resources"),
            ("extract_text", "extractions from a response (extract from messages under an expect action)"),
            ("text_present", "a text check (use an expect action)"),
            ("text_absent", "a text check"),
        ):
            if cleaned.get(field):
                self.add_error(field, f"A WebSocket session has no {what}; leave it empty")
        actions = cleaned.get("ws_actions_text")
        if actions is None:
            return
        if not actions and not cleaned.get("ws_hold"):
            self.add_error("ws_actions_text", "Give the session at least one action (or a time to hold it open)")
        own: set[str] = set()
        for index, action in enumerate(actions, start=1):
            if "send" in action:
                for name in variables.placeholders(action["send"]):
                    if name not in available and name not in own:
                        self.add_error(
                            "ws_actions_text",
                            f"action {index} (send): {{{{{name}}}}} is not extracted by an earlier step or action "
                            "nor a column of the data set",
                        )
            own |= {item["name"] for item in action.get("extract") or []}

    def save(self, commit=True):
        self.instance.headers = self.cleaned_data["headers_text"]
        self.instance.extract = self.cleaned_data["extract_text"]
        self.instance.resources = self.cleaned_data["resources_text"]
        self.instance.ws_actions = self.cleaned_data["ws_actions_text"]
        return super().save(commit=commit)


def _placeholder_errors(texts: list[str], available: set[str], own: set[str]) -> list[str]:
    errors = []
    for text in texts:
        for name in variables.placeholders(text):
            if name in available:
                continue
            if name in own:
                errors.append(
                    f"{{{{{name}}}}} is extracted by this step itself, from its response: only later steps can use it"
                )
            else:
                errors.append(f"{{{{{name}}}}} is not extracted by an earlier step nor a column of the data set")
    return list(dict.fromkeys(errors))


def _json_body_error(body: str) -> str | None:
    """The engine's check: valid JSON with each ``{{…}}`` inside a string replaced by a dummy text."""
    problem = variables.json_body_problem(body)
    if problem:
        return f"Not valid JSON once each {{{{…}}}} is replaced by a dummy text: {problem}"
    return None


class DataSetUploadForm(forms.Form):
    """A CSV file for a test case's data set (new or replacing the old one) and how rows are taken."""

    file = forms.FileField(
        label="CSV file",
        help_text=f"UTF-8, comma-separated, the first row naming the columns (letters, digits and _); "
        f"at most {MAX_DATA_SET_BYTES // 1024 // 1024} MB and {MAX_DATA_SET_ROWS:,} rows.",
        widget=forms.ClearableFileInput(attrs={"accept": ".csv,text/csv"}),
        error_messages={"empty": "The file is empty: its first row names the columns, e.g. username,password"},
    )
    mode = forms.ChoiceField(
        label="Rows are taken",
        choices=DataSet.Mode.choices,
        initial=DataSet.Mode.SEQUENTIAL,
        help_text="Sequential: user k starts at row k and walks the rows, wrapping around. Random: any row, each "
        "iteration. Unique: every row at most once in the whole run; when none is left, iterations are dropped.",
    )

    def clean_file(self):
        upload = self.cleaned_data["file"]
        self.cleaned_data["columns"], self.cleaned_data["rows"] = parse_data_set(upload)
        return upload


class DataSetModeForm(forms.ModelForm):
    class Meta:
        model = DataSet
        fields = ["mode"]
        labels = {"mode": "Rows are taken"}


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
        fields = [
            "name",
            "description",
            "environment",
            "profile_kind",
            *Plan.PROFILE_INPUTS,
            "think_time_mode",
            "request_timeout",
            "protocol",
            "tls_accept_any",
            "trace_context",
            "trace_sample_rate",
            "threshold_apd_ms",
            "threshold_p95_ms",
            "threshold_error_rate_pct",
            "threshold_min_pages_per_s",
            "threshold_ttfe_p95_ms",
            "threshold_gap_p95_ms",
            "threshold_rtt_p95_ms",
            "threshold_min_h2_share_pct",
            "capacity_search",
            *DEGRADATION_INPUTS,
            "stop_criteria",
        ]
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
        from .services import PLAN_VALUES, LevelSpec

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


class HarUploadForm(forms.Form):
    """A HAR recording to import as a test case; nothing is saved before its preview is confirmed."""

    file = forms.FileField(
        label="HAR file",
        help_text=f"A HAR 1.2 recording: the browser's “Save all as HAR” (Chromium, Firefox), Playwright's "
        f"record_har_path, k6 Studio. At most {settings.PLIMSOLL_HAR_MAX_MB} MB.",
        widget=forms.ClearableFileInput(attrs={"accept": ".har,application/json"}),
        error_messages={"empty": "The file is empty. Save the recording with your browser's “Save all as HAR”."},
    )

    def clean_file(self):
        upload = self.cleaned_data["file"]
        too_large = services.har_too_large(upload.size)
        if too_large:  # before reading it
            raise forms.ValidationError(too_large)
        return upload


def har_choices(data) -> har.Choices:
    """The preview's choices from its posted form: unchecked boxes are not posted, so absent means no."""
    return har.Choices(
        rejected={
            key[len("correlation:") :] for key in data if key.startswith("correlation:") and data[key] == "reject"
        },
        keep_headers={key[len("keep_header:") :].lower() for key in data if key.startswith("keep_header:")},
        keep_fields={key[len("keep_field:") :] for key in data if key.startswith("keep_field:")},
        vary_fields={key[len("vary_field:") :] for key in data if key.startswith("vary_field:")},
        variables={key[len("variable:") :]: data[key] for key in data if key.startswith("variable:")},
    )
