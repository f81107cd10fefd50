"""A finished run's results as files for pipelines and people: one module per format, found by this registry.

Every format reads the run's ``summary`` (and the chart series), the same figures as the report page, so
a build's test results never disagree with what people see. The API serves each format at
``/api/v1/runs/{code}/{file_name}`` (portal/api/urls.py reads ``FORMATS``), the run page links them all,
and tests/portal/runs/test_export_formats.py checks every one.

**Adding a format** is one module here with one ``ExportFormat`` subclass (its ``render``), plus a line in
docs/automation (the formats table, checked by that test). Nothing else lists the formats.
"""

import importlib
import pkgutil
from typing import ClassVar

from drf_spectacular.types import OpenApiTypes

from ..models import Run

FORMATS: dict[str, "ExportFormat"] = {}


class ExportFormat:
    """One kind of file a run exports. Subclasses set the class attributes and ``render``."""

    method: ClassVar[str]  # the API view's action: "pages_csv"
    file_name: ClassVar[str]  # the URL's last part: "pages.csv"
    media_type: ClassVar[str]  # for the schema: "text/csv"
    content_type: ClassVar[str]  # the response's header: "text/csv; charset=utf-8"
    summary: ClassVar[str]  # the API's one line about it
    label: ClassVar[str]  # the run page's button: "Pages table (CSV)"
    position: ClassVar[int]  # the button's place on the run page
    schema_type: ClassVar[object] = OpenApiTypes.STR

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        FORMATS[cls.method] = cls()

    @property
    def route_name(self) -> str:
        """The API's URL name in its namespace: "run-pages-csv"."""
        return f"run-{self.method.replace('_', '-')}"

    @property
    def url_name(self) -> str:
        """The URL name to reverse: "api:run-pages-csv"."""
        return f"api:{self.route_name}"

    def download_name(self, run: Run) -> str:
        """The file name a browser saves it as: "plimsoll-run-12-pages.csv"."""
        stem, _, ext = self.file_name.rpartition(".")
        return f"plimsoll-run-{run.number}-{stem}.{ext}"

    def offered_for(self, run: Run) -> bool:
        """Whether the run page offers it for ``run`` (the API serves every format for every run)."""
        return True

    def render(self, run: Run) -> str:
        raise NotImplementedError


def ordered() -> list[ExportFormat]:
    """Every format, in the run page's order."""
    return sorted(FORMATS.values(), key=lambda fmt: fmt.position)


for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
