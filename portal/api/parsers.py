"""The API's JSON parser: DRF's, with a bound on nesting.

Python's JSON decoder recurses once per level, so a 1,200-level object or a 5,000-level array
raises ``RecursionError`` (an HTML 500) instead of a ``ValueError``. Nothing the API takes nests
deeper than a few levels (a plan's mix, a step's checks), so a body nesting deeper than
``MAX_DEPTH`` is refused as a parse error (400 in the error shape) before any code walks it.
JSON inside the body's strings (a step's JSON body, a tuning change's hook body) and in uploaded
files is parsed with the same guard (``workers.engine.safejson``) where it is read.
"""

from rest_framework import parsers
from rest_framework.exceptions import ParseError

from workers.engine import safejson

MAX_DEPTH = safejson.MAX_DEPTH


class JSONParser(parsers.JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        message = f"JSON parse error - the document is {safejson.too_deep(MAX_DEPTH)}"
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError(message) from None
        if safejson.depth(data) > MAX_DEPTH:
            raise ParseError(message)
        return data
