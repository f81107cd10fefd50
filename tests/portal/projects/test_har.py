"""The HAR analysis as plain functions (portal/projects/har/): no database, no Django.

Each test builds a small HAR the way Chromium writes one (``_resourceType``, ``redirectURL``,
text bodies) and checks one rule of the preview. The recording of a real browser session
is imported in test_har_import.py.
"""

import base64
import json
import re

import pytest

from portal.projects import har
from workers.engine.plan import Plan

SITE = "http://127.0.0.1:8001"
T0 = 1_790_000_000.0


def entry(
    url,
    *,
    t=0.0,
    method="GET",
    status=200,
    kind="document",
    headers=(),
    body=None,
    mime="text/html",
    text="",
    location="",
    post_mime="application/x-www-form-urlencoded",
    time_ms=10,
    encoding=None,
):
    from datetime import UTC, datetime

    request = {"method": method, "url": url, "headers": [{"name": k, "value": v} for k, v in headers]}
    if body is not None:
        request["postData"] = {"mimeType": post_mime, "text": body}
    content = {"mimeType": mime, "text": text, "size": len(text)}
    if encoding:
        content["encoding"] = encoding
    response_headers = [{"name": "Location", "value": location}] if location else []
    return {
        "startedDateTime": datetime.fromtimestamp(T0 + t, UTC).isoformat().replace("+00:00", "Z"),
        "time": time_ms,
        "request": request,
        "response": {"status": status, "headers": response_headers, "content": content, "redirectURL": location},
        "_resourceType": kind,
    }


def har_bytes(*entries, pages=None):
    log = {"version": "1.2", "creator": {"name": "test"}, "entries": list(entries)}
    if pages is not None:
        log["pages"] = pages
    return json.dumps({"log": log}).encode()


def allow_loopback(url):
    return None if "127.0.0.1" in url else "outside the allowed targets"


def preview(*entries, choices=None):
    return har.analyze(har.load(har_bytes(*entries)), allowed=allow_loopback, choices=choices)


def engine_check(p: har.Preview) -> None:
    """The steps are a test case the engine accepts."""
    Plan.from_dict(
        {"base_url": SITE, "test_cases": [{"name": "t", "steps": p.step_fields()}], "profile": {"users": 1, "hold": 1}}
    )


LOGIN_FORM = '<form method="post"><input type="hidden" name="csrfmiddlewaretoken" value="tok3nABCDEF123456">'


def login_journey():
    return (
        entry(f"{SITE}/login", t=0, text=LOGIN_FORM),
        entry(
            f"{SITE}/login",
            t=2.5,
            method="POST",
            status=302,
            location="/account",
            headers=[("Cookie", "sid=abc"), ("Content-Type", "application/x-www-form-urlencoded"), ("X-Client", "web")],
            body="csrfmiddlewaretoken=tok3nABCDEF123456&username=demo&password=s3cret",
        ),
        entry(f"{SITE}/account", t=2.6, text="<p>Hello demo</p>"),
        entry(f"{SITE}/static/site.css", t=2.7, kind="stylesheet", mime="text/css"),
    )


def test_pages_redirects_resources_and_think_times():
    p = preview(*login_journey())
    assert [s.path for s in p.steps] == ["/login", "/login"]
    form, post = p.steps
    assert form.think_time == 2.5  # from the end of the form page (10 ms) to the post: rounded to 0.1 s
    assert post.notes[0].startswith("follows the redirect to /account")
    assert post.expect_status == 200  # the final response, after the redirect the engine follows
    assert post.resources == ["/static/site.css"]
    engine_check(p)


def test_hidden_csrf_token_is_correlated_and_the_password_is_a_variable():
    p = preview(*login_journey())
    (c,) = p.correlations
    assert (c.name, c.source, c.expression, c.step, c.uses) == (
        "csrfmiddlewaretoken",
        "form_field",
        "csrfmiddlewaretoken",
        0,
        [1],
    )
    assert p.steps[0].extract == [
        {"name": "csrfmiddlewaretoken", "source": "form_field", "expression": "csrfmiddlewaretoken"}
    ]
    assert p.steps[1].body == "csrfmiddlewaretoken={{csrfmiddlewaretoken}}&username=demo&password={{password}}"
    assert "s3cret" not in json.dumps(p.step_fields())
    assert p.variables_needed() == ["password"]


