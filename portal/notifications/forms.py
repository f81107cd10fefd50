from django import forms

from .models import Channel, Event


class ChannelForm(forms.Form):
    name = forms.CharField(max_length=100)
    kind = forms.ChoiceField(choices=Channel.Kind.choices)
    events = forms.MultipleChoiceField(
        choices=Event.choices, widget=forms.CheckboxSelectMultiple, help_text="What this channel hears about"
    )
    emails = forms.CharField(
        required=False, max_length=1000, label="E-mail addresses", help_text="E-mail: comma-separated"
    )
    url = forms.CharField(required=False, max_length=500, label="Webhook URL", help_text="Webhook: receives a POST")
    payload_format = forms.ChoiceField(choices=Channel.Format.choices, required=False, label="Webhook payload")


class ChannelEditForm(forms.Form):
    """Editing a channel: its kind stays; a webhook's secret is kept unless replaced."""

    name = forms.CharField(max_length=100)
    events = forms.MultipleChoiceField(
        choices=Event.choices, widget=forms.CheckboxSelectMultiple, help_text="What this channel hears about"
    )
    emails = forms.CharField(
        required=False, max_length=1000, label="E-mail addresses", help_text="E-mail: comma-separated"
    )
    url = forms.CharField(required=False, max_length=500, label="Webhook URL", help_text="Webhook: receives a POST")
    payload_format = forms.ChoiceField(choices=Channel.Format.choices, required=False, label="Webhook payload")
    enabled = forms.BooleanField(required=False, initial=True, help_text="Paused channels hear nothing")
    replace_secret = forms.BooleanField(
        required=False,
        label="Replace the signing secret",
        help_text="The current secret stops working at once; the new one is shown once",
    )

    def __init__(self, *args, channel: Channel, **kwargs):
        kwargs.setdefault(
            "initial",
            {
                "name": channel.name,
                "events": channel.events,
                "emails": channel.emails,
                "url": channel.url,
                "payload_format": channel.payload_format,
                "enabled": channel.enabled,
            },
        )
        super().__init__(*args, **kwargs)
        if channel.kind == Channel.Kind.EMAIL:
            for name in ("url", "payload_format", "replace_secret"):
                del self.fields[name]
        else:
            del self.fields["emails"]
