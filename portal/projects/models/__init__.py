"""The projects app's models, one module per concern; every name stays importable from here.

- ``environments``: projects, environments (the systems under test) and their servers;
- ``test_cases``: test cases, their steps and data sets, and the HAR imports that make them;
- ``plans``: plans, their levels (a steps profile) and their mix of test cases.
"""

from .environments import (
    PROTOCOL_CHOICES,
    TRACE_ID_PLACEHOLDER,
    Environment,
    Project,
    Server,
    trace_url,
    validate_otlp_endpoint,
    validate_trace_url_template,
)
from .plans import PROTOCOL_THRESHOLD_KEYS, MixEntry, Plan, PlanLevel
from .test_cases import PLACEHOLDER, DataSet, HarImport, Step, TestCase

__all__ = [
    "PLACEHOLDER",
    "PROTOCOL_CHOICES",
    "PROTOCOL_THRESHOLD_KEYS",
    "TRACE_ID_PLACEHOLDER",
    "DataSet",
    "Environment",
    "HarImport",
    "MixEntry",
    "Plan",
    "PlanLevel",
    "Project",
    "Server",
    "Step",
    "TestCase",
    "trace_url",
    "validate_otlp_endpoint",
    "validate_trace_url_template",
]