def test_rejected_correlation_and_kept_password_and_chosen_variable():
    rejected = preview(
        *login_journey(), choices=har.Choices(rejected={"csrfmiddlewaretoken"}, keep_fields={"password"})
    )
    assert rejected.steps[0].extract == []
    assert rejected.steps[1].body == "csrfmiddlewaretoken=tok3nABCDEF123456&username=demo&password=s3cret"
    assert rejected.correlations[0].accepted is False
    chosen = preview(*login_journey(), choices=har.Choices(variables={"password": "pwd_column"}))
    assert chosen.steps[1].body.endswith("password={{pwd_column}}")


def test_the_logins_user_name_can_become_a_variable_too():
    p = preview(*login_journey())
    assert [(f.field, f.kept, f.secret) for f in p.secret_fields] == [
        ("username", True, False),
        ("password", False, True),
    ]
    varied = preview(*login_journey(), choices=har.Choices(vary_fields={"username"}, variables={"username": "user"}))
    assert varied.steps[1].body.endswith("username={{user}}&password={{password}}")
    assert varied.variables_needed() == ["user", "password"]
    json_login = preview(
        entry(
            f"{SITE}/api/login",
            method="POST",
            kind="fetch",
            post_mime="application/json",
            body=json.dumps({"email": "a@b.c", "pwd": "x", "remember": True}),
        ),
        choices=har.Choices(vary_fields={"email"}),
    )
    assert json.loads(json_login.steps[0].body) == {"email": "{{email}}", "pwd": "{{pwd}}", "remember": True}


def test_a_page_the_browser_had_cached_expects_any_success():
    p = preview(entry(f"{SITE}/", status=304, headers=[("If-None-Match", '"abc"')]))
    assert p.steps[0].expect_status is None and p.steps[0].headers == {}
    assert "304 Not Modified" in p.steps[0].notes[0]


def test_headers_each_with_its_rule_and_secrets_dropped_unless_kept():
    p = preview(*login_journey())
    rules = {r.name: (r.kept, r.rule) for r in p.steps[1].header_rules}
    assert rules["Cookie"] == (False, har.RULE_SECRET)
    assert rules["Content-Type"] == (False, har.RULE_BODY_TYPE)
    assert rules["X-Client"] == (True, har.RULE_KEPT)
    assert p.steps[1].headers == {"X-Client": "web"}
    kept = preview(*login_journey(), choices=har.Choices(keep_headers={"cookie"}))
    assert kept.steps[1].headers == {"Cookie": "sid=abc", "X-Client": "web"}


def test_hosts_outside_the_allowlist_and_third_party_noise_are_dropped_with_the_reason():
    p = preview(
        entry(f"{SITE}/", t=0),
        entry("https://www.google-analytics.com/collect?v=1", t=0.1, kind="xhr", method="POST", body="x"),
        entry("https://fonts.gstatic.com/s/roboto.woff2", t=0.1, kind="font", mime="font/woff2"),
        entry("https://cdn.example.com/lib.js", t=0.1, kind="script", mime="application/javascript"),
        entry("http://127.0.0.1:9000/other", t=0.2, kind="xhr"),
    )
    hosts = {h.host: (h.kept, h.reason) for h in p.hosts}
    assert hosts["127.0.0.1:8001"][0] is True
    assert hosts["www.google-analytics.com"] == (False, "third-party noise: analytics")
    assert hosts["fonts.gstatic.com"] == (False, "third-party noise: third-party fonts")
    assert hosts["cdn.example.com"] == (False, "outside the allowed targets")
    assert hosts["127.0.0.1:9000"][1].startswith("another site than 127.0.0.1:8001")
    assert [s.path for s in p.steps] == ["/"] and p.steps[0].resources == []


