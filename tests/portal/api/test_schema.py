"""The OpenAPI schema validates without warnings, and the docs are served from our own files."""

import re

import pytest
from django.core.management import call_command

pytestmark = pytest.mark.django_db


def test_the_schema_validates_with_no_warnings(tmp_path):
    # --fail-on-warn turns any warning into an error: the command raises instead of exiting 0
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(tmp_path / "schema.yaml"))
    schema = (tmp_path / "schema.yaml").read_text()
    assert "/api/v1/plans/{code}/runs/" in schema and "/api/v1/runs/{code}/junit.xml" in schema


def test_every_operation_has_a_summary_and_error_responses(client):
    schema = client.get("/api/v1/schema/?format=json").json()
    for path, operations in schema["paths"].items():
        for method, op in operations.items():
            assert op.get("summary"), f"{method.upper()} {path} has no summary"
            assert "401" in op["responses"] and "429" in op["responses"], f"{method.upper()} {path}"


def test_the_docs_load_vendored_files_only(client):
    # when
    page = "/api/v1/docs/"
    html = client.get(page).content.decode()

    # then: every script and stylesheet comes from this server, and is there
    sources = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert sources
    for source in sources:
        assert not source.startswith(("http:", "https:", "//")), f"{page} loads {source} from elsewhere"
        assert client.get(source).status_code == 200, source
    # and no inline script, for the coming Content-Security-Policy
    inline = re.findall(r"<script(?![^>]*\bsrc=)[^>]*>", html)
    assert not inline, inline


def _json_schema(node):
    """OpenAPI 3.0's schema dialect as JSON Schema: ``nullable: true`` becomes "or null"."""
    if isinstance(node, list):
        return [_json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _json_schema(value) for key, value in node.items() if key != "nullable"}
    if node.get("nullable"):
        return {"anyOf": [out, {"type": "null"}]}
    return out


def _operations(schema):
    for path, operations in schema["paths"].items():
        for method, op in operations.items():
            if method in ("get", "post", "put", "patch", "delete"):
                yield f"{method.upper()} {path}", op


def _examples(op):
    """(where, media type, its schema, example value) of each example of the operation."""
    bodies = [("request", op.get("requestBody", {}).get("content", {}))]
    bodies += [(f"response {status}", r.get("content", {})) for status, r in op["responses"].items()]
    for where, content in bodies:
        for media_type, body in content.items():
            for example in body.get("examples", {}).values():
                yield where, media_type, body.get("schema", {}), example["value"]


def test_every_operation_has_an_example_that_matches_its_schema(client):
    import jsonschema

    schema = client.get("/api/v1/schema/?format=json").json()
    components = _json_schema(schema["components"])
    checked = 0
    for name, op in _operations(schema):
        examples = list(_examples(op))
        assert examples, f"{name} has no example (add one to portal/api/examples.py)"
        for where, media_type, body_schema, value in examples:
            if media_type != "application/json":
                assert isinstance(value, str | dict) and value, f"{name} {where}: an empty {media_type} example"
                continue
            validator = jsonschema.Draft202012Validator({**_json_schema(body_schema), "components": components})
            errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(value)]
            assert not errors, f"{name} {where}: the example does not match the schema: {errors[:3]}"
            checked += 1
    assert checked > 60  # every operation's JSON examples were checked, not skipped


def test_a_wrong_example_is_caught(client):
    """The check above can fail: an example with a field of the wrong type does not validate."""
    import jsonschema

    schema = client.get("/api/v1/schema/?format=json").json()
    components = _json_schema(schema["components"])
    op = schema["paths"]["/api/v1/projects/{code}/"]["get"]
    body = op["responses"]["200"]["content"]["application/json"]
    good = next(iter(body["examples"].values()))["value"]
    validator = jsonschema.Draft202012Validator({**_json_schema(body["schema"]), "components": components})
    assert validator.is_valid(good)
    assert not validator.is_valid({**good, "name": 42})
