"""The load profile's preview chart as a type: what the plan page and the plan form's live preview
(``plan-preview``) draw, built by one selector (``selectors.profile_preview``) from the engine's
``workers.engine.schedule.preview``, so the chart cannot differ from the run.
"""

# No postponed annotations here: Python 3.11 would not see NotRequired in them.
from typing import NotRequired, TypedDict


class PreviewWindow(TypedDict):
    start: float
    end: float
    label: str


class ProfilePreview(TypedDict):
    """Users (closed kinds) or rate (arrival rate; pacing too) over time, and the measurement windows."""

    kind: str  # the profile's kind (workers/engine/profiles.py)
    duration: float  # seconds
    t: list[float]  # the chart's times: evenly spaced, plus the shape's corners
    users: NotRequired[list[int]]  # closed kinds: users at each time
    rate: NotRequired[list[float]]  # iterations per second started (arrival rate, pacing)
    max_users: NotRequired[int]  # arrival rate: the most users it may start
    windows: list[PreviewWindow]
    description: str  # the profile in words (Plan.profile_description)