def test_json_id_and_location_correlations():
    p = preview(
        entry(
            f"{SITE}/api/orders",
            t=0,
            method="POST",
            status=201,
            kind="fetch",
            mime="application/json",
            text=json.dumps({"order": {"id": 48213, "state": "new"}}),
            location="/api/orders/48213",
            post_mime="application/json",
            body='{"item": "book"}',
        ),
        entry(
            f"{SITE}/api/orders/48213/pay",
            t=1,
            method="POST",
            kind="fetch",
            mime="application/json",
            text="{}",
            post_mime="application/json",
            body=json.dumps({"order": 48213}),
        ),
    )
    (c,) = p.correlations
    assert (c.source, c.expression, c.name, c.uses) == ("json", "$.order.id", "id", [1])
    assert p.steps[1].path == "/api/orders/{{id}}/pay"
    assert json.loads(p.steps[1].body.replace("{{id}}", "7")) == {"order": "7"}
    engine_check(p)
    only_location = preview(
        entry(
            f"{SITE}/upload",
            t=0,
            method="POST",
            status=201,
            kind="fetch",
            location="/documents/d-77aa",
            mime="text/plain",
            text="ok",
            post_mime="text/plain",
            body="hello",
        ),
        entry(f"{SITE}/documents/d-77aa", t=1),
    )
    (c,) = only_location.correlations
    assert (c.source, c.expression) == ("header", "Location")
    assert only_location.steps[1].path == "{{location}}"


def test_token_in_a_url_found_in_an_earlier_page():
    p = preview(
        entry(f"{SITE}/reports", t=0, text='<a href="/reports/view?token=a8Zk29QpL0x">Q3</a>'),
        entry(f"{SITE}/reports/view?token=a8Zk29QpL0x", t=1),
    )
    (c,) = p.correlations
    assert (c.source, c.kind) == ("regex", "token in a URL")
    assert p.steps[1].path == "/reports/view?token={{token}}"
    import re

    assert re.search(c.expression, p.steps[0].final.response_text).group(1) == "a8Zk29QpL0x"


def test_an_echo_of_what_the_client_sent_is_not_a_correlation():
    p = preview(
        entry(f"{SITE}/search?q=Report2024", t=0, text='<input type="hidden" name="q" value="Report2024">'),
        entry(f"{SITE}/search?q=Report2024&page=2", t=1),
    )
    assert p.correlations == []


def test_large_binary_bodies_are_dropped_with_a_note_small_text_kept():
    big = base64.b64encode(b"\x00" * 200_000).decode()
    raw = har_bytes(
        entry(f"{SITE}/", t=0),
        entry(f"{SITE}/documents", t=1, method="POST", body=big, post_mime="application/octet-stream"),
    )
    doc = json.loads(raw)
    doc["log"]["entries"][1]["request"]["postData"]["encoding"] = "base64"
    p = har.analyze(har.load(json.dumps(doc).encode()), allowed=allow_loopback)
    assert p.steps[1].body == "" and "binary body was dropped" in p.steps[1].notes[0]
    small = preview(entry(f"{SITE}/note", method="POST", body="hello", post_mime="text/plain"))
    assert small.steps[0].body == "hello" and small.steps[0].body_type == "raw"


def test_bodies_nested_too_deep_are_kept_as_raw_text_not_a_crash():
    """Issue 28 item 16: JSON inside a HAR nested deeper than the decoder follows, in a request or a response."""
    deep = "[" * 5000 + "]" * 5000
    p = preview(
        entry(f"{SITE}/api/items", t=0, mime="application/json", text=deep),
        entry(f"{SITE}/api/items", t=1, method="POST", body=deep, post_mime="application/json"),
    )
    assert p.steps[1].body == deep and p.steps[1].body_type == "raw"
    assert p.correlations == []


def test_base64_responses_are_searched_for_correlations():
    page = base64.b64encode(LOGIN_FORM.encode()).decode()
    p = preview(
        entry(f"{SITE}/login", t=0, text=page, encoding="base64"),
        entry(f"{SITE}/login", t=1, method="POST", body="csrfmiddlewaretoken=tok3nABCDEF123456"),
    )
    assert [c.name for c in p.correlations] == ["csrfmiddlewaretoken"]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"", "The file is empty"),
        (b"<html>not json</html>", "The file is not JSON (line 1, column 1"),
        (b"\xff\xfe\x00garbage", "not UTF-8"),
        (b'{"nodes": []}', "This JSON is not a HAR"),
        (b'{"log": {"entries": []}}', "The HAR has no requests"),
        (b'{"log": {"entries": [{"request": {}}]}}', "entry 1 lacks a request method"),
    ],
)
def test_bad_files_are_refused_with_the_reason(raw, message):
    with pytest.raises(har.HarError, match=message.replace("(", r"\(")):
        har.load(raw)


