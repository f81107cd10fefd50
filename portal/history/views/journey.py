"""Placeholder: being written (issue 4)."""

from django.http import Http404


def environment_journey(request, code):
    raise Http404


def environment_journey_data(request, code):
    raise Http404


def project_journey(request, code):
    raise Http404


def project_journey_data(request, code):
    raise Http404
