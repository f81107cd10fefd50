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
