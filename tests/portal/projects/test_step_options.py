"""The step editor's options: body type, timeout, maximum duration, extractions, resources and ``{{names}}``."""

import pytest
from django.urls import reverse
from django.utils.html import escape

from portal.projects.models import DataSet, Step
from workers.engine.plan import Plan as EnginePlan

from .data import HTMX, step_data

pytestmark = pytest.mark.django_db


@pytest.fixture
def home(test_case):
    """The first step extracts a CSRF token and a link, as a log-in page would offer them."""
    step = test_case.steps.get(position=0)
    step.extract = [
        {"name": "csrf", "source": "form_field", "expression": "csrfmiddlewaretoken"},
        {"name": "next", "source": "regex", "expression": 'href="(/articles/\\d+)"'},
    ]
    step.save()
    return step


def _add(client, test_case, **fields):
    return client.post(reverse("projects:step-new", args=[test_case.code]), step_data(**fields))


def test_add_step_with_every_option(alice_client, test_case, home):
    # when
    response = _add(
        alice_client,
        test_case,
        name="Log in",
        method="POST",
        path="/go?to={{next}}",
        headers_text="X-CSRFToken: {{csrf}}",
        body_type="json",
        body='{"user": "alice", "token": "{{csrf}}"}',
        timeout="5",
        max_duration_ms="2000",
        extract_text="id = json: $.items[0].id\n\nloc = header: Location\nwelcome = regex: Welcome (\\w+)",
        resources_text="/static/site.css\n  /img/logo.png  \n/static/app.js",
    )
    # then
    assert response.status_code == 302
    step = test_case.steps.get(name="Log in")
    assert (step.body_type, step.timeout, step.max_duration_ms) == ("json", 5.0, 2000)
    assert step.extract == [
        {"name": "id", "source": "json", "expression": "$.items[0].id"},
        {"name": "loc", "source": "header", "expression": "Location"},
        {"name": "welcome", "source": "regex", "expression": "Welcome (\\w+)"},
    ]
    assert step.resources == ["/static/site.css", "/img/logo.png", "/static/app.js"]
    assert step.headers == {"X-CSRFToken": "{{csrf}}"}


def test_steps_list_shows_extractions_and_resources_compactly(alice_client, test_case, home):
    # given
    home.resources = ["/a.css", "/b.js", "/c.png"]
    home.body_type, home.body, home.timeout, home.max_duration_ms = "form", "a=1", 5, 800
    home.save()
    # when
    page = alice_client.get(reverse("projects:testcase", args=[test_case.code])).content.decode()
    # then
    assert "→ <code>csrf</code> (form field)" in page
    assert "→ <code>next</code> (regex)" in page
    assert "+ 3 resources" in page
    assert "with a form body" in page
    assert "timeout 5.0 s" in page
    assert "at most 800 ms" in page


def test_edit_form_shows_extractions_and_resources_one_per_line(alice_client, home):
    # given
    home.resources = ["/a.css", "/b.js"]
    home.save()
    # when
    page = alice_client.get(reverse("projects:step-edit", args=[home.code]), **HTMX).content.decode()
    # then
    assert "csrf = form_field: csrfmiddlewaretoken\nnext = regex: href=&quot;(/articles/\\d+)&quot;" in page
    assert "/a.css\n/b.js</textarea>" in page


