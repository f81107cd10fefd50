"""One scrape of one server: through the portal's one outbound-request helper, never around it.

``portal.outbound`` parses the URL strictly, checks the resolved address against the
target allowlist and connects only to that address, with a hard timeout and a size cap;
this module only turns its answer into a counter set's raw values or a gap's reason.
"""

from __future__ import annotations

import time

from .countersets import COUNTER_SETS
from .exposition import ExpositionError, extract

# An exporter answers in milliseconds; one that needs longer is recorded as a gap rather
# than allowed to hold up the next scrape round.
SCRAPE_TIMEOUT_S = 2.0
MAX_BYTES = 4_000_000  # windows_exporter with every collector answers about 300 kB


def check_metrics_url(url: str) -> str:
    """The URL as it will be scraped; raises ValueError with a message for the form."""
    from portal.outbound import OutboundRefused, check

    try:
        check(url)
    except OutboundRefused as exc:
        raise ValueError(str(exc)) from None
    return url


def scrape(url: str, counter_set_key: str, *, timeout: float) -> tuple[float, list | None, str]:
    """(wall-clock mid-point of the exchange, raw values, "") or (…, None, the gap's reason)."""
    from portal.outbound import OutboundFailed, OutboundRefused, request

    started = time.time()  # wall clock: a run's seconds count from its start_at
    try:
        response = request("GET", url, timeout=timeout, max_bytes=MAX_BYTES, headers={"Accept": "text/plain"})
    except (OutboundRefused, OutboundFailed) as exc:
        return started, None, str(exc)[:300]
    mid = started + response.elapsed_s / 2
    if response.status != 200:
        return mid, None, f"HTTP {response.status} from the metrics endpoint"
    try:
        text = response.body.decode("utf-8")
        return mid, extract(text, COUNTER_SETS[counter_set_key]), ""
    except UnicodeDecodeError:
        return mid, None, "the answer is not UTF-8 text"
    except ExpositionError as exc:
        return mid, None, str(exc)[:300]
