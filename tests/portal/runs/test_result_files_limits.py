"""Issue 30, item 2: a result file is read in bounded memory and time whatever it holds.

The issue's payloads, scaled down with the limits so that each test stays fast while still
proving its cap: a small .gz expanding to one huge line, a CSV field of huge size, XML wide and
deep, gzip expanding hundreds of times. Peak memory is measured with tracemalloc; each bound is
one that the reader without the cap exceeds (it held the whole line, field or tree).
"""

import gzip
import re
import tracemalloc

import pytest

from portal.runs import result_files as rf
from portal.runs.models import Run
from tests.portal.runs.test_result_files import METRIC, request

MB = 1 << 20
JTL_HEADER = b"timeStamp,elapsed,label,responseCode,responseMessage,success,failureMessage,bytes,allThreads\n"
JTL_ROW = b"1795543128000,120,Home,200,OK,true,,5000,2\n"


def gz(tmp_path, data: bytes, name: str):
    path = tmp_path / name
    path.write_bytes(gzip.compress(data, 9))
    return path


def k6_start() -> bytes:
    return ("\n".join([METRIC, *request(1, 120)]) + "\n").encode()


def refused_peak(path, limits: rf.Limits) -> tuple[str, int]:
    """The refusal's message and the peak of memory allocated while reading to it."""
    tracemalloc.start()
    try:
        with pytest.raises(rf.ResultFileError) as refused:
            rf.read(path, limits=limits)
        return str(refused.value), tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_small_gz_expanding_to_a_huge_line_is_refused_without_holding_the_line(tmp_path):
    # given: 30 KB of gzip holding a k6 file whose third line is 32 MB long (the issue's: 1 MB holding 1 GiB)
    path = gz(tmp_path, k6_start() + b'{"metric": "' + b"a" * (32 * MB) + b'"}\n', "out.json.gz")
    assert path.stat().st_size < 64 * 1024

    # when
    message, peak = refused_peak(path, rf.Limits(max_line=256 * 1024))

    # then: the limit is named, and the line was never gathered (the reader without the cap held all 32 MB)
    assert "A line is longer than 0.25 MB, the limit for one line; nothing was imported" in message
    assert peak < 4 * MB, f"peak {peak / MB:.1f} MB"


def test_a_jtl_with_a_huge_csv_field_is_refused_without_holding_it(tmp_path):
    # given: a gzipped JTL whose second row has a quoted failure message of 24 MB spread over short lines
    field = (b"x" * 1000 + b"\n") * (24 * 1024)
    data = JTL_HEADER + JTL_ROW + b'1795543129000,80,Home,500,Error,false,"' + field + b'",300,2\n'
    path = gz(tmp_path, data, "results.jtl.gz")

    # when
    message, peak = refused_peak(path, rf.Limits(max_field=64 * 1024))

    # then
    assert re.match(r"^Line \d+ has a field longer than 65,536 characters, the limit for one field", message)
    assert peak < 4 * MB, f"peak {peak / MB:.1f} MB"


