from django import template

from portal import formatting
from portal.metrics import selectors

register = template.Library()


@register.simple_tag
def run_servers(run):
    """The run's Servers section (None when no server of its environment was scraped)."""
    return selectors.run_servers(run)


@register.filter
def level_figure(series: dict, index: int):
    """A series' figures in the measurement window at ``index``."""
    windows = series.get("windows") or []
    return windows[index] if 0 <= index < len(windows) else {}


@register.filter
def figure(value, unit=""):
    """A server's figure by its unit's rule (portal.formatting.figure): 4,707, not 4707.0."""
    return formatting.figure(value, unit or "")
