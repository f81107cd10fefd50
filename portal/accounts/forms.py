from django import forms
from django.contrib.auth import get_user_model

from .models import Membership


class MemberAddForm(forms.Form):
    username = forms.CharField(max_length=150)
    role = forms.ChoiceField(choices=Membership.Role.choices, initial=Membership.Role.EDITOR)

    def __init__(self, *args, team, **kwargs):
        super().__init__(*args, **kwargs)
        self.team = team

    def clean_username(self):
        username = self.cleaned_data["username"].strip()
        try:
            user = get_user_model().objects.get(username=username)
        except get_user_model().DoesNotExist:
            raise forms.ValidationError(f"There is no user called “{username}”.") from None
        if self.team.memberships.filter(user=user).exists():
            raise forms.ValidationError(f"{username} is already a member of this team.")
        self.cleaned_data["user"] = user
        return username


class RoleForm(forms.Form):
    role = forms.ChoiceField(choices=Membership.Role.choices)
