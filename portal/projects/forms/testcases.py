"""A test case and its steps (headers, body, extractions, resources, WebSocket actions, placeholders checked)."""

from django import forms

from workers.engine import variables

from .. import services, wsactions
from ..models import Step, TestCase
from .projects import ProjectScopedForm
from .text import format_extractions, format_headers, parse_extractions, parse_headers, parse_resources


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
