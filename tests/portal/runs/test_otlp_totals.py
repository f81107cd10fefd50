"""A shard's totals keep the engine's OTLP export outcome (issue 29 item 4), across a handoff too."""


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
