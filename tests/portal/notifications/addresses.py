"""Test helpers for e-mail channels' confirmed addresses."""


def confirm_addresses(team, *emails):
    """Marks ``emails`` confirmed for ``team``, as their owners' clicks on the confirmation links would."""
    from django.utils import timezone

    from portal.notifications.models import MailAddress

    for email in emails:
        MailAddress.objects.update_or_create(team=team, email=email.lower(), defaults={"confirmed_at": timezone.now()})
