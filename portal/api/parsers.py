"""The API's JSON parser: DRF's, with a bound on nesting.

Python's JSON decoder recurses once per level, so a 1,200-level object or a 5,000-level array
raises ``RecursionError`` (an HTML 500) instead of a ``ValueError``. Nothing the API takes nests
deeper than a few levels (a plan's mix, a step's checks), so a body nesting deeper than
``MAX_DEPTH`` is refused as a parse error (400 in the error shape) before any code walks it.
"""

from rest_framework import parsers
from rest_framework.exceptions import ParseError

MAX_DEPTH = 64


def _depth(value) -> int:
    """How deep containers nest in a decoded document, without recursing (so without a limit of its own)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, level)
        stack.extend((child, level + 1) for child in children)
    return deepest


class JSONParser(parsers.JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        message = f"JSON parse error - the document is nested more than {MAX_DEPTH} levels deep"
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError(message) from None
        if _depth(data) > MAX_DEPTH:
            raise ParseError(message)
        return data
