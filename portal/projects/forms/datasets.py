"""A test case's data set: the CSV upload (its limits, its column names) and how rows are taken."""

import csv
import io

from django import forms

from ..models import DataSet
from .text import (
    IDENTIFIER,
    NOT_AN_IDENTIFIER,
)

MAX_DATA_SET_BYTES = 5 * 1024 * 1024
MAX_DATA_SET_ROWS = 100_000
MAX_DATA_SET_COLUMNS = 100


def parse_data_set(upload) -> tuple[list[str], list[list[str]]]:
    """A CSV upload into (columns, rows): UTF-8, first row the column names, every row as long as the header."""
    if upload.size > MAX_DATA_SET_BYTES:
        raise forms.ValidationError(
            f"The file is {upload.size / 1024 / 1024:.1f} MB; the limit is {MAX_DATA_SET_BYTES // 1024 // 1024} MB."
        )
    raw = upload.read()
    if not raw.strip():
        raise forms.ValidationError("The file is empty: its first row names the columns, e.g. username,password")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise forms.ValidationError(
            f"The file is not UTF-8 text (byte 0x{raw[exc.start]:02x} at position {exc.start}). "
            "Save it as “CSV UTF-8” and upload it again."
        ) from None
    # strict: a stray or unclosed quote is an error to fix, not values silently run together
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    try:
        header = next(row for row in reader if row)
        columns = [name.strip() for name in header]
        _check_columns(columns)
        rows, ragged = [], []
        for number, row in enumerate((row for row in reader if row), start=2):
            if len(rows) == MAX_DATA_SET_ROWS:
                raise forms.ValidationError(
                    f"The file has more than {MAX_DATA_SET_ROWS:,} rows; keep the rows you need and upload it again."
                )
            if len(row) != len(columns):
                ragged.append(
                    f"row {number} has {len(row)} value{'' if len(row) == 1 else 's'}, the header has {len(columns)}"
                )
            rows.append(row)
    except csv.Error as exc:
        raise forms.ValidationError(f"line {reader.line_num} is not valid CSV: {exc}") from None
    if ragged:
        more = f" (and {len(ragged) - 5} more rows like these)" if len(ragged) > 5 else ""
        raise forms.ValidationError(f"{'; '.join(ragged[:5])}{more}. Every row needs one value per column.")
    if not rows:
        raise forms.ValidationError("The file names its columns but has no rows of values.")
    return columns, rows


def _check_columns(columns: list[str]) -> None:
    errors, seen = [], set()
    if len(columns) > MAX_DATA_SET_COLUMNS:
        raise forms.ValidationError(f"The file has {len(columns)} columns; at most {MAX_DATA_SET_COLUMNS} are allowed.")
    for number, name in enumerate(columns, start=1):
        if not name:
            errors.append(f"column {number} has no name")
        elif not IDENTIFIER.match(name):
            errors.append(f"column {number} “{name}” is not a valid name ({NOT_AN_IDENTIFIER})")
        elif name in seen:
            errors.append(f"column “{name}” appears twice")
        seen.add(name)
    if errors:
        raise forms.ValidationError(
            [f"The first row names the columns, as in {{{{username}}}}: {errors[0]}", *errors[1:]]
        )


class DataSetUploadForm(forms.Form):
    """A CSV file for a test case's data set (new or replacing the old one) and how rows are taken."""

    file = forms.FileField(
        label="CSV file",
        help_text=f"UTF-8, comma-separated, the first row naming the columns (letters, digits and _); "
        f"at most {MAX_DATA_SET_BYTES // 1024 // 1024} MB and {MAX_DATA_SET_ROWS:,} rows.",
        widget=forms.ClearableFileInput(attrs={"accept": ".csv,text/csv"}),
        error_messages={"empty": "The file is empty: its first row names the columns, e.g. username,password"},
    )
    mode = forms.ChoiceField(
        label="Rows are taken",
        choices=DataSet.Mode.choices,
        initial=DataSet.Mode.SEQUENTIAL,
        help_text="Sequential: user k starts at row k and walks the rows, wrapping around. Random: any row, each "
        "iteration. Unique: every row at most once in the whole run; when none is left, iterations are dropped.",
    )

    def clean_file(self):
        upload = self.cleaned_data["file"]
        self.cleaned_data["columns"], self.cleaned_data["rows"] = parse_data_set(upload)
        return upload


class DataSetModeForm(forms.ModelForm):
    class Meta:
        model = DataSet
        fields = ["mode"]
        labels = {"mode": "Rows are taken"}
