"""A HAR recording's upload, and the preview's choices posted back."""

from django import forms
from django.conf import settings

from .. import har, services


class HarUploadForm(forms.Form):
    """A HAR recording to import as a test case; nothing is saved before its preview is confirmed."""

    file = forms.FileField(
        label="HAR file",
        help_text=f"A HAR 1.2 recording: the browser's “Save all as HAR” (Chromium, Firefox), Playwright's "
        f"record_har_path, k6 Studio. At most {settings.PLIMSOLL_HAR_MAX_MB} MB.",
        widget=forms.ClearableFileInput(attrs={"accept": ".har,application/json"}),
        error_messages={"empty": "The file is empty. Save the recording with your browser's “Save all as HAR”."},
    )

    def clean_file(self):
        upload = self.cleaned_data["file"]
        too_large = services.har_too_large(upload.size)
        if too_large:  # before reading it
            raise forms.ValidationError(too_large)
        return upload


def har_choices(data) -> har.Choices:
    """The preview's choices from its posted form: unchecked boxes are not posted, so absent means no."""
    return har.Choices(
        rejected={
            key[len("correlation:") :] for key in data if key.startswith("correlation:") and data[key] == "reject"
        },
        keep_headers={key[len("keep_header:") :].lower() for key in data if key.startswith("keep_header:")},
        keep_fields={key[len("keep_field:") :] for key in data if key.startswith("keep_field:")},
        vary_fields={key[len("vary_field:") :] for key in data if key.startswith("vary_field:")},
        variables={key[len("variable:") :]: data[key] for key in data if key.startswith("variable:")},
    )
