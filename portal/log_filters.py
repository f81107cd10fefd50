"""Filters for the portal's logs (settings.LOGGING)."""

import logging


class ForbiddenWithoutTraceback(logging.Filter):
    """A refused request (403) is one line, not a PermissionDenied traceback.

    Django's ``django.request`` logger attaches the exception to every 4xx it turns into a response,
    so each viewer who opens an edit form logged ~20 lines of a stack that says nothing new: the
    refusal is the view working as intended. The line keeps the method-less path and the status.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "status_code", None) == 403:
            record.exc_info = None
            record.exc_text = None
        return True
