"""Plimsoll demo target: the bundled *system under test*, not part of the product.

This package is a small aiohttp web application that Plimsoll load-tests in the
seeded demo environment (``make run``) and in end-to-end tests. It imitates the
systems of the seed stories (a slow search on an unindexed custom field,
contention on one shared "tempdb" allocation lock, a security-token cache that
grows until its clean-up stalls every page, documents stored in the database
or in a blob folder, pages that can be gzip-compressed, a login form protected
by a CSRF token) and lets tuning flip those behaviours through configuration
knobs at ``/_demo/knobs`` (``demo/knobs.py``, one entry per knob). It counts
exactly what it served at ``/_demo/counters`` and ``/metrics`` so tests can
compare Plimsoll's records against the truth.

Nothing in Plimsoll's own code may import this package: it is a demo and a
fixture only. Run it with ``python -m demo --port 8001``.
"""

from demo.app import create_app

__all__ = ["create_app"]
