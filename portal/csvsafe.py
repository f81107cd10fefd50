"""CSV files that are safe to open in a spreadsheet (OWASP's CSV-injection rule).

A cell that begins with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return is a formula
to Excel, LibreOffice and Google Sheets, and a formula can run commands (``=cmd|' /C calc'!A0``)
or send the sheet's data away (``=HYPERLINK(...)``). Labels come from people and from imported
files (a JTL's label, a HAR's URL, a step's name), so every CSV the portal writes goes through
``writer``/``dict_writer``, which prefix such a cell with a single quote: the spreadsheet shows
the text as written and runs nothing. Numbers stay numbers: an int or a float is written as is,
and so is a string that is a plain number (``-12.5``, ``+3``, ``-1e-3``), which no spreadsheet
reads as a formula.

Every text cell is also written in double quotes (``QUOTE_NONNUMERIC``, as OWASP advises; numbers
stay bare): the csv module quotes a field holding a line feed but not one holding a lone carriage
return, which a reader takes as the end of the row, so that ``"x\r=1+2"`` would start a new row
with a formula.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable, Mapping
from typing import Any

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
_PLAIN_NUMBER = re.compile(r"^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$")


def cell(value: Any) -> Any:
    """``value`` as a cell that no spreadsheet runs: numbers unchanged, formula-like text behind a quote."""
    if not isinstance(value, str) or not value.startswith(FORMULA_STARTS) or _PLAIN_NUMBER.match(value):
        return value
    return "'" + value


class _Writer:
    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def writerow(self, row: Iterable[Any]) -> Any:
        return self._inner.writerow([cell(v) for v in row])

    def writerows(self, rows: Iterable[Iterable[Any]]) -> None:
        for row in rows:
            self.writerow(row)


class _DictWriter:
    def __init__(self, inner: csv.DictWriter) -> None:
        self._inner = inner

    def writeheader(self) -> Any:
        return self._inner.writeheader()

    def writerow(self, row: Mapping[str, Any]) -> Any:
        return self._inner.writerow({k: cell(v) for k, v in row.items()})

    def writerows(self, rows: Iterable[Mapping[str, Any]]) -> None:
        for row in rows:
            self.writerow(row)


def writer(out: Any, **kwargs: Any) -> _Writer:
    """``csv.writer(out, **kwargs)`` whose every cell goes through ``cell``, text in quotes."""
    return _Writer(csv.writer(out, **{"quoting": csv.QUOTE_NONNUMERIC, **kwargs}))


def dict_writer(out: Any, fieldnames: Iterable[str], **kwargs: Any) -> _DictWriter:
    """``csv.DictWriter(out, fieldnames, **kwargs)`` whose every cell goes through ``cell``, text in quotes."""
    return _DictWriter(csv.DictWriter(out, fieldnames=fieldnames, **{"quoting": csv.QUOTE_NONNUMERIC, **kwargs}))
