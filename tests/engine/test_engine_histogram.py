import json
import math
import random

import pytest

from workers.engine.histogram import MAX_US, Histogram, bucket_index, bucket_value


def exact_percentile(sorted_values, q):
    """Nearest-rank percentile, the definition Histogram.percentile approximates."""
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


@pytest.fixture(scope="module")
def latencies():
    rng = random.Random(7)
    # A realistic mix: a log-normal body, a few fast cached pages, a slow tail up to a minute.
    values = [int(rng.lognormvariate(math.log(40_000), 0.8)) for _ in range(50_000)]
    values += [rng.randint(1, 2_000) for _ in range(2_000)]
    values += [rng.randint(1_000_000, 60_000_000) for _ in range(500)]
    return values


def test_percentiles_are_within_a_tenth_of_a_percent(latencies):
    h = Histogram()
    h.record_many(latencies)
    ordered = sorted(latencies)

    for q in (1, 10, 25, 50, 75, 90, 95, 99, 99.9, 99.99):
        exact = exact_percentile(ordered, q)
        assert abs(h.percentile(q) - exact) <= exact * 0.001, q


def test_min_max_mean_and_count_are_exact(latencies):
    h = Histogram()
    h.record_many(latencies)

    assert h.count == len(latencies)
    assert h.min == min(latencies)
    assert h.max == max(latencies)
    assert h.mean == pytest.approx(sum(latencies) / len(latencies), rel=1e-12)
    assert h.percentile(0) == h.min
    assert h.percentile(100) == h.max


def test_percentiles_in_one_pass_agree_with_one_at_a_time(latencies):
    h = Histogram()
    h.record_many(latencies)

    qs = (50, 90, 95, 99, 99.9)
    assert h.percentiles(qs) == {q: h.percentile(q) for q in qs}


def test_merge_equals_recording_everything(latencies):
    whole = Histogram()
    whole.record_many(latencies)
    parts = [Histogram() for _ in range(3)]
    for i, v in enumerate(latencies):
        parts[i % 3].record(v)

    merged = Histogram().merge(parts[0]).merge(parts[1]).merge(parts[2])

    assert merged == whole
    assert merged.percentile(99) == whole.percentile(99)


def test_merging_an_empty_histogram_changes_nothing():
    h = Histogram()
    h.record(5)

    h.merge(Histogram())

    assert (h.count, h.min, h.max) == (1, 5, 5)


def test_dict_round_trip_is_json_safe_and_lossless(latencies):
    h = Histogram()
    h.record_many(latencies)

    d = json.loads(json.dumps(h.to_dict()))

    assert Histogram.from_dict(d) == h
    assert all(isinstance(k, str) for k in d["b"])


def test_the_dict_grows_with_distinct_buckets_not_with_samples():
    rng = random.Random(1)
    h = Histogram()
    h.record_many(int(rng.lognormvariate(math.log(40_000), 0.5)) for _ in range(200_000))

    d = h.to_dict()

    assert len(d["b"]) < 6_000
    assert len(json.dumps(d)) < 80_000


def test_values_are_clamped_to_the_range():
    h = Histogram()
    h.record(0)
    h.record(-3)
    h.record(10**12)

    assert h.min == 1
    assert h.max == MAX_US
    assert h.percentile(100) == MAX_US


def test_floats_are_rounded_to_microseconds():
    h = Histogram()
    h.record(1234.6)

    assert h.min == 1235


def test_bucket_scheme_is_exact_below_2048_and_continuous_above():
    assert [bucket_index(v) for v in (1, 2047, 2048, 2049, 2050, 4095, 4096)] == [
        1,
        2047,
        2048,
        2048,
        2049,
        3071,
        3072,
    ]
    for v in (2048, 3000, 123_456, 9_999_999, MAX_US):
        assert abs(bucket_value(bucket_index(v)) - v) <= v * 0.0005


def test_an_empty_histogram_reads_as_zero():
    h = Histogram()

    assert (h.count, h.min, h.max, h.mean, h.percentile(99)) == (0, 0, 0, 0.0, 0)


def test_from_dict_refuses_inconsistent_data():
    with pytest.raises(ValueError, match="do not add up"):
        Histogram.from_dict({"v": 1, "n": 3, "sum": 3, "min": 1, "max": 1, "b": {"1": 2}})


def test_binary_form_round_trips_and_is_much_smaller_than_json():
    rng = random.Random(7)
    h = Histogram()
    for _ in range(50):
        h.record(rng.lognormvariate(11, 0.6))  # ~60 ms pages with a long tail

    data = h.to_bytes()

    assert Histogram.from_bytes(data) == h
    assert Histogram.from_bytes(memoryview(data)).percentile(95) == h.percentile(95)
    assert len(data) * 4 < len(json.dumps(h.to_dict()))
    assert Histogram.from_bytes(Histogram().to_bytes()).count == 0


def test_a_damaged_binary_histogram_is_refused():
    h = Histogram()
    h.record_many([100, 5000, 70000])
    data = h.to_bytes()
    for bad in (b"", data[:-1], data + b"\x00", b"\x01" + data[1:]):
        with pytest.raises(ValueError):
            Histogram.from_bytes(bad)


def test_variance_is_the_sample_variance_within_the_buckets_width(latencies):
    # the noise of a page's APD within a run is read from its window histogram (s² / n): its variance must be
    # the durations' own, within the buckets' 0.05 % (values below 2,048 µs are exact)
    h = Histogram()
    h.record_many(latencies)
    n, mean = len(latencies), sum(latencies) / len(latencies)
    exact = sum((v - mean) ** 2 for v in latencies) / (n - 1)
    assert h.variance() == pytest.approx(exact, rel=1e-3)
    small = Histogram()
    small.record_many([3, 5, 7, 9])
    assert small.variance() == pytest.approx(20 / 3, rel=1e-12)
    one = Histogram()
    one.record(500)
    assert one.variance() == 0.0 and Histogram().variance() == 0.0


def test_record_seconds_equals_recording_each_value_in_microseconds():
    # The WebSocket round trips are recorded in one call per session: the same buckets, count, sum, min and max
    # as record(s * 1_000_000) one at a time, clamping and rounding included, into a histogram not empty before.
    rng = random.Random(3)
    seconds = [rng.lognormvariate(math.log(0.0004), 1.5) for _ in range(5_000)]
    seconds += [0.0, 2.4e-7, 5e-7, 0.0020475, 0.0020485, 700.0, 1e-6 * 2047.5]
    rng.shuffle(seconds)
    one, batch = Histogram(), Histogram()
    for h in (one, batch):
        h.record(1234)
    for s in seconds:
        one.record(s * 1_000_000)
    batch.record_seconds(seconds)
    assert batch.to_dict() == one.to_dict()
    assert (batch.count, batch.min, batch.max, batch.mean) == (one.count, one.min, one.max, one.mean)
    empty = Histogram()
    empty.record_seconds([])
    assert empty.to_dict() == Histogram().to_dict()
    first = Histogram()
    first.record_seconds([0.5, 0.25])
    assert (first.min, first.max, first.count) == (250_000, 500_000, 2)
