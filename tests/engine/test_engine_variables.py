"""Substitution of {{variables}} and extraction of values from responses (workers/engine/variables.py)."""

import json
from urllib.parse import parse_qs

import pytest
from multidict import CIMultiDict, CIMultiDictProxy

from workers.engine import safejson
from workers.engine.variables import (
    ExtractionError,
    Extractor,
    MissingVariable,
    Page,
    VariableError,
    body_needs_json_check,
    check_json_body,
    compile_template,
    form_field,
    json_body_problem,
    parse_jsonpath,
    placeholders,
)

# -- templates ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["path", "header", "raw", "form", "json"])
def test_a_text_without_placeholders_compiles_to_nothing(kind):
    assert compile_template("/search?q=x", kind) is None
    assert compile_template("{{ not a name }} {{1x}} {x}", kind) is None  # not placeholders: literal text


def test_raw_inserts_values_as_they_are():
    t = compile_template("user={{user}}&pass={{ pass }}&again={{user}}", "raw")

    assert t.names == ("user", "pass")
    assert t.render({"user": "a b&c", "pass": "p%"}) == "user=a b&c&pass=p%&again=a b&c"


def test_form_url_encodes_each_value():
    t = compile_template("username={{u}}&password={{p}}&csrfmiddlewaretoken={{csrf}}", "form")

    body = t.render({"u": "a b&c=d", "p": "ü/+", "csrf": "tok"})

    assert body == "username=a+b%26c%3Dd&password=%C3%BC%2F%2B&csrfmiddlewaretoken=tok"
    assert parse_qs(body) == {"username": ["a b&c=d"], "password": ["ü/+"], "csrfmiddlewaretoken": ["tok"]}


def test_json_escapes_values_inside_strings():
    text = '{"name": "{{name}}", "note": "says: {{name}}!", "n": 1}'
    t = compile_template(text, "json")

    body = t.render({"name": 'a "quoted"\nline \\ é'})

    assert json.loads(body) == {"name": 'a "quoted"\nline \\ é', "note": 'says: a "quoted"\nline \\ é!', "n": 1}
    assert not body_needs_json_check(text)


def test_json_inserts_values_outside_strings_as_they_are_and_the_body_must_stay_json():
    text = '{"id": {{id}}, "tags": {{tags}}, "label": "{{id}}"}'
    t = compile_template(text, "json")
    assert body_needs_json_check(text)

    good = t.render({"id": "42", "tags": '["a", "b"]'})
    check_json_body(good, t)
    assert json.loads(good) == {"id": 42, "tags": ["a", "b"], "label": "42"}

    bad = t.render({"id": "abc", "tags": "[]"})
    with pytest.raises(VariableError, match=r"^the JSON body is not valid after substituting \{\{id\}\}, \{\{tags\}\}"):
        check_json_body(bad, t)


def test_a_string_with_an_escaped_quote_does_not_confuse_the_json_scanner():
    text = r'{"a": "x\"{{v}}", "b": {{n}}}'
    t = compile_template(text, "json")

    assert json.loads(t.render({"v": '"', "n": "1"})) == {"a": 'x""', "b": 1}


def test_path_encodes_what_a_url_cannot_carry_but_keeps_its_delimiters():
    t = compile_template("/search?q={{q}}&next={{next}}", "path")

    assert t.render({"q": "a b#c é", "next": "/articles/1?x=1&y=%20"}) == (
        "/search?q=a%20b%23c%20%C3%A9&next=/articles/1?x=1&y=%20"
    )


def test_header_values_lose_line_breaks():
    t = compile_template("Bearer {{token}}", "header")

    assert t.render({"token": "abc\r\nX-Evil: 1"}) == "Bearer abc  X-Evil: 1"


def test_an_unknown_name_raises_missing_variable():
    t = compile_template("/a/{{known}}/{{csrf}}", "path")

    with pytest.raises(MissingVariable) as excinfo:
        t.render({"known": "1"})

    assert excinfo.value.name == "csrf"


