"""Plimsoll's load engine: a plain asyncio library (no Django, no Celery).

The Celery task is a thin adapter around ``run``/``run_sync`` with a database
sink; tests, benchmarks and ``python -m workers.engine`` drive it directly.
"""

from .histogram import Histogram
from .plan import Plan, PlanError
from .runner import RunTotals, run, run_sync
from .targets import DEFAULT_ALLOWLIST, TargetNotAllowed, check_url, parse_allowlist

__all__ = [
    "DEFAULT_ALLOWLIST",
    "Histogram",
    "Plan",
    "PlanError",
    "RunTotals",
    "TargetNotAllowed",
    "check_url",
    "parse_allowlist",
    "run",
    "run_sync",
]