def test_too_large_and_no_allowed_host():
    with pytest.raises(har.HarError, match=r"The file is 0.0 MB; the limit is 0 MB"):
        har.load(b"{}" * 10, max_bytes=5)
    entries = har.load(har_bytes(entry("https://shop.example.com/", t=0)))
    with pytest.raises(har.HarError, match="None of the recorded hosts is an allowed target"):
        har.analyze(entries, allowed=allow_loopback)


def test_pages_without_resource_types_use_html_documents():
    first = entry(f"{SITE}/", t=0, headers=[("Accept", "text/html")])
    css = entry(f"{SITE}/site.css", t=0.1, mime="text/css", headers=[("Accept", "text/css")])
    second = entry(f"{SITE}/articles", t=2, headers=[("Accept", "text/html,*/*")])
    for e in (first, css, second):
        del e["_resourceType"]
    p = preview(first, css, second)
    assert [(s.path, s.resources) for s in p.steps] == [("/", ["/site.css"]), ("/articles", [])]


def test_any_field_of_the_wrong_shape_is_a_har_error_never_a_crash():
    import copy
    import random

    base = json.loads(har_bytes(*login_journey()))
    junk = [None, 1, -1, 1e308, "x", "", [], {}, [1, "a"], {"a": 1}, True, "2026-13-45", "\x00"]

    def paths(d, p=()):
        yield p
        items = d.items() if isinstance(d, dict) else enumerate(d) if isinstance(d, list) else ()
        for k, v in items:
            yield from paths(v, (*p, k))

    every = [p for p in paths(base) if p]
    rng = random.Random(18)
    outcomes = {"refused": 0, "imported": 0}
    for _ in range(1500):
        doc = copy.deepcopy(base)
        for p in rng.sample(every, 2):
            target = doc
            try:
                for k in p[:-1]:
                    target = target[k]
                target[p[-1]] = copy.deepcopy(rng.choice(junk))
            except (KeyError, IndexError, TypeError):
                pass  # an earlier change removed the path
        try:
            har.analyze(har.load(json.dumps(doc).encode()), allowed=allow_loopback)
            outcomes["imported"] += 1
        except har.HarError:
            outcomes["refused"] += 1
    assert outcomes["refused"] > 0 and outcomes["imported"] > 0, outcomes


def test_a_long_recording_is_cut_at_the_step_limit_with_a_note():
    entries = [entry(f"{SITE}/page/{i}", t=i) for i in range(har.MAX_STEPS + 5)]
    p = preview(*entries)
    assert len(p.steps) == har.MAX_STEPS
    assert p.notes == [f"The recording has {har.MAX_STEPS + 5} pages; the first {har.MAX_STEPS} are imported."]


def test_a_method_a_step_cannot_send_is_left_out_with_a_note():
    p = preview(entry(f"{SITE}/", t=0), entry(f"{SITE}/dav", t=1, method="PROPFIND"))
    assert [s.path for s in p.steps] == ["/"]
    assert p.notes == ["1 request with a method a step cannot send (PROPFIND) left out."]
    with pytest.raises(har.HarError, match="no page of 127.0.0.1:8001 a step can send"):
        preview(entry(f"{SITE}/dav", method="PROPFIND"))


def test_step_names_fit_the_step_model_even_for_long_paths():
    long = "/" + "a" * 300
    entries = [entry(f"{SITE}{long}", t=i, method="OPTIONS") for i in range(3)]
    p = preview(*entries)
    assert [len(s.name) <= 100 for s in p.steps] == [True] * 3
    assert p.steps[2].name.endswith(" (3)") and p.steps[0].name.startswith("OPTIONS /aaa")


class CountingList(list):
    """A list that counts how many times it is walked through."""

    walks = 0

    def __iter__(self):
        self.walks += 1
        return super().__iter__()


@pytest.mark.parametrize("pages", [50, 200])
def test_the_analysis_of_a_recording_without_resource_types_is_linear(pages):
    """Issue 30, item 4: Firefox-style HARs (no _resourceType) were walked whole for each entry (16,000: 18 s)."""
    # given: pages of an HTML document and nine images each, no _resourceType anywhere (as Firefox records)
    raw = []
    for p in range(pages):
        page = entry(f"{SITE}/page/{p}", t=p, kind=None, headers=[("Accept", "text/html,*/*")], text="<p>x</p>")
        raw.append(page)
        raw += [entry(f"{SITE}/img/{p}/{k}.png", t=p + 0.01, kind=None, mime="image/png") for k in range(9)]
    entries = CountingList(har.load(har_bytes(*raw)))

    # when
    preview = har.analyze(entries, allowed=allow_loopback)

    # then: each page found from its document, and the recording walked a fixed number of times, not once per entry
    assert len(preview.steps) == min(pages, har.MAX_STEPS)
    assert entries.walks <= 10, f"{entries.walks} walks through {len(entries)} entries"