def test_placeholders_lists_names_in_order():
    assert placeholders("{{a}}-{{ b }}-{{a}}") == ["a", "b", "a"]
    assert placeholders("nothing") == []


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ('{"user": "{{u}}", "n": [1, 2]}', None),
        ("", None),  # no body
        ('{"id": {{id}}}', None),  # depends on the value: checked after substitution
        ('{"user": "{{u}}",}', "not valid JSON"),
        ('{"user": {{u}"}', "not valid JSON"),  # {{u} is no placeholder: plain (bad) JSON
        ("name=x", "not valid JSON"),
        ("name={{u}}", None),  # a placeholder outside a string: only its value can tell, at run time
    ],
)
def test_json_body_problem(body, problem):
    result = json_body_problem(body)

    if problem is None:
        assert result is None
    else:
        assert result.startswith(problem)


# -- JSONPath ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "steps"),
    [
        ("$", ()),
        ("$.a", ("a",)),
        ("$.items[0].id", ("items", 0, "id")),
        ("$.items[-1]", ("items", -1)),
        ("$['a b'].c", ("a b", "c")),
        ('$["it\'s"][ 2 ]', ("it's", 2)),
        (r"$['it\'s']", ("it's",)),
        ("$.données.x_1", ("données", "x_1")),
    ],
)
def test_jsonpath_parses_the_subset(expression, steps):
    assert parse_jsonpath(expression) == steps


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("a.b", "must start with '$'"),
        ("$..a", "recursive descent"),
        ("$.a[*]", "expected [number] or ['name'] at position 3"),
        ("$.*", "wildcards are not supported"),
        ("$.a[", "expected [number] or ['name']"),
        ("$.a[1:2]", "expected [number] or ['name']"),
        ("$a", "unexpected 'a' at position 1"),
        ("$.", "expected a name after '.'"),
        ("$['a]", "expected [number] or ['name']"),
    ],
)
def test_jsonpath_refuses_the_rest(expression, message):
    with pytest.raises(ValueError, match=None) as excinfo:
        parse_jsonpath(expression)

    assert message in str(excinfo.value)


# -- extraction -------------------------------------------------------------------------------------------------


def page(body, headers=None):
    return Page(body.encode() if isinstance(body, str) else body, headers or {"Content-Type": "text/html"})


def extract(source, expression, body="", headers=None, name="v"):
    return Extractor(name, source, expression).extract(page(body, headers))


def test_regex_takes_the_first_group_or_the_whole_match():
    html = '<a href="/articles/12">x</a> <a href="/articles/34">y</a>'

    assert extract("regex", r'href="(/articles/\d+)"', html) == "/articles/12"
    assert extract("regex", r"/articles/\d+", html) == "/articles/12"
    assert extract("regex", r"(?P<id>\d+)\">y", html) == "34"


def test_regex_failures_name_the_variable_and_the_source():
    with pytest.raises(ExtractionError, match=r"^\{\{next\}\} \(regex\): regex 'href=\"\(/x\)\"' found no match$"):
        extract("regex", 'href="(/x)"', "<a href='/y'>", name="next")
    with pytest.raises(ExtractionError, match="matched, but not its group 1"):
        extract("regex", r"(a)?b", "b")


def test_json_extraction_walks_the_path():
    body = json.dumps({"items": [{"id": 7, "name": "x"}, {"id": 8}], "a b": {"ok": True}, "none": None, "s": "text"})

    assert extract("json", "$.items[0].id", body) == "7"
    assert extract("json", "$.items[-1].id", body) == "8"
    assert extract("json", "$.items[1]", body) == '{"id":8}'
    assert extract("json", "$['a b'].ok", body) == "true"
    assert extract("json", "$.none", body) == "null"
    assert extract("json", "$.s", body) == "text"
    assert extract("json", "$.items.0.name", body) == "x"  # a digit name indexes a list too


