"""How Plimsoll writes a measured figure: one set of rules for every page, sentence and chart.

Durations, rates, sizes and percentages are written here and nowhere else: the template
filters (``portal/runs/templatetags/plimsoll.py``), the sentences of the analysis and the
comparison, and — through its twin ``static/js/format.js``, which follows the same rules
line by line — every chart's ticks and tooltips. ``tests/portal/test_formatting.py`` runs
one table of values through both and requires the same strings.

The rules:

* **durations** (given in ms): three significant digits, in ms below a second and in s from
  a second up (412 ms, 1 s, 1.5 s, 11.8 s, 1,234 s); 0 is "0 ms". A ``scale`` of "s" forces
  seconds, so that the figures of one row of a table read in one unit.
* **rates** (per second): whole numbers from 100 (1,234), one decimal from 10 (42.5), two
  below (4.25, 0.42).
* **percentages**: two decimals below 10 (0.12 %), one from 10 (12.5 %).
* **sizes** (bytes): B, KB, MB, GB, TB in powers of 1,024, three significant digits (512 B,
  1.5 KB, 12 MB).

Everywhere, trailing zeros after the point are dropped (1 s, not 1.00 s; 42 pages/s, not 42.0).
* **plain numbers** with a unit: whole numbers as they are (20 users, 1,234 rows), others with
  three significant digits (2.45 GB).
* **a server's figures** (``figure``) by their series' unit: rates and percentages by those
  rules, anything else as a plain number (4,707, 184).

Rounding is half away from zero on the exact binary value, which is what JavaScript's
``toFixed`` does; Python's own formatting rounds half to even, so it is not used for the
digits (0.125 would read 0.12 here and 0.13 in the browser).
"""

from __future__ import annotations

import math
from decimal import ROUND_HALF_UP, Decimal

MISSING = "—"
SIGNIFICANT = 3
SIZE_UNITS = ("B", "KB", "MB", "GB", "TB")


def _number(value) -> float | None:
    """The value as a finite float, or None when there is nothing to show (None, "", NaN, text)."""
    if value is None or value == "" or isinstance(value, bool):
        return None
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def fixed(value: float, decimals: int) -> str:
    """``value`` with ``decimals`` decimals and thousands separators, rounded half away from zero."""
    text = format(Decimal(abs(value)).quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_HALF_UP), "f")
    whole, _, fraction = text.partition(".")
    whole = f"{int(whole):,}"
    sign = "−" if value < 0 and any(c not in "0.," for c in text) else ""
    return sign + whole + (f".{fraction}" if fraction else "")


def trim(text: str) -> str:
    """Without trailing zeros after the point: 1.50 → 1.5, 1.00 → 1 (a limit of 50 ms reads 50 ms)."""
    return text.rstrip("0").rstrip(".") if "." in text else text


def _significant_decimals(value: float) -> int:
    """Decimals that give SIGNIFICANT significant digits (none from 10**(SIGNIFICANT-1) up)."""
    if value == 0:
        return 0
    magnitude = math.floor(math.log10(abs(value)))
    return max(0, SIGNIFICANT - 1 - magnitude)


def significant(value: float) -> str:
    """Three significant digits (whole numbers from 100), rounding up a digit when it carries (99.96 → 100)."""
    decimals = _significant_decimals(value)
    text = fixed(value, decimals)
    carried = abs(float(text.replace(",", "").replace("−", "")))
    if decimals and carried and _significant_decimals(carried) < decimals:
        text = fixed(value, _significant_decimals(carried))
    return trim(text)


def duration_ms(value, scale: str | None = None) -> str:
    """A duration given in milliseconds: 0.842 ms, 412 ms, 1.00 s, 11.8 s, 1,234 s."""
    value = _number(value)
    if value is None:
        return MISSING
    if value == 0 and scale != "s":
        return "0 ms"
    if scale == "s" or (scale is None and abs(float(significant(value).replace(",", "").replace("−", "-"))) >= 1000):
        return f"{significant(value / 1000)} s"
    return f"{significant(value)} ms"


def duration_scale(*values) -> str:
    """ "s" when any of the values reads in seconds, else "ms": the unit one row of figures shares."""
    present = [abs(v) for v in map(_number, values) if v is not None]
    return "s" if present and max(present) >= 999.5 else "ms"


def rate(value) -> str:
    """A per-second figure: 1,234, 42.5, 4.25, 0.42."""
    value = _number(value)
    if value is None:
        return MISSING
    size = abs(value)
    return trim(fixed(value, 0 if size >= 99.5 else 1 if size >= 9.995 else 2))


def percent(value) -> str:
    """A percentage: 0.10 %, 12.5 %."""
    value = _number(value)
    if value is None:
        return MISSING
    return f"{trim(fixed(value, 2 if abs(value) < 9.995 else 1))} %"


def size(value) -> str:
    """A number of bytes: 512 B, 1.50 KB, 12.0 MB (powers of 1,024)."""
    value = _number(value)
    if value is None:
        return MISSING
    unit = 0
    while abs(value) >= 1023.5 and unit < len(SIZE_UNITS) - 1:
        value /= 1024
        unit += 1
    return f"{fixed(value, 0) if unit == 0 else significant(value)} {SIZE_UNITS[unit]}"


def number(value, unit: str = "") -> str:
    """A plain figure with its unit: a whole number as it is (20 users), else three significant digits."""
    value = _number(value)
    if value is None:
        return MISSING
    text = fixed(value, 0) if value == int(value) else significant(value)
    return f"{text} {unit}" if unit else text


def seconds(value) -> str:
    """A length of time as people say it: 45 s, 12 min 5 s, 3 h 2 min."""
    value = _number(value)
    if value is None:
        return MISSING
    whole = int(Decimal(abs(value)).quantize(Decimal(1), rounding=ROUND_HALF_UP))
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        m, s = divmod(whole, 60)
        return f"{m} min {s} s" if s else f"{m} min"
    h, rest = divmod(whole, 3600)
    return f"{h:,} h {rest // 60} min" if rest // 60 else f"{h:,} h"


def figure(value, unit: str = "") -> str:
    """A server's figure in its series' unit, which the column or axis title names (not repeated here):
    a rate ("/s", "MB/s") by the rate rule, a percentage by the percentage rule, anything else as a
    plain number (4,707 connections, 184 MB, 0.457)."""
    value = _number(value)
    if value is None:
        return MISSING
    if unit.endswith("/s"):
        return rate(value)
    if unit == "%":
        return percent(value).removesuffix(" %")
    return number(value)


# What format.js exports under the same names, for the test that holds the two equal.
FORMATTERS = {
    "duration_ms": duration_ms,
    "rate": rate,
    "percent": percent,
    "size": size,
    "number": number,
    "seconds": seconds,
}
