"""Formatting of measured figures, so every page writes them the same way."""

from django import template

from portal.common import human_duration, plural

register = template.Library()
MISSING = "—"


def _number(value):
    """The value as a float, or None when there is nothing to show (None, "", a missing key)."""
    if value is None or value == "":
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


@register.filter
def ms(value):
    """A duration in milliseconds: 0.84 ms, 123 ms, 4.02 s."""
    value = _number(value)
    if value is None:
        return MISSING
    if value >= 1000:
        return f"{value / 1000:.2f} s"
    if value >= 10:
        return f"{value:.0f} ms"
    return f"{value:.2f} ms"


@register.filter
def rate(value):
    """A per-second figure with sensible precision."""
    value = _number(value)
    if value is None:
        return MISSING
    return f"{value:,.0f}" if value >= 100 else f"{value:,.1f}" if value >= 10 else f"{value:,.2f}"


@register.filter
def pct(value):
    value = _number(value)
    if value is None:
        return MISSING
    return f"{value:.2f} %" if value < 10 else f"{value:.1f} %"


@register.filter
def seconds(value):
    """A length of time: 45 s, 12 min 5 s, 3 h 2 min."""
    value = _number(value)
    return MISSING if value is None else human_duration(value)


@register.filter
def words(key):
    """A snake_case key as words: ramp_up → Ramp up."""
    return str(key).replace("_", " ").capitalize()


@register.filter
def load_of(profile):
    """The size of a load profile in a few words: 20 users, 50 iterations/s, 5 levels up to 200 users."""
    if not isinstance(profile, dict):
        return MISSING
    if profile.get("kind") == "arrival_rate":
        return f"{profile.get('rate')} iterations/s"
    if profile.get("kind") == "steps":
        levels = profile.get("levels") or []
        top = max((lv["users"] for lv in levels), default=0)
        return f"{plural(len(levels), 'level')} up to {plural(top, 'user')}"
    return plural(profile.get("users"), "user")
