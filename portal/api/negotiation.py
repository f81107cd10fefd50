"""Content negotiation for an API with one format: JSON whatever the Accept header says.

DRF answers 406 when the Accept header names nothing it renders; a CI tool's odd header
(``Accept: text/html``, or a typo) would then fail a pipeline over nothing. The API has one
renderer, so it answers JSON (its Content-Type says so) instead.
"""

from rest_framework import exceptions
from rest_framework.negotiation import DefaultContentNegotiation


class JsonWhateverAccept(DefaultContentNegotiation):
    def select_renderer(self, request, renderers, format_suffix=None):
        try:
            return super().select_renderer(request, renderers, format_suffix)
        except exceptions.NotAcceptable:
            if format_suffix:
                raise  # an explicit ?format= that does not exist stays an error
            return renderers[0], renderers[0].media_type
