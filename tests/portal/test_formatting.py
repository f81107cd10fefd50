"""One set of rules for writing figures (portal/formatting.py), and its JavaScript twin (static/js/format.js).

The same table of values goes through both; the strings must be equal, so a figure reads the
same in a table, a sentence and a chart's tooltip.
"""

import pytest
from django.template import Context, Template

from portal import formatting

VALUES = [
    None,
    "",
    "text",
    0,
    0.0004,
    0.00842,
    0.125,
    0.842,
    1,
    2.5,
    4.2,
    9.995,
    9.996,
    10,
    12.5,
    42.04,
    99.5,
    99.95,
    99.96,
    100,
    100.5,
    412,
    999.4,
    999.5,
    999.96,
    1000,
    1000.4,
    1234.5,
    1500,
    9999,
    11_800,
    99_949,
    100_499,
    1_234_567,
    123_456_789.5,
    -0.5,
    -12.25,
    -1500,
]
CASES = [(name, value) for name in ("duration_ms", "rate", "percent", "size", "number", "seconds") for value in VALUES]


def test_a_second_reads_the_same_everywhere():
    # given: a duration of exactly a second, shown by a template filter, a sentence and a comparison
    from portal.history.comparison import format_figure
    from portal.runs.analysis import _fmt_ms
    from portal.stats.analysis import format_value

    # when
    shown = {
        Template("{% load plimsoll %}{{ v|ms }}").render(Context({"v": 1000})),
        _fmt_ms(1000),
        format_value(1000, "ms"),
        format_figure(1000, "ms"),
    }
    # then
    assert shown == {"1 s"}


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("duration_ms", 0.842, "0.842 ms"),
        ("duration_ms", 412, "412 ms"),
        ("duration_ms", 1500, "1.5 s"),
        ("duration_ms", 4.2, "4.2 ms"),
        ("duration_ms", 999.96, "1 s"),
        ("duration_ms", 11_800, "11.8 s"),
        ("duration_ms", 1_234_567, "1,235 s"),
        ("duration_ms", 100.5, "101 ms"),  # half away from zero, as the browser's toFixed rounds
        ("rate", 1234.5, "1,235"),
        ("rate", 42.04, "42"),
        ("rate", 0.125, "0.13"),
        ("percent", 0.1, "0.1 %"),
        ("percent", 12.5, "12.5 %"),
        ("size", 512, "512 B"),
        ("size", 1536, "1.5 KB"),
        ("size", 12 * 1024 * 1024, "12 MB"),
        ("seconds", 3725, "1 h 2 min"),
        ("duration_ms", None, "—"),
    ],
)
def test_rules(name, value, expected):
    assert formatting.FORMATTERS[name](value) == expected


@pytest.mark.browser
def test_javascript_twin_writes_the_same_strings(browser, tmp_path):
    # given: format.js loaded into a page of its own (file://: no server needed)
    from django.conf import settings

    script = (settings.BASE_DIR / "static" / "js" / "format.js").read_text()
    page = browser.new_page()
    page.set_content("<html><body></body></html>")
    page.add_script_tag(content=script)
    # when: every case through the JavaScript formatter of the same name
    in_js = page.evaluate(
        "cases => cases.map(([name, value]) => window.PlimsollFormat[name](value))",
        [[name, value] for name, value in CASES],
    )
    with_scale = page.evaluate(
        "vs => vs.map(v => [window.PlimsollFormat.duration_ms(v, 's'), window.PlimsollFormat.durationScale(v, 5)])",
        [v for v in VALUES if isinstance(v, int | float)],
    )
    page.close()
    # then
    in_python = [formatting.FORMATTERS[name](value) for name, value in CASES]
    assert in_js == in_python
    assert with_scale == [
        [formatting.duration_ms(v, "s"), formatting.duration_scale(v, 5)] for v in VALUES if isinstance(v, int | float)
    ]


FIGURE_CASES = [(value, unit) for unit in ("", "%", "/s", "MB", "MB/s") for value in VALUES]


@pytest.mark.parametrize(
    ("value", "unit", "expected"),
    [(183.94, "", "184"), (4707.0, "", "4,707"), (183.94, "MB", "184"), (42.04, "/s", "42"), (0.125, "%", "0.13")],
)
def test_a_servers_figure_is_written_by_its_units_rule(value, unit, expected):
    # the server-metric tables printed 183.94 and 4707.0 as they came
    assert formatting.figure(value, unit) == expected
    shown = Template("{% load server_metrics %}{{ v|figure:unit }}").render(Context({"v": value, "unit": unit}))
    assert shown == expected


@pytest.mark.browser
def test_javascript_twin_writes_server_figures_the_same(browser):
    from django.conf import settings

    page = browser.new_page()
    page.set_content("<html><body></body></html>")
    page.add_script_tag(content=(settings.BASE_DIR / "static" / "js" / "format.js").read_text())
    in_js = page.evaluate("cases => cases.map(([v, u]) => window.PlimsollFormat.figure(v, u))", FIGURE_CASES)
    page.close()
    assert in_js == [formatting.figure(v, u) for v, u in FIGURE_CASES]
