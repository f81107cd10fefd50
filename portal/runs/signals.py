"""Signals of the run lifecycle, so that other apps follow runs without the runs app knowing them."""

from django.dispatch import Signal

# Sent once a run has reached a final status (passed, failed, cancelled, partial, error),
# after the transaction that set it commits. Arguments: run_id.
run_finished = Signal()
