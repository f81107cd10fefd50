"""Placeholder: being written (issue 4)."""

from django.http import Http404


def change_new(request, code):
    raise Http404


def change_detail(request, code):
    raise Http404


def change_apply(request, code):
    raise Http404


def measurement_new(request, code):
    raise Http404


def measurement_delete(request, code):
    raise Http404


def run_include(request, code):
    raise Http404
