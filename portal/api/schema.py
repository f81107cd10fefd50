"""The API's schema class: drf-spectacular's, with an example for every operation (portal.api.examples)."""

from drf_spectacular import openapi

from .examples import examples_for


class AutoSchema(openapi.AutoSchema):
    def get_examples(self):
        return super().get_examples() + examples_for(self.get_operation_id())
