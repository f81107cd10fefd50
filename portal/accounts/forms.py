from django import forms
from django.contrib.auth import get_user_model
from django.contrib.auth.forms import PasswordResetForm, UserCreationForm

from .models import ApiToken, Membership


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


# --------------------------------------------------------------------------------------
# Invitations, sign-up and password reset (issue 13)
# --------------------------------------------------------------------------------------


class InvitationForm(forms.Form):
    email = forms.EmailField(max_length=254)
    role = forms.ChoiceField(choices=Membership.Role.choices, initial=Membership.Role.EDITOR)


class SignUpForm(UserCreationForm):
    """A new account: username, e-mail (for password resets) and a password that passes the validators.

    The address is not checked for uniqueness: saying "this address has an account" would
    tell anyone which addresses have one, which the password-reset page is careful not to.
    """

    email = forms.EmailField(max_length=254, help_text="For password resets; never shown to other teams.")

    class Meta(UserCreationForm.Meta):
        model = get_user_model()
        fields = ("username", "email")


class InvitedSignUpForm(UserCreationForm):
    """A new account for an invitee: the e-mail address is the invitation's."""

    class Meta(UserCreationForm.Meta):
        model = get_user_model()
        fields = ("username",)

    def __init__(self, *args, email: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.instance.email = email


class MailingPasswordResetForm(PasswordResetForm):
    """Django's reset form, with the mail sent from a worker through portal.notifications."""

    def send_mail(self, subject_template_name, email_template_name, context, from_email, to_email, **kwargs):
        from django.conf import settings
        from django.urls import reverse

        from portal import limits
        from portal.mail import mail_enqueue

        # Issue 30: 20 of 20 reset mails to one address went out. Over the limit nothing is sent, and the page
        # says what it always says (it never tells whether an address has an account).
        allowed, _ = limits.take(
            f"password-reset:{to_email.strip().lower()}", settings.PLIMSOLL_RESET_MAILS_PER_ADDRESS_HOUR, 3600
        )
        if not allowed:
            return
        path = reverse("password_reset_confirm", kwargs={"uidb64": context["uid"], "token": context["token"]})
        mail_enqueue(
            template="password_reset",
            to=[to_email],
            context={"username": context["user"].get_username(), "url": settings.SITE_URL + path},
        )


class TokenForm(forms.Form):
    """A new API token; the rules (membership, scope within the role, expiry range) are services.token_create's."""

    name = forms.CharField(max_length=100, help_text="What uses it, e.g. “GitLab deploy pipeline”")
    team = forms.ModelChoiceField(queryset=None, empty_label=None)
    scope = forms.ChoiceField(choices=ApiToken.Scope.choices, initial=ApiToken.Scope.RUN)
    expires_days = forms.IntegerField(
        label="expires after (days)", required=False, initial=90, help_text="Empty: never expires"
    )

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["team"].queryset = user.teams.order_by("name")
