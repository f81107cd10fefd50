"""Placeholder: being written (issue 4)."""

from django.http import Http404


def trialset_new(request, code):
    raise Http404


def trialset_detail(request, code):
    raise Http404


def trialset_stop(request, code):
    raise Http404


def experiment_list(request, code):
    raise Http404


def experiment_new(request, code):
    raise Http404


def experiment_detail(request, code):
    raise Http404


def experiment_start(request, code):
    raise Http404


def experiment_confirm(request, code):
    raise Http404


def experiment_stop(request, code):
    raise Http404
