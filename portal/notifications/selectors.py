from django.db.models import Prefetch

from .models import Delivery

LOG_LENGTH = 10


def project_channels(*, project):
    """The project's channels, each with its last deliveries (a sliced prefetch: one query for all)."""
    return channels_with_log(project.channels.all())


def channels_with_log(channels):
    """``channels`` with their last LOG_LENGTH deliveries as ``log`` (one query more)."""
    return channels.prefetch_related(
        Prefetch("deliveries", queryset=Delivery.objects.order_by("-created_at", "-id")[:LOG_LENGTH], to_attr="log")
    )
