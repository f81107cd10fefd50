"""The runs app's write side, one module per concern; import the service you need from here.

- ``targets``: the allowlist and one run per environment and per target;
- ``lifecycle``: create, start, cancel, finalize (and its retry) — status changes as guarded UPDATEs;
- ``shards``: a shard's execution on a worker, its release and continuation (handoffs);
- ``sink``: the interval writer, the only code that writes ``ShardInterval``/``PageInterval``;
- ``rollup``: per-second label rows of finished runs merged into coarser spans;
- ``watchdog``: silence, lost shards, stuck runs, and the periodic catch-up;
- ``admission``: generator slots, the workers' registry, the fair queue of waiting runs, team limits;
- ``load``: planned against achieved load, and the rule that makes a run incomplete;
- ``imports``: result files of other tools (k6, JMeter, Locust, Gatling) as runs;
- ``labels``: what a run's starter says about it (build, commit, branch) and a note;
- ``criteria``: stop criteria, a running run that stops itself when its target is plainly broken.
"""

from ..results.rollup import rollup_due, run_figures_store, run_rollup
from ..results.sink import ShardSink, interval_write
from .admission import admit, admit_soon, pool_overview, run_queue, worker_gone, worker_heartbeat
from .criteria import criteria_check, criteria_state
from .imports import result_import_create, result_import_process, result_imports_sweep, result_upload_path, run_import
from .labels import label_filter_clean, labels_clean, run_label
from .lifecycle import (
    ENQUEUE_RETRY,
    QUEUED_TIMEOUT,
    finalize_retry,
    finalize_stuck,
    run_cancel,
    run_create,
    run_finalize,
    run_start,
    token_label,
)
from .shards import shard_execute, shards_hand_off
from .targets import (
    EnvironmentBusy,
    RunError,
    TargetBusy,
    active_run_on,
    active_run_on_target,
    allowlist,
    check_targets,
    target_refusal,
)
from .watchdog import watchdog

__all__ = [
    "criteria_check",
    "criteria_state",
    "label_filter_clean",
    "labels_clean",
    "run_label",
    "admit",
    "admit_soon",
    "pool_overview",
    "run_queue",
    "worker_gone",
    "worker_heartbeat",
    "ENQUEUE_RETRY",
    "QUEUED_TIMEOUT",
    "EnvironmentBusy",
    "RunError",
    "ShardSink",
    "TargetBusy",
    "active_run_on",
    "active_run_on_target",
    "allowlist",
    "finalize_retry",
    "finalize_stuck",
    "interval_write",
    "result_import_create",
    "result_import_process",
    "result_imports_sweep",
    "result_upload_path",
    "rollup_due",
    "run_cancel",
    "run_create",
    "run_figures_store",
    "run_finalize",
    "run_import",
    "run_rollup",
    "run_start",
    "shard_execute",
    "shards_hand_off",
    "target_refusal",
    "check_targets",
    "token_label",
    "watchdog",
]
