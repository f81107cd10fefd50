"""Formatting of measured figures, so every page writes them the same way."""

from django import template

from portal import formatting
from portal.common import plural
from portal.projects import profiles

register = template.Library()
MISSING = formatting.MISSING


@register.filter
def ms(value, scale=None):
    """A duration in milliseconds: 0.842 ms, 123 ms, 4.02 s (portal.formatting.duration_ms)."""
    return formatting.duration_ms(value, scale or None)


@register.filter
def rate(value):
    """A per-second figure: 1,234, 42.5, 4.25 (portal.formatting.rate)."""
    return formatting.rate(value)


@register.filter
def pct(value):
    """A percentage: 0.10 %, 12.5 % (portal.formatting.percent)."""
    return formatting.percent(value)


@register.filter
def size(value):
    """A number of bytes: 512 B, 1.50 KB (portal.formatting.size)."""
    return formatting.size(value)


@register.filter
def number(value, unit=""):
    """A plain figure with its unit: 20 users, 2.45 GB (portal.formatting.number)."""
    return formatting.number(value, unit or "")


@register.filter
def seconds(value):
    """A length of time: 45 s, 12 min 5 s, 3 h 2 min (portal.formatting.seconds)."""
    return formatting.seconds(value)


@register.filter
def words(key):
    """A snake_case key as words: ramp_up → Ramp up."""
    return str(key).replace("_", " ").capitalize()


@register.filter
def load_of(profile):
    """The size of a load profile in a few words: 20 users, 50 iterations/s, 5 levels up to 200 users."""
    if not isinstance(profile, dict):
        return MISSING
    kind = profiles.KINDS.get(profile.get("kind") or "ramp")
    if kind is None:
        return plural(profile.get("users"), "user")
    return kind.size_words(kind.unchecked(profile), profiles.WORDS)


@register.simple_tag
def export_formats(run=None):
    """The run's export formats in the page's order (portal/runs/exports/): those that have something for it."""
    from portal.runs import exports

    return [fmt for fmt in exports.ordered() if run is None or fmt.offered_for(run)]
