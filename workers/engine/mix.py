"""The mix: a weighted choice of test cases for each iteration.

Cumulative integer weights and a bisect keep a draw to one ``randrange`` and one
binary search, and integer arithmetic makes the long-run proportions exact
(no float rounding at the edges). The ``random.Random`` is passed in, so a
seeded run is reproducible and each virtual user can own its generator.
"""

from __future__ import annotations

import random
from bisect import bisect_right
from collections.abc import Sequence
from itertools import accumulate
from typing import Generic, TypeVar

T = TypeVar("T")


class Mix(Generic[T]):
    """Choose ``items[i]`` with probability ``weights[i] / sum(weights)``."""

    __slots__ = ("_items", "_cumulative", "_total")

    def __init__(self, items: Sequence[T], weights: Sequence[int]) -> None:
        if not items or len(items) != len(weights):
            raise ValueError("a mix needs at least one item and one weight per item")
        if any(not isinstance(w, int) or w <= 0 for w in weights):
            raise ValueError("mix weights must be positive integers")
        self._items = tuple(items)
        self._cumulative = list(accumulate(weights))
        self._total = self._cumulative[-1]

    def choose(self, rng: random.Random) -> T:
        if len(self._items) == 1:
            return self._items[0]
        return self._items[bisect_right(self._cumulative, rng.randrange(self._total))]

    def share(self, index: int) -> float:
        """Expected share (0..1) of item ``index``."""
        low = self._cumulative[index - 1] if index else 0
        return (self._cumulative[index] - low) / self._total
