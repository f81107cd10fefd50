from django import forms

from .models import Channel, Event

GRAFANA_TOKEN_HELP = (
    "Grafana: a service account token (role Editor, or annotations:write); stored encrypted, never shown"
)


class GrafanaFields(forms.Form):
    token = forms.CharField(
        required=False,
        max_length=500,
        label="Grafana token",
        widget=forms.PasswordInput(render_value=False),
        help_text=GRAFANA_TOKEN_HELP,
    )
    dashboard_uid = forms.CharField(
        required=False,
        max_length=40,
        label="Dashboard UID",
        help_text="Grafana, optional: the dashboard's UID (after /d/ in its address); empty: the organization's",
    )
    panel_id = forms.IntegerField(
        required=False, min_value=1, max_value=2**31 - 1, label="Panel id", help_text="Grafana, optional: one panel"
    )


class ChannelForm(GrafanaFields):
    name = forms.CharField(max_length=100)
    kind = forms.ChoiceField(choices=Channel.Kind.choices)
    events = forms.MultipleChoiceField(
        choices=Event.choices, widget=forms.CheckboxSelectMultiple, help_text="What this channel hears about"
    )
    emails = forms.CharField(
        required=False, max_length=1000, label="E-mail addresses", help_text="E-mail: comma-separated"
    )
    url = forms.CharField(
        required=False,
        max_length=500,
        label="URL",
        help_text="Webhook: receives a POST. Grafana: its base address (annotations go to /api/annotations)",
    )
    payload_format = forms.ChoiceField(choices=Channel.Format.choices, required=False, label="Webhook payload")
    field_order = ["name", "kind", "events", "emails", "url", "payload_format", "token", "dashboard_uid", "panel_id"]


class ChannelEditForm(GrafanaFields):
    """Editing a channel: its kind stays; a webhook's secret is kept unless replaced."""

    name = forms.CharField(max_length=100)
    events = forms.MultipleChoiceField(
        choices=Event.choices, widget=forms.CheckboxSelectMultiple, help_text="What this channel hears about"
    )
    emails = forms.CharField(
        required=False, max_length=1000, label="E-mail addresses", help_text="E-mail: comma-separated"
    )
    url = forms.CharField(required=False, max_length=500, label="URL", help_text="Webhook: receives a POST")
    payload_format = forms.ChoiceField(choices=Channel.Format.choices, required=False, label="Webhook payload")
    enabled = forms.BooleanField(required=False, initial=True, help_text="Paused channels hear nothing")
    replace_secret = forms.BooleanField(
        required=False,
        label="Replace the signing secret",
        help_text="The current secret stops working at once; the new one is shown once",
    )
    field_order = [*ChannelForm.field_order, "enabled", "replace_secret"]

    def __init__(self, *args, channel: Channel, **kwargs):
        kwargs.setdefault(
            "initial",
            {
                "name": channel.name,
                "events": channel.events,
                "emails": channel.emails,
                "url": channel.url,
                "payload_format": channel.payload_format,
                "dashboard_uid": channel.dashboard_uid,
                "panel_id": channel.panel_id,
                "enabled": channel.enabled,
            },
        )
        super().__init__(*args, **kwargs)
        drop = {
            Channel.Kind.EMAIL: ("url", "payload_format", "replace_secret", "token", "dashboard_uid", "panel_id"),
            Channel.Kind.WEBHOOK: ("emails", "token", "dashboard_uid", "panel_id"),
            Channel.Kind.GRAFANA: ("emails", "payload_format"),
        }[channel.kind]
        for name in drop:
            del self.fields[name]
        if channel.kind == Channel.Kind.GRAFANA:
            self.fields["token"].help_text = "A new service account token; empty keeps the stored one"
            self.fields["url"].help_text = "Grafana's base address (annotations go to /api/annotations)"