def test_extraction_sources_may_be_written_in_words(alice_client, test_case):
    # when
    response = _add(alice_client, test_case, extract_text="token = Form Field: csrf")
    # then
    assert response.status_code == 302
    assert test_case.steps.get(name="Search").extract == [
        {"name": "token", "source": "form_field", "expression": "csrf"}
    ]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"extract_text": "no equals sign"},
            "line 1: expected name = source: expression, e.g. csrf = form_field: csrfmiddlewaretoken",
        ),
        (
            {"extract_text": "\n1abc = regex: x"},
            "line 2: “1abc” is not a valid variable name (use letters, digits and _, not starting with a digit)",
        ),
        (
            {"extract_text": "csrf = xpath: //input"},
            "line 1: the source must be one of regex, json, form_field, header, not “xpath”",
        ),
        (
            {"extract_text": "a = regex: (unclosed"},
            "line 1: the regex does not compile: missing ), unterminated subpattern at position 0",
        ),
        (
            {"extract_text": "id = json: items[0].id"},
            "line 1: a JSON path starts with $, e.g. $.items[0].id (not “items[0].id”)",
        ),
        (
            {"extract_text": "id = json: $.items[?(@.x)]"},
            "line 1: “$.items[?(@.x)]” is not a JSON path the engine reads",
        ),
        ({"extract_text": "loc = header: Content Type"}, "line 1: “Content Type” is not a valid header name"),
        ({"extract_text": "a = regex: x\na = json: $.a"}, "line 2: a is already extracted on line 1"),
        ({"extract_text": "a = regex:   "}, "line 1: give the regex to extract after the colon"),
        (
            {"resources_text": "/ok.css\nstatic/site.css"},
            "line 2: “static/site.css” must start with /, it is relative to the environment's base URL",
        ),
        ({"resources_text": "/my file.css"}, "line 1: “/my file.css” contains a space; percent-encode it as %20"),
        ({"resources_text": "/a.css\n/a.css"}, "line 2: /a.css is listed twice (first on line 1)"),
        ({"timeout": "0"}, "Ensure this value is greater than or equal to 0.1."),
        ({"timeout": "601"}, "Ensure this value is less than or equal to 600."),
        ({"max_duration_ms": "0"}, "Ensure this value is greater than or equal to 1."),
        ({"body_type": "xml"}, "Select a valid choice. xml is not one of the available choices."),
        (
            {"body_type": "json", "body": '{"user": "{{username}}", }', "path": "/"},
            "Not valid JSON once each {{…}} is replaced by a dummy text: not valid JSON (Expecting property name "
            "enclosed in double quotes: line 1 column 15 (char 14))",
        ),
        (
            {"path": "/search?q={{term}}"},
            "{{term}} is not extracted by an earlier step nor a column of the data set",
        ),
        (
            {"headers_text": "Accept: text/html\nX-Token: {{ token }}"},
            "{{token}} is not extracted by an earlier step nor a column of the data set",
        ),
        (
            {"body_type": "form", "body": "user={{username}}"},
            "{{username}} is not extracted by an earlier step nor a column of the data set",
        ),
        (
            {"path": "/a?c={{code}}", "extract_text": "code = regex: c=(\\d+)"},
            "{{code}} is extracted by this step itself, from its response: only later steps can use it",
        ),
    ],
)
def test_bad_step_option_is_refused_with_a_message(alice_client, test_case, fields, message):
    # when
    response = _add(alice_client, test_case, **fields)
    # then
    assert response.status_code == 200
    assert escape(message) in response.content.decode()
    assert test_case.steps.count() == 2


def test_error_is_shown_next_to_its_field(alice_client, test_case):
    # when
    response = _add(alice_client, test_case, path="/search?q={{term}}", **HTMX)
    # then
    form = response.context["form"]
    assert form.errors == {"path": ["{{term}} is not extracted by an earlier step nor a column of the data set"]}


@pytest.mark.parametrize(
    "fields",
    [
        {"path": "/go?to={{next}}", "headers_text": "X-CSRFToken: {{csrf}}"},
        {"body_type": "form", "body": "csrfmiddlewaretoken={{ csrf }}&q=x"},
        {"body_type": "json", "body": '{"token": "{{csrf}}"}'},
        # Outside a JSON string a value is inserted as it is; the engine checks such a body when it sends it.
        {"body_type": "json", "body": '{"article": {{next}}}'},
        {"body_type": "json", "body": ""},
        # Not a placeholder for the engine either (a digit first): sent as it is.
        {"body": "{{1st}}"},
    ],
)
def test_placeholders_of_earlier_extractions_are_accepted(alice_client, test_case, home, fields):
    # when
    response = _add(alice_client, test_case, **fields)
    # then
    assert response.status_code == 302, response.context["form"].errors


def test_data_set_columns_are_variables(alice_client, test_case):
    # given
    DataSet.objects.create(test_case=test_case, file_name="u.csv", columns=["username", "password"], rows=[["a", "b"]])
    # when
    response = _add(
        alice_client, test_case, method="POST", path="/login", body_type="form", body="u={{username}}&p={{password}}"
    )
    # then
    assert response.status_code == 302


