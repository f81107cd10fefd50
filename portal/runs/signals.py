"""Signals of the run lifecycle, so that other apps follow runs without the runs app knowing them."""

from django.dispatch import Signal

# Sent once a run has reached a final status (passed, failed, cancelled, partial, error),
# after the transaction that set it commits. Arguments: run_id.
run_finished = Signal()

# Sent once a run is admitted (its shards handed to the engine queue and its start time set), so that
# apps that collect beside the load (portal.metrics: the servers' figures) start with it. Arguments: run_id.
# Receivers must not raise: a failure is logged and the run goes on.
run_admitted = Signal()
