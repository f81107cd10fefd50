"""Placeholder: being written (issue 4)."""

from django.http import Http404


def compare(request, code):
    raise Http404
