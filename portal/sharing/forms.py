from django import forms

from .services import DEFAULT_DAYS, MAX_DAYS, MIN_DAYS

EXPIRY_CHOICES = [(1, "1 day"), (7, "7 days"), (30, "30 days"), (90, "90 days"), (365, "1 year")]


class ShareForm(forms.Form):
    days = forms.TypedChoiceField(
        label="Expires after",
        choices=EXPIRY_CHOICES,
        coerce=int,
        initial=DEFAULT_DAYS,
        help_text=f"From {MIN_DAYS} day to {MAX_DAYS} days; you can revoke it at any time.",
    )
    note = forms.CharField(
        max_length=200,
        required=False,
        label="Note (optional)",
        widget=forms.TextInput(attrs={"placeholder": "for the steering committee"}),
    )