def test_gzip_expanding_hundreds_of_times_is_refused_early(tmp_path):
    # given: a valid k6 file followed by 16 MB of blank lines, 16 KB gzipped (1,000 times)
    path = gz(tmp_path, k6_start() + b"\n" * (16 * MB), "out.json.gz")

    # when
    message, _ = refused_peak(path, rf.Limits(expansion_allowance=MB // 2))

    # then: refused once past the allowance, without reading the 16 MB (the reader without the cap imported it)
    assert message.startswith("The gzipped file expands more than 100 times")


def test_the_decompressed_size_is_capped(tmp_path):
    lines = b"".join(JTL_ROW for _ in range(25_000))  # 1.1 MB, compressing about 400 times
    path = gz(tmp_path, JTL_HEADER + lines, "results.jtl.gz")
    message, _ = refused_peak(path, rf.Limits(max_decompressed=MB // 4, max_expansion=10_000))
    assert message.startswith("The file expands to more than 0.25 MB once gunzipped, the limit")


def xml_sample(ts: int = 1795543128000) -> bytes:
    return f'<httpSample t="120" ts="{ts}" s="true" lb="Home" rc="200" by="5000" na="2"/>\n'.encode()


def test_a_wide_xml_jtl_is_read_with_every_element_cleared(tmp_path):
    # given: 300,000 foreign elements beside the samples, one a line (the issue: 40 M elements in 150 KB)
    body = b"<x/>\n" * 300_000
    path = gz(
        tmp_path,
        b'<?xml version="1.0"?>\n<testResults version="1.2">\n'
        + xml_sample()
        + body
        + xml_sample(1795543129000)
        + b"</testResults>\n",
        "results.jtl.gz",
    )

    # when
    tracemalloc.start()
    try:
        results = rf.read(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()

    # then: imported, and the foreign elements were let go as read (kept, they took over 30 MB)
    try:
        assert results.pages_total == 2
    finally:
        results.discard()
    assert peak < 8 * MB, f"peak {peak / MB:.1f} MB"


def test_deep_xml_is_refused_with_the_limit_named(tmp_path):
    deep = b"<sample>" * 10_000 + b"</sample>" * 10_000
    path = gz(tmp_path, b'<?xml version="1.0"?>\n<testResults version="1.2">\n' + deep + b"</testResults>\n", "d.jtl")
    message, peak = refused_peak(path, rf.Limits())
    assert "XML elements nested more than 32 deep, the limit" in message
    assert peak < 4 * MB, f"peak {peak / MB:.1f} MB"


def test_a_sample_holding_too_many_elements_is_refused(tmp_path):
    inside = b"<assertionResult/>\n" * 200_000
    data = b'<?xml version="1.0"?>\n<testResults version="1.2">\n<httpSample t="1" ts="1795543128000" lb="A">\n'
    path = gz(tmp_path, data + inside + b"</httpSample>\n</testResults>\n", "w.jtl")
    message, peak = refused_peak(path, rf.Limits(max_sample_elements=10_000))
    assert "one sample holds more than 10,000 XML elements, the limit" in message
    assert peak < 8 * MB, f"peak {peak / MB:.1f} MB"


@pytest.mark.django_db
def test_a_refused_file_creates_nothing(tmp_path, environment, alice):
    # given: the default limits, and a k6 file of 100 KB gzipped holding a 9 MB line
    from portal.runs.services import run_import

    path = gz(tmp_path, k6_start() + b"[" * (9 * MB) + b"\n", "out.json.gz")

    # when
    with pytest.raises(rf.ResultFileError) as refused:
        run_import(environment=environment, user=alice, path=path, file_name="out.json.gz")

    # then: the limit named, no run
    assert "A line is longer than 8 MB, the limit for one line; nothing was imported" in str(refused.value)
    assert not Run.objects.exists()


def test_json_nested_too_deep_on_a_short_line_is_a_bad_line_not_a_crash(tmp_path):
    path = gz(tmp_path, k6_start() + b"[" * 200_000 + b"\n", "out.json.gz")
    with pytest.raises(rf.ResultFileError, match=r"^Line 4 is not a k6 JSON line \(TooDeep: nested too deep"):
        rf.read(path)


@pytest.mark.django_db
def test_the_limits_are_the_settings(tmp_path, environment, alice, settings):
    # given: limits set lower than their defaults, and a file over each in turn
    from portal.runs.services import run_import
    from portal.runs.services.imports import import_limits

    settings.PLIMSOLL_IMPORT_MAX_LINE_MB = 1
    settings.PLIMSOLL_IMPORT_MAX_FIELD_KB = 2
    settings.PLIMSOLL_IMPORT_MAX_XML_DEPTH = 8
    line = gz(tmp_path, k6_start() + b'{"metric": "' + b"a" * (2 * MB) + b'"}\n', "line.json.gz")
    field = tmp_path / "field.jtl"
    field.write_bytes(JTL_HEADER + b'1795543129000,80,Home,500,Error,false,"' + b"x" * 4096 + b'",300,2\n')
    deep = tmp_path / "deep.jtl"
    nested = b"<a>" * 9 + b"</a>" * 9
    deep.write_bytes(b'<?xml version="1.0"?>\n<testResults version="1.2">' + nested + b"</testResults>")

    # when / then: each refused by the import naming the configured limit, and no run
    for path, limit in (
        (line, "A line is longer than 1 MB, the limit for one line"),
        (field, "has a field longer than 2,048 characters, the limit for one field"),
        (deep, "XML elements nested more than 8 deep, the limit"),
    ):
        with pytest.raises(rf.ResultFileError, match=re.escape(limit)):
            run_import(environment=environment, user=alice, path=path, file_name=path.name)
    assert not Run.objects.exists()

    # and the gzip limits too
    settings.PLIMSOLL_IMPORT_MAX_GUNZIPPED_GB = 3
    settings.PLIMSOLL_IMPORT_MAX_EXPANSION = 20
    settings.PLIMSOLL_IMPORT_EXPANSION_ALLOWANCE_MB = 4
    settings.PLIMSOLL_IMPORT_MAX_SAMPLE_ELEMENTS = 500
    limits = import_limits()
    assert (limits.max_decompressed, limits.max_expansion, limits.expansion_allowance) == (3 << 30, 20, 4 * MB)
    assert limits.max_sample_elements == 500