def test_a_step_may_use_only_what_earlier_steps_extract(alice_client, test_case, home):
    # given: the second step extracts "article"
    articles = test_case.steps.get(position=1)
    articles.extract = [{"name": "article", "source": "regex", "expression": "/articles/(\\d+)"}]
    articles.save()
    # when: the first step is changed to use it, and the second to use the first's
    first = alice_client.post(
        reverse("projects:step-edit", args=[home.code]), step_data(name="Home", path="/a/{{article}}")
    )
    second = alice_client.post(
        reverse("projects:step-edit", args=[articles.code]), step_data(name="Articles", path="/a?t={{csrf}}")
    )
    # then
    assert escape("{{article}} is not extracted by an earlier step nor a column of the data set") in (
        first.content.decode()
    )
    assert second.status_code == 302


def test_editing_a_step_keeps_its_own_extractions_for_later_steps(alice_client, test_case, home):
    # given: the second step uses the first's csrf
    Step.objects.filter(test_case=test_case, position=1).update(path="/a?t={{csrf}}")
    # when: the first step is saved again, still extracting it
    response = alice_client.post(
        reverse("projects:step-edit", args=[home.code]),
        step_data(name="Home", path="/", extract_text="csrf = form_field: csrfmiddlewaretoken"),
    )
    # then
    assert response.status_code == 302
    assert test_case.placeholder_problems() == []


def test_moving_a_user_above_its_extractor_is_a_problem_for_its_plans(alice_client, test_case, home, plan):
    # given
    articles = test_case.steps.get(position=1)
    articles.path = "/a?t={{csrf}}"
    articles.save()
    # when
    alice_client.post(reverse("projects:step-move", args=[articles.code, "up"]))
    # then
    problem = (
        "Step 1 “Articles” of “Browse” uses {{csrf}}, which no earlier step extracts and no data-set column provides."
    )
    assert test_case.placeholder_problems() == [problem]
    assert problem in plan.problems()
    testcase_page = alice_client.get(reverse("projects:testcase", args=[test_case.code])).content.decode()
    plan_page = alice_client.get(reverse("projects:plan", args=[plan.code])).content.decode()
    assert escape(problem) in testcase_page
    assert escape(problem) in plan_page
    assert 'class="run-button" disabled' in plan_page


def test_plain_step_sends_only_the_keys_older_engines_know(step):
    # then
    assert set(step.to_engine_dict()) == {
        "name",
        "method",
        "path",
        "headers",
        "body",
        "think_time",
        "expect_status",
        "text_present",
        "text_absent",
    }


def test_step_with_options_sends_them(home):
    # given
    home.body_type, home.body, home.timeout, home.max_duration_ms = "json", '{"a": 1}', 2.5, 1500
    home.resources = ["/a.css"]
    home.save()
    # when
    d = home.to_engine_dict()
    # then
    assert (d["body_type"], d["timeout"], d["max_duration_ms"], d["resources"]) == ("json", 2.5, 1500, ["/a.css"])
    assert d["extract"] == home.extract


def test_engine_accepts_a_plan_with_extractions_resources_and_a_data_set(plan, test_case, home):
    # given
    DataSet.objects.create(
        test_case=test_case, file_name="u.csv", columns=["username"], rows=[["a"], ["b"]], row_count=2, mode="unique"
    )
    articles = test_case.steps.get(position=1)
    articles.path, articles.body_type, articles.body = "/go?to={{next}}&u={{username}}", "json", '{"t": "{{csrf}}"}'
    articles.timeout, articles.max_duration_ms, articles.resources = 3, 900, ["/s.css", "/i.png"]
    articles.save()
    # when
    engine_plan = EnginePlan.from_dict(plan.to_engine_dict())
    # then
    case = engine_plan.test_cases[0]
    assert case.data_set.columns == ("username",)
    assert case.data_set.mode == "unique"
    assert [e.name for e in case.steps[0].extract] == ["csrf", "next"]
    assert case.steps[1].resources == ("/s.css", "/i.png")
    assert (case.steps[1].body_type, case.steps[1].timeout, case.steps[1].max_duration_ms) == ("json", 3.0, 900)
