"""Run labels (issue 24): what a CI job says about the run it starts (build, commit, branch), and a note."""

import re

from django.db import transaction

from portal.common import Invalid

from ..models import Run

MAX_LABELS = 20
MAX_VALUE = 100
MAX_NOTE = 2000
# A key is a short identifier, so it reads the same in a URL filter (?label=build:3f2a1c) and in JSON.
KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$")
CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _value_problem(value) -> str:
    if not isinstance(value, str):
        return "must be text"
    if len(value) > MAX_VALUE:
        return f"is {len(value)} characters long; at most {MAX_VALUE}"
    if CONTROL.search(value):
        return "has a control character"
    return ""


def labels_clean(labels, note: str = "") -> tuple[dict[str, str], str]:
    """The labels and note as stored, or Invalid naming every problem (nothing is stored then)."""
    errors = {}
    if labels is None:
        labels = {}
    if not isinstance(labels, dict):
        errors["labels"] = ['An object of names to values, e.g. {"build": "3f2a1c"}.']
    else:
        problems = []
        if len(labels) > MAX_LABELS:
            problems.append(f"At most {MAX_LABELS} labels, not {len(labels)}.")
        for key, value in labels.items():
            if not KEY.match(str(key)):
                problems.append(
                    f"“{str(key)[:50]}” is not a label name: letters, digits, “_”, “.” and “-”, at most 40 characters."
                )
            elif why := _value_problem(value):
                problems.append(f"The label “{key}” {why}.")
        if problems:
            errors["labels"] = problems
    note = note or ""
    if not isinstance(note, str) or len(note) > MAX_NOTE:
        errors["note"] = [f"Text of at most {MAX_NOTE} characters."]
    if errors:
        raise Invalid(errors)
    return {str(k): v for k, v in labels.items()}, note


def label_filter_clean(text: str) -> tuple[str, str]:
    """``build:3f2a1c`` → ("build", "3f2a1c"), or Invalid: a filter the API cannot answer truthfully."""
    key, sep, value = (text or "").partition(":")
    if not sep or not KEY.match(key):
        raise Invalid({"label": [f"“{text[:60]}” is not a label filter: write name:value, e.g. build:3f2a1c."]})
    if why := _value_problem(value):
        raise Invalid({"label": [f"The value of the filter {why}."]})
    return key, value


def run_label(*, run: Run, labels: dict, note: str = "") -> Run:
    """Stores a run's labels and note (already cleaned with ``labels_clean``)."""
    with transaction.atomic():
        Run.objects.filter(id=run.id).update(labels=labels, note=note)
    run.labels, run.note = labels, note
    return run
