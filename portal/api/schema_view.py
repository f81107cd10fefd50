"""``/api/v1/schema/``: drf-spectacular's view, which generates the schema once per process."""

import copy

from django.utils import translation
from drf_spectacular.settings import spectacular_settings
from drf_spectacular.views import SpectacularAPIView
from rest_framework.response import Response


class SchemaView(SpectacularAPIView):
    """The schema is generated once per process (for each language asked), then served from memory.

    It is a function of the code alone (served public: no user's permissions in it), and generating it
    walks every view and serializer: about 0.6 s of CPU, which every request for it paid (the
    malformed-request walk asks for it about forty times, tests/portal/test_malformed_requests.py). The
    view still negotiates the format and reads ``lang`` and ``version`` on every request, as
    drf-spectacular's does (``_get_schema_response`` below is its own, with the memory added).
    """

    _generated: dict = {}
    KEEP = 4  # languages remembered (``lang`` is any string the client sends); others are generated each time

    def _get_version_parameter(self, request):
        # The API has one version (/api/v1/): drf-spectacular wrote any ?version= string into the schema's
        # info.version; another version than this one is not asked for.
        version = request.GET.get("version")
        return version if version == spectacular_settings.VERSION else None

    def _get_schema_response(self, request):
        version = self.api_version or request.version or self._get_version_parameter(request)
        key = (version, translation.get_language())
        schema = self._generated.get(key)
        if schema is None:
            generator = self.generator_class(urlconf=self.urlconf, api_version=version, patterns=self.patterns)
            schema = generator.get_schema(request=request, public=self.serve_public)
            if len(self._generated) < self.KEEP:
                self._generated[key] = schema
        return Response(
            data=copy.deepcopy(schema),  # 24 ms, against 600 to generate it: no answer can change the kept one
            headers={"Content-Disposition": f'inline; filename="{self._get_filename(request, version)}"'},
        )
