"""A HAR 1.2 recording into the steps of a test case: plain functions, no Django.

``load(raw)`` checks that the bytes are a HAR worth importing and returns its entries;
``analyze(entries, allowed=..., choices=...)`` turns them into a ``Preview``: the pages
found (each top-level document a step, its sub-requests the step's resources), think
times from the gaps, the hosts kept or dropped with the reason, every header kept or
dropped with the rule that decided it, and the **correlations**: values a response set
(a hidden input such as a CSRF token, a JSON id, a ``Location``, a token in a link)
that a later request sends back, proposed as extractions with the later uses replaced
by ``{{variable}}``. The user's choices (``Choices``) reject correlations, keep a secret
header or a recorded password, and the preview is computed again from the file.

Nothing here stores anything; the portal's service saves the steps of an accepted preview.

The package, in the order a recording goes through it: ``model`` (the dataclasses, ``HarError``),
``load`` (reading the file, its limits), ``analysis`` (hosts, pages, the preview), ``steps`` (a page
into a step, the secret fields), ``websocket`` (a session's frames into actions), ``headers`` (header
rules and bodies), ``correlation`` (values a response sets and a later request sends back). Callers
use the names re-exported here (``har.load``, ``har.analyze``, ``har.Choices`` …): tests replace
``har.analyze`` on this package, so call it through the package, not from its module.
"""

from .analysis import MAX_STEPS, METHODS, NOISE_HOSTS, analyze, classify_hosts, group_pages
from .correlation import MAX_JSON_LEAVES, TOKEN_LIKE, correlate
from .headers import (
    BROWSER_HEADERS,
    CONDITIONAL_HEADERS,
    ENGINE_HEADERS,
    ORIGIN_HEADERS,
    RULE_BODY_TYPE,
    RULE_BROWSER,
    RULE_CONDITIONAL,
    RULE_ENCODING,
    RULE_ENGINE,
    RULE_KEPT,
    RULE_KEPT_SECRET,
    RULE_ORIGIN,
    RULE_PSEUDO,
    RULE_SECRET,
    SECRET_HEADERS,
    header_rules,
)
from .load import (
    MAX_BODY_CHARS,
    MAX_HAR_BYTES,
    MAX_JSON_VALUES,
    MAX_RESPONSE_CHARS,
    TEXT_TYPES,
    _json_values,  # the tests count a file's JSON values with it
    load,
)
from .model import (
    MAX_PATH,
    MAX_THINK_TIME,
    Choices,
    Correlation,
    Entry,
    HarError,
    HeaderRule,
    HostInfo,
    Preview,
    PreviewStep,
    SecretField,
    WsMessage,
)
from .steps import PASSWORD_LIKE, USER_LIKE, _step  # _step: the tests build one page's step with it
from .websocket import MAX_WS_TEXT, WS_MIN_WAIT

__all__ = [
    "BROWSER_HEADERS",
    "CONDITIONAL_HEADERS",
    "ENGINE_HEADERS",
    "MAX_BODY_CHARS",
    "MAX_HAR_BYTES",
    "MAX_JSON_LEAVES",
    "MAX_JSON_VALUES",
    "MAX_PATH",
    "MAX_RESPONSE_CHARS",
    "MAX_STEPS",
    "MAX_THINK_TIME",
    "MAX_WS_TEXT",
    "METHODS",
    "NOISE_HOSTS",
    "ORIGIN_HEADERS",
    "PASSWORD_LIKE",
    "RULE_BODY_TYPE",
    "RULE_BROWSER",
    "RULE_CONDITIONAL",
    "RULE_ENCODING",
    "RULE_ENGINE",
    "RULE_KEPT",
    "RULE_KEPT_SECRET",
    "RULE_ORIGIN",
    "RULE_PSEUDO",
    "RULE_SECRET",
    "SECRET_HEADERS",
    "TEXT_TYPES",
    "TOKEN_LIKE",
    "USER_LIKE",
    "WS_MIN_WAIT",
    "Choices",
    "Correlation",
    "Entry",
    "HarError",
    "HeaderRule",
    "HostInfo",
    "Preview",
    "PreviewStep",
    "SecretField",
    "WsMessage",
    "_json_values",
    "_step",
    "analyze",
    "classify_hosts",
    "correlate",
    "group_pages",
    "header_rules",
    "load",
]