def test_json_nested_too_deep_is_refused_with_a_reason():
    with pytest.raises(har.HarError, match="nested too deep"):
        har.load(b"[" * 200_000 + b"]" * 200_000)


def test_the_analysis_of_a_recording_on_many_origins_is_linear():
    """A recording whose requests go to many allowed origins (loopback ports) was walked once per origin."""
    # given: a page, then 300 images each on a loopback port of its own (every one an allowed origin)
    raw = [entry(f"{SITE}/", kind=None, headers=[("Accept", "text/html")], text="<p>x</p>")]
    raw += [entry(f"http://127.0.0.1:{2000 + k}/x.png", t=0.01, kind=None, mime="image/png") for k in range(300)]
    entries = CountingList(har.load(har_bytes(*raw)))

    # when
    preview = har.analyze(entries, allowed=allow_loopback)

    # then: every origin listed, none kept for a WebSocket session, and the entries walked a fixed number of times
    assert len(preview.hosts) == 301 and sum(h.kept for h in preview.hosts) == 1
    assert entries.walks <= 10, f"{entries.walks} walks through {len(entries)} entries"


def test_a_page_of_many_sub_requests_is_grouped_in_linear_time():
    """A page's resources were deduplicated through a list (quadratic: 10,000 sub-requests took seconds)."""
    import dataclasses
    import time

    # given: a document and 10,000 sub-requests of distinct, long paths sharing their first 1,000 characters
    page, image = har.load(har_bytes(entry(f"{SITE}/", kind=None), entry(f"{SITE}/x.png", kind=None)))
    prefix = "/static/" + "a" * 1000
    subs = [dataclasses.replace(image, index=k + 1, url=f"{SITE}{prefix}/{k}.png") for k in range(10_000)]
    subs += subs[:10]  # a path requested twice is one resource

    # when
    started = time.perf_counter()
    step = har._step([page, *subs], har.Choices(), SITE)
    took = time.perf_counter() - started

    # then: the first 100 distinct paths, the rest counted in a note; in well under a second (the list took 3 s)
    assert step.resources == [f"{prefix}/{k}.png" for k in range(100)]
    assert "9900 resources beyond the first 100 dropped" in step.notes
    assert took < 0.5, f"{took:.2f} s"


def test_json_of_too_many_values_is_refused_before_it_is_parsed():
    """Issue 30, item 2 for HARs: 50 MB of "[],[],…" parsed to 1.3 GB; the values are counted first."""
    import tracemalloc

    # given: a valid recording followed by 1.5 MB of empty arrays (500,000 values, each 32 bytes parsed)
    raw = har_bytes(*login_journey())[:-1] + b', "x": [' + b"[]," * 500_000 + b"[]]}"

    # when
    tracemalloc.start()
    try:
        with pytest.raises(har.HarError) as refused:
            har.load(raw, max_values=100_000)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()

    # then: the limit named, and nothing parsed (parsed, the arrays alone take 16 MB)
    assert re.match(r"^The file holds 1,000,\d{3} JSON values, more than 100,000, the limit", str(refused.value))
    assert peak < 2 * len(raw) + (1 << 20), f"peak {peak / (1 << 20):.1f} MB"


def test_marks_inside_strings_are_not_values():
    # given: a recording whose response texts hold 300,000 commas and brackets, and 40 or so values of structure
    text = '{"a": [1, 2], "b": "x"},' * 20_000
    raw = har_bytes(entry(f"{SITE}/", text=text), entry(f"{SITE}/next", t=1, text=text.replace('"', '\\"')))

    # when: fewer values allowed than marks in the bytes, more than the structure's
    entries = har.load(raw, max_values=10_000)

    # then
    assert [e.path for e in entries] == ["/", "/next"]
    assert har._json_values(raw, 10_000) < 200
