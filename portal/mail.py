"""E-mail through Django's mail framework, rendered from templates, sent by a Celery task.

A mail is three templates under ``templates/mail/``: ``<name>_subject.txt``, ``<name>.txt``
and ``<name>.html``; both bodies get the same context. Web requests never talk to a mail
server: ``mail_enqueue`` hands the mail to ``workers.tasks.send_mail_task`` once the
transaction commits (a rolled-back invitation sends nothing), and the task renders and sends
it. Where mail goes (var/mail/ or SMTP) is the settings' business (EMAIL_*).
"""

from dataclasses import dataclass

from django.conf import settings
from django.core.mail import EmailMultiAlternatives
from django.db import transaction
from django.template.loader import render_to_string

from portal.common import task


@dataclass(frozen=True)
class RenderedMail:
    subject: str
    text: str
    html: str


def mail_render(*, template: str, context: dict) -> RenderedMail:
    """The subject (one line), the plain-text body and the HTML body of mail ``template``."""
    context = {"site_url": settings.SITE_URL, **context}
    subject = " ".join(render_to_string(f"mail/{template}_subject.txt", context).split())
    return RenderedMail(
        subject=subject,
        text=render_to_string(f"mail/{template}.txt", context),
        html=render_to_string(f"mail/{template}.html", context),
    )


def mail_send(*, template: str, to: list[str], context: dict) -> None:
    """Renders and sends one mail now (the task calls this; so can a management command)."""
    mail = mail_render(template=template, context=context)
    message = EmailMultiAlternatives(mail.subject, mail.text, settings.DEFAULT_FROM_EMAIL, to)
    message.attach_alternative(mail.html, "text/html")
    message.send()


def mail_enqueue(*, template: str, to: list[str], context: dict) -> None:
    """Sends the mail from a worker once the current transaction commits.

    ``context`` crosses the broker, so it holds plain JSON values (strings, numbers),
    never model instances.
    """
    send_mail_task = task("send_mail_task")

    transaction.on_commit(lambda: send_mail_task.delay(template, list(to), context))
