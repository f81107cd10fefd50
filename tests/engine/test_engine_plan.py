import copy

import pytest

from workers.engine.plan import Plan, PlanError

PLAN = {
    "base_url": "http://127.0.0.1:8001",
    "test_cases": [
        {
            "name": "Browse",
            "weight": 3,
            "steps": [
                {
                    "name": "Home",
                    "method": "GET",
                    "path": "/",
                    "headers": {"Accept": "text/html"},
                    "body": "",
                    "think_time": 1.0,
                    "expect_status": 200,
                    "text_present": "Welcome",
                    "text_absent": "Traceback",
                },
                {"name": "Search", "path": "/search?q=x"},
            ],
        }
    ],
    "profile": {"users": 20, "ramp_up": 2.0, "hold": 10.0, "ramp_down": 0.0},
    "think_time_mode": "fixed",
    "request_timeout": 30.0,
    "thresholds": {"apd_ms": 1000, "p95_ms": 3000, "error_rate_pct": None},
}


def bad(path_and_value):
    """PLAN with one field changed: ``("test_cases.0.steps.1.method", "FETCH")``."""
    d = copy.deepcopy(PLAN)
    dotted, value = path_and_value
    *parents, last = dotted.split(".")
    node = d
    for key in parents:
        node = node[int(key)] if key.isdigit() else node[key]
    if value is KeyError:
        del node[last]
    else:
        node[int(last) if last.isdigit() else last] = value
    return d


def test_it_parses_a_full_plan_and_fills_defaults():
    plan = Plan.from_dict(PLAN)

    home, search = plan.test_cases[0].steps
    assert plan.test_cases[0].weight == 3
    assert home.headers["Accept"] == "text/html"
    assert search.method == "GET"
    assert search.headers == {}
    assert search.think_time == 0.0
    assert search.expect_status == 200
    assert search.text_present == search.text_absent == ""
    assert plan.url_for(search) == "http://127.0.0.1:8001/search?q=x"
    assert plan.label(plan.test_cases[0], home) == "Browse: Home"
    assert plan.thresholds.apd_ms == 1000
    assert plan.thresholds.error_rate_pct is None


def test_it_round_trips_through_to_dict():
    plan = Plan.from_dict(PLAN)

    assert Plan.from_dict(plan.to_dict()) == plan
    assert plan.to_dict()["test_cases"][0]["steps"][1]["expect_status"] == 200


def test_it_applies_defaults_for_optional_plan_keys():
    d = {"base_url": "http://localhost:8001/", "test_cases": [{"name": "A", "steps": [{"name": "s", "path": "/"}]}]}
    d["profile"] = {"users": 1, "hold": 1}

    plan = Plan.from_dict(d)

    assert plan.base_url == "http://localhost:8001"
    assert plan.think_time_mode == "fixed"
    assert plan.request_timeout == 30.0
    assert plan.test_cases[0].weight == 1
    assert plan.profile.ramp_up == plan.profile.ramp_down == 0.0


def test_expect_status_null_means_any_success():
    plan = Plan.from_dict(bad(("test_cases.0.steps.1.expect_status", None)))

    assert plan.test_cases[0].steps[1].expect_status is None


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("test_cases.0.steps.1.method", "FETCH"), "test_cases[0].steps[1].method: must be one of GET, POST, PUT"),
        (("test_cases.0.steps.0.path", "search"), "test_cases[0].steps[0].path: must start with '/'"),
        (("test_cases.0.weight", 0), "test_cases[0].weight: must be at least 1"),
        (("test_cases.0.weight", 1.5), "test_cases[0].weight: must be an integer"),
        (("test_cases.0.weight", True), "test_cases[0].weight: must be an integer"),
        (("test_cases.0.steps.0.think_time", -1), "test_cases[0].steps[0].think_time: must be at least 0"),
        (("test_cases.0.steps.0.think_time", "1"), "test_cases[0].steps[0].think_time: must be a number"),
        (("test_cases.0.steps.0.expect_status", 99), "test_cases[0].steps[0].expect_status: must be within 100..599"),
        (("test_cases.0.steps.0.headers", ["x"]), "test_cases[0].steps[0].headers: must be an object"),
        (("test_cases.0.steps.0.thinktime", 1), "test_cases[0].steps[0].thinktime: unknown key"),
        (("test_cases.0.steps.0.name", KeyError), "test_cases[0].steps[0].name: is required"),
        (("test_cases.0.steps.1.name", "Home"), "test_cases[0].steps[1].name: duplicate step name 'Home'"),
        (("test_cases.0.steps", []), "test_cases[0].steps: must be a non-empty list"),
        (("test_cases", []), "test_cases: must be a non-empty list"),
        (("base_url", "ftp://example.com"), "base_url: must be an http:// or https:// URL"),
        (("base_url", "http://127.0.0.1:99999"), "base_url: not a valid URL"),
        (("profile.users", 0), "profile.users: must be within 1..1000000"),
        (("profile.hold", KeyError), "profile.hold: is required"),
        (("profile.ramp_up", float("nan")), "profile.ramp_up: must be a number"),
        (("think_time_mode", "poisson"), "think_time_mode: must be one of fixed, uniform, exponential"),
        (("request_timeout", 0), "request_timeout: must be greater than 0"),
        (("thresholds.p99_ms", 5), "thresholds.p99_ms: unknown key"),
        (("thresholds.p95_ms", "fast"), "thresholds.p95_ms: must be a number"),
    ],
)
def test_it_names_the_bad_field(change, message):
    with pytest.raises(PlanError) as excinfo:
        Plan.from_dict(bad(change))

    assert str(excinfo.value).startswith(message)


def test_a_profile_with_no_duration_is_refused():
    d = bad(("profile", {"users": 1, "hold": 0}))

    with pytest.raises(PlanError, match=r"^profile: ramp_up \+ hold \+ ramp_down must be greater than 0"):
        Plan.from_dict(d)


def test_a_plan_must_be_an_object():
    with pytest.raises(PlanError, match="^plan: must be an object"):
        Plan.from_dict([])


def test_single_page_builds_a_one_step_plan():
    plan = Plan.single_page("http://127.0.0.1:8001/search?q=a", users=5, hold=2, think_time=0.5)

    (case,) = plan.test_cases
    (step,) = case.steps
    assert plan.base_url == "http://127.0.0.1:8001"
    assert step.path == "/search?q=a"
    assert step.expect_status is None
    assert plan.profile.users == 5
    assert plan.profile.ramp_up == 0