@pytest.mark.parametrize(
    ("expression", "body", "message"),
    [
        ("$.items[0].id", "<html>", r"\(json\): the body is not JSON \(Expecting value"),
        ("$.items[2].id", '{"items": [1, 2]}', r"\$\.items\[2\]\.id not found: \$\.items has 2 items, no \[2\]"),
        ("$.item.id", '{"items": []}', r"not found: \$ has no key 'item'"),
        ("$.items.id", '{"items": []}', r"not found: \$\.items is a list, not an object with 'id'"),
        ("$.n.id", '{"n": 5}', r"not found: \$\.n is a number, not a list or an object"),
    ],
)
def test_json_extraction_failures(expression, body, message):
    with pytest.raises(ExtractionError, match=message):
        extract("json", expression, body)


@pytest.mark.parametrize(
    "tag",
    [
        '<input type="hidden" name="csrfmiddlewaretoken" value="tok&amp;1">',
        "<input value='tok&amp;1' name='csrfmiddlewaretoken' type=hidden>",
        "<INPUT NAME=csrfmiddlewaretoken VALUE=tok&amp;1 />",
        '<input\n  data-x="a > b"\n  name = "csrfmiddlewaretoken"\n  value="tok&#38;1"\n>',
    ],
)
def test_form_field_reads_the_value_in_any_attribute_order_and_quoting(tag):
    html = f'<form><input name="username" value="someone">{tag}<input name="csrfmiddlewaretoken2" value="no"></form>'

    assert extract("form_field", "csrfmiddlewaretoken", html) == "tok&1"


def test_form_field_edge_cases():
    assert form_field('<input name="a">', "a") == ""  # no value attribute: an empty field
    assert form_field('<input name="a" value="1"><input name="a" value="2">', "a") == "1"  # the first one
    assert form_field('<input name="b" value="1">', "a") is None
    assert form_field('<textarea name="a">x</textarea>', "a") is None  # inputs only
    assert form_field('<input name="a&amp;b" value="3">', "a&b") == "3"  # an entity-encoded name

    with pytest.raises(ExtractionError, match=r'^\{\{csrf\}\} \(form_field\): no <input name="csrf"> in the page$'):
        extract("form_field", "csrf", "<form></form>", name="csrf")


def test_header_extraction_is_case_insensitive():
    proxy = CIMultiDictProxy(CIMultiDict({"Location": "/next", "X-Token": "abc"}))

    assert extract("header", "location", headers=proxy) == "/next"
    assert extract("header", "x-token", headers={"X-Token": "abc"}) == "abc"  # a plain dict too
    with pytest.raises(ExtractionError, match=r"^\{\{loc\}\} \(header\): no Location header in the response$"):
        extract("header", "Location", headers={"Content-Type": "text/html"}, name="loc")


def test_a_page_decodes_its_text_once_in_its_charset():
    p = Page("café".encode("latin-1"), {"Content-Type": "text/html; charset=ISO-8859-1"})

    assert p.text == "café"
    assert p.text is p.text
    assert Page(b"caf\xff", {"Content-Type": "text/html; charset=nonsense"}).text == "caf\ufffd"


def test_an_unknown_source_is_refused():
    with pytest.raises(ValueError, match="unknown extraction source"):
        Extractor("v", "xpath", "//a")


# Issue 28 item 16: JSON nested deeper than Python's decoder follows is malformed JSON here, not a RecursionError.
DEEP = "[" * 5000 + "]" * 5000


def test_a_json_body_nested_too_deep_is_a_problem_not_a_crash():
    assert "nested too deep" in json_body_problem('{"a": ' * 1200 + '"{{x}}"' + "}" * 1200)
    with pytest.raises(VariableError, match="nested too deep"):
        check_json_body(DEEP, compile_template('{"a": {{a}}}', "json"))


def test_a_response_nested_too_deep_fails_its_json_check_as_not_json():
    page = Page(DEEP.encode(), {"Content-Type": "application/json"})
    with pytest.raises(ValueError, match="nested too deep"):
        page.json()


def test_the_api_depth_limit_refuses_what_parses_but_nests_past_it():
    assert safejson.loads("[" * 64 + "]" * 64, max_depth=64) == json.loads("[" * 64 + "]" * 64)
    with pytest.raises(safejson.TooDeep, match="more than 64 levels"):
        safejson.loads("[" * 65 + "]" * 65, max_depth=64)
