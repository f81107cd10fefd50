"""The bulk histogram decoder that finalize runs on: the same histograms as ``Histogram.from_bytes``."""

import random

import numpy as np
import pytest

from portal.runs.results import columns
from workers.engine.histogram import Histogram


def _histograms(seed=3, rows=400):
    rng = random.Random(seed)
    out = []
    for _ in range(rows):
        if rng.random() < 0.1:
            out.append(None)  # a row of errors only
            continue
        h = Histogram()
        scale = rng.choice([5, 900, 40_000, 3_000_000, 500_000_000])  # one-byte to many-byte varints
        for _ in range(rng.randint(0, 80)):
            h.record(rng.lognormvariate(0, 1.2) * scale)
        out.append(h)
    return out


def test_decode_gives_every_rows_histogram_exactly():
    hists = _histograms()
    d = columns.decode([h.to_bytes() if h is not None else None for h in hists])
    for i, h in enumerate(hists):
        h = h or Histogram()
        at = d.row == i
        assert dict(zip(d.index[at].tolist(), d.count[at].tolist(), strict=True)) == h._counts
        assert (d.n[i], d.sum[i], d.min[i], d.max[i]) == (h.count, h.sum, h.min, h.max)


def test_groups_merge_like_histogram_merge():
    hists = _histograms(seed=4)
    d = columns.decode([h.to_bytes() if h is not None else None for h in hists])
    key_of_row = np.array([i % 3 - 1 for i in range(len(hists))])  # -1: in no group
    groups = columns.Groups()
    half = len(hists) // 2
    for part in (slice(0, half), slice(half, None)):  # two chunks into the same open groups
        sub = columns.decode([h.to_bytes() if h is not None else None for h in hists[part]])
        groups.add(["a", "b"], key_of_row[part], sub)
    for g, key in enumerate(["a", "b"]):
        expected = Histogram()
        for i, h in enumerate(hists):
            if h is not None and key_of_row[i] == g:
                expected.merge(h)
        merged = groups.close(key)
        assert merged == expected and merged.percentile(95) == expected.percentile(95)
    assert groups.close("a") == Histogram()  # closed: nothing left open
    assert d.n.sum() == sum(h.count for h in hists if h is not None)


@pytest.mark.parametrize(
    "blob",
    [b"\x01\x00\x00\x00\x00\x00", b"\x02\x05\x05", b"\x02\x01\x05\x05\x05\x01\x05\x02", b"\x02\x81"],
    ids=["format", "short", "counts", "truncated"],
)
def test_decode_refuses_what_is_not_a_histogram(blob):
    good = Histogram()
    good.record(1200)
    with pytest.raises(ValueError):
        columns.decode([good.to_bytes(), blob])
