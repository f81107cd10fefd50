"""A shard's totals keep the engine's OTLP export outcome (issue 29 item 4), across a handoff too."""

import pytest


def test_a_shards_totals_keep_the_export_across_a_handoff():
    """The portal stores each shard's totals; a shard run by two workers (a handoff) adds up its export."""
    from types import SimpleNamespace

    from portal.runs.services.shards import _merge_totals, _totals_dict

    stats = {"endpoint": "http://127.0.0.1:4318/v1/traces", "spans": 10, "exported": 7, "dropped": 2, "failed": 1}
    stats |= {"posts": 2, "error": "", "cpu_ms": 1.5}
    totals = SimpleNamespace(
        requests=10, errors=0, aborted=0, bytes_in=1, duration_s=1.0, start_late_s=0.0, data_taken={}, otlp=stats
    )
    first = _totals_dict(totals)
    assert first["otlp"] == stats
    assert "otlp" not in _totals_dict(SimpleNamespace(**{**vars(totals), "otlp": None}))
    merged = _merge_totals(first, _totals_dict(totals))
    assert (merged["otlp"]["spans"], merged["otlp"]["exported"], merged["otlp"]["cpu_ms"]) == (20, 14, 3.0)


@pytest.mark.django_db
def test_the_run_page_says_what_the_export_did(alice_client, plan):
    from portal.runs.models import Run, RunShard
    from tests.portal.runs.factories import plan_run

    run = plan_run(plan, status=Run.Status.PASSED)
    stats = {"endpoint": "http://10.9.9.9:4318/v1/traces", "spans": 0, "exported": 0, "dropped": 0, "failed": 0}
    stats |= {"posts": 0, "error": "not exported: 10.9.9.9 is not in the allowlist", "cpu_ms": 0.0}
    RunShard.objects.create(run=run, shard_no=0, user_count=1, status="done", totals={"requests": 5, "otlp": stats})
    page = alice_client.get(run.get_absolute_url()).content.decode()
    assert 'id="otlp-0"' in page and "Last error: not exported: 10.9.9.9 is not in the allowlist" in page
