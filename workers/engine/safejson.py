"""``json.loads`` for text from outside (a request, an upload, a target's response): nesting is a ValueError.

Python's JSON decoder recurses once per level, so ``"[" * 5000`` raises ``RecursionError``, which
no ``except ValueError`` around a parse catches: an API request answered an HTML 500, a worker's
check or a HAR's analysis crashed (issue 28). Here it is ``TooDeep``, a ``ValueError``, like any
other malformed document. ``max_depth`` also refuses documents that parse but nest deeper than the
code that walks them (recursively) should follow.
"""

import json
from typing import Any

# Documents the portal walks (API bodies, a HAR's request and response bodies) nest a few levels;
# nothing it takes needs more than this.
MAX_DEPTH = 64


class TooDeep(ValueError):
    """A JSON document nested deeper than allowed (or than the decoder follows)."""


def depth(value: Any) -> int:
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


def loads(text: str | bytes, *, max_depth: int | None = None) -> Any:
    """The decoded document; ``TooDeep`` (a ValueError) when it nests too deep, ValueError when it is not JSON."""
    try:
        doc = json.loads(text)
    except RecursionError:
        raise TooDeep(
            "nested too deep: more levels than the JSON decoder follows" if max_depth is None else too_deep(max_depth)
        ) from None
    if max_depth is not None and depth(doc) > max_depth:
        raise TooDeep(too_deep(max_depth))
    return doc


def too_deep(max_depth: int) -> str:
    return f"nested more than {max_depth} levels deep"
