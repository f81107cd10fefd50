"""The embedded default's mail backend: every mail a file of its own under var/mail/."""

import datetime
import os
import uuid

from django.core.mail.backends.filebased import EmailBackend


class OneFilePerMailBackend(EmailBackend):
    """Django's file backend names a file after the second and ``id(self)``, and appends.

    Two mails sent within one second by connections that happen to reuse the same memory
    address then land in one file. A random suffix keeps one file per connection, and
    ``mail_send`` opens one connection per mail, so each mail is a readable file.
    """

    def _get_filename(self):
        if self._fname is None:
            timestamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
            self._fname = os.path.join(self.file_path, f"{timestamp}-{uuid.uuid4().hex[:12]}.eml")
        return self._fname
