"""Valid form posts for the projects pages; tests override the field they are about."""

HTMX = {"HTTP_HX_REQUEST": "true"}


def environment_data(servers=(), initial=0, **fields):
    data = {
        "name": "Production",
        "base_url": "http://127.0.0.1:8002",
        "description": "",
        "configuration_text": "",
        "servers-TOTAL_FORMS": str(len(servers)),
        "servers-INITIAL_FORMS": str(initial),
        "servers-MIN_NUM_FORMS": "0",
        "servers-MAX_NUM_FORMS": "1000",
    }
    for i, server in enumerate(servers):
        for key, value in server.items():
            data[f"servers-{i}-{key}"] = value
    data.update(fields)
    return data


def step_data(**fields):
    data = {
        "name": "Search",
        "method": "GET",
        "path": "/search?q=report",
        "headers_text": "",
        "body_type": "raw",
        "body": "",
        "think_time": "2",
        "timeout": "",
        "expect_status": "",
        "max_duration_ms": "",
        "text_present": "",
        "text_absent": "",
        "extract_text": "",
        "resources_text": "",
    }
    data.update(fields)
    return data


def plan_data(environment, **fields):
    data = {
        "name": "Capacity",
        "description": "",
        "environment": str(environment.code),
        "profile_kind": "ramp",
        "users": "50",
        "ramp_up": "30",
        "hold": "300",
        "ramp_down": "10",
        "pacing": "",
        "rate": "",
        "rate_start": "",
        "max_users": "",
        "think_time_mode": "fixed",
        "request_timeout": "30",
        "threshold_apd_ms": "",
        "threshold_p95_ms": "",
        "threshold_error_rate_pct": "",
    }
    data.update(fields)
    return data


def levels_data(levels=(), initial=0):
    """The management form and rows of a plan form's levels; each level a dict of its fields."""
    data = {
        "levels-TOTAL_FORMS": str(len(levels)),
        "levels-INITIAL_FORMS": str(initial),
        "levels-MIN_NUM_FORMS": "0",
        "levels-MAX_NUM_FORMS": "1000",
    }
    for i, level in enumerate(levels):
        for key, value in level.items():
            data[f"levels-{i}-{key}"] = str(value)
    return data
