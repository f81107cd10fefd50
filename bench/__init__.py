"""Plimsoll's benchmarks: the engine against Locust and wrk, side by side (``python -m bench``).

Nothing here is imported by the product or by the test suite; see README.md.
"""
