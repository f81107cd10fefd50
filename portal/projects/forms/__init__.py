"""Forms of the projects pages, one module per concern: ``text`` (the line-per-item text fields parsed
and written back), ``projects`` (a project, and ``ProjectScopedForm``, the base of what lives in one),
``environments`` (with their servers), ``testcases`` (with their steps), ``datasets``, ``plans`` (the
load profile, levels and mix) and ``imports`` (a HAR upload and its preview's choices). Every name is
re-exported here: import them from ``portal.projects.forms``.

ModelForms validate a UniqueConstraint only when every field in it is on the form, and
``project`` (or ``team``) never is, so each form checks its name itself and says why.
"""

from .datasets import (
    MAX_DATA_SET_BYTES,
    MAX_DATA_SET_COLUMNS,
    MAX_DATA_SET_ROWS,
    DataSetModeForm,
    DataSetUploadForm,
    parse_data_set,
)
from .environments import EnvironmentForm, ServerForm, ServerFormSet, server_specs
from .imports import HarUploadForm, har_choices
from .plans import (
    DEGRADATION_INPUTS,
    MAX_LEVELS,
    THRESHOLD_MAXIMA,
    BaseLevelFormSet,
    LevelForm,
    LevelFormSet,
    MixAddForm,
    MixWeightForm,
    PlanForm,
)
from .projects import ProjectForm, ProjectScopedForm
from .testcases import StepForm, TestCaseForm
from .text import (
    HEADER_NAME,
    IDENTIFIER,
    MAX_EXTRACTIONS,
    MAX_RESOURCES,
    NOT_AN_IDENTIFIER,
    format_configuration,
    format_extractions,
    format_headers,
    parse_configuration,
    parse_extractions,
    parse_headers,
    parse_resources,
)

__all__ = [
    "DEGRADATION_INPUTS",
    "HEADER_NAME",
    "IDENTIFIER",
    "MAX_DATA_SET_BYTES",
    "MAX_DATA_SET_COLUMNS",
    "MAX_DATA_SET_ROWS",
    "MAX_EXTRACTIONS",
    "MAX_LEVELS",
    "MAX_RESOURCES",
    "NOT_AN_IDENTIFIER",
    "THRESHOLD_MAXIMA",
    "BaseLevelFormSet",
    "DataSetModeForm",
    "DataSetUploadForm",
    "EnvironmentForm",
    "HarUploadForm",
    "LevelForm",
    "LevelFormSet",
    "MixAddForm",
    "MixWeightForm",
    "PlanForm",
    "ProjectForm",
    "ProjectScopedForm",
    "ServerForm",
    "ServerFormSet",
    "StepForm",
    "TestCaseForm",
    "format_configuration",
    "format_extractions",
    "format_headers",
    "har_choices",
    "parse_configuration",
    "parse_data_set",
    "parse_extractions",
    "parse_headers",
    "parse_resources",
    "server_specs",
]
