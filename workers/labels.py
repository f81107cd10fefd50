"""A worker's labels (``PLIMSOLL_WORKER_LABELS``): parsed here, with no Django, so that the settings can check them."""

import re

POOL_NAME = re.compile(r"[-a-zA-Z0-9_]+")  # a pool names a Celery queue, engine.<pool>


def parse_labels(text: str) -> dict[str, str]:
    """``"zone=eu-west, pool=private"`` → ``{"zone": "eu-west", "pool": "private"}``; a bad item raises ValueError."""
    labels = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise ValueError(f"PLIMSOLL_WORKER_LABELS: {item!r} is not key=value")
        labels[key.strip()] = value.strip()
    if "pool" in labels and not POOL_NAME.fullmatch(labels["pool"]):
        raise ValueError(
            f"PLIMSOLL_WORKER_LABELS: pool={labels['pool']!r}: a pool's name has letters, numbers, "
            "underscores or hyphens only"
        )
    return labels
