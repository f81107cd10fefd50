"""The portal's side of the load-profile kinds: the engine's registry (workers/engine/profiles.py) read for
the plan's columns, the form, the API's choices and the pages. Nothing here names a kind.

A plan keeps a kind's parameters in flat columns (``Plan.PROFILE_INPUTS``, one per name in the engine's
``PARAMETERS``) and a steps-like kind's levels in ``PlanLevel`` rows; ``kind.document`` turns them into the
engine's profile object, ``kind.unchecked`` into a Profile for the words and sums of the pages.
"""

from portal.common import human_duration, plural
from workers.engine.profiles import KINDS, PARAMETERS, ProfileKind, Words

__all__ = ["KINDS", "PARAMETERS", "WORDS", "choices", "kind_named", "ordered"]


class PortalWords(Words):
    """Descriptions as the pages write them: human durations ("1 h 30 min")."""

    def duration(self, seconds: float) -> str:
        return human_duration(seconds)

    def plural(self, n, word: str) -> str:
        return plural(n, word)


WORDS = PortalWords()


def ordered() -> list[ProfileKind]:
    """Every kind, in the order the form lists them."""
    return sorted(KINDS.values(), key=lambda kind: kind.position)


def choices() -> list[tuple[str, str]]:
    """The plan's ``profile_kind`` choices (a callable, so a new kind needs no migration)."""
    return [(kind.name, kind.label) for kind in ordered()]


def kind_named(name: str | None) -> ProfileKind:
    """The kind called ``name``; an unknown one (never saved: the field's choices refuse it) reads as a ramp."""
    return KINDS.get(name or "ramp") or KINDS["ramp"]
