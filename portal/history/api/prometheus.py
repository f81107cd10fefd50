"""A tuning change's server figures before → after from the environment's Prometheus, for automation.

The same figures as the change page's section (``portal.metrics.before_after``): which two sides were
read and why, per server each series' mean before and after and its change, a server's failure as its
message; and when there is nothing to read, why (``available`` false with a ``reason``).
"""

from datetime import datetime

from rest_framework import serializers

from portal.metrics.before_after import UNAVAILABLE, BeforeAfter, Side, change_before_after, unavailable


class PrometheusSideSerializer(serializers.Serializer):
    label = serializers.CharField(help_text="As the page heads its column: a run, or 15 min before/after")
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    run = serializers.UUIDField(allow_null=True, help_text="The run whose measured seconds this side is (runs basis)")
    run_number = serializers.IntegerField(allow_null=True)


class PrometheusFigureSerializer(serializers.Serializer):
    key = serializers.CharField(help_text="The counter set's series key (cpu, requests, …)")
    name = serializers.CharField()
    unit = serializers.CharField()
    main = serializers.BooleanField(help_text="One of the counter set's main series (listed first)")
    before = serializers.FloatField(help_text="The mean over the before side")
    after = serializers.FloatField(help_text="The mean over the after side")
    change_pct = serializers.FloatField(allow_null=True, help_text="(after − before) / |before| × 100; null from 0")
    lower_is_better = serializers.BooleanField()
    better = serializers.BooleanField(
        allow_null=True, help_text="Whether it moved the good way; null within 5 % or without a base"
    )


class PrometheusServerSerializer(serializers.Serializer):
    name = serializers.CharField()
    selector = serializers.CharField(help_text="Its Prometheus label matchers")
    error = serializers.CharField(help_text="Why it has no figures (empty when they were read)")
    figures = PrometheusFigureSerializer(many=True, help_text="Series with figures on both sides, main ones first")


class ChangePrometheusSerializer(serializers.Serializer):
    change = serializers.UUIDField()
    available = serializers.BooleanField(help_text="false: nothing to read, ``reason`` and ``message`` say why")
    reason = serializers.ChoiceField(
        choices=["", *UNAVAILABLE], help_text="not_applied, no_prometheus, no_servers; empty when available"
    )
    message = serializers.CharField(help_text="Why there is nothing to read (empty when available)")
    basis = serializers.ChoiceField(
        choices=["runs", "window"],
        allow_null=True,
        help_text="runs: the last run before and the first under the change, of one plan; window: its time ± 15 min",
    )
    note = serializers.CharField(help_text="Which sides were read and why, in words")
    step_s = serializers.IntegerField(allow_null=True, help_text="Seconds between readings; a figure is their mean")
    before = PrometheusSideSerializer(allow_null=True)
    after = PrometheusSideSerializer(allow_null=True)
    servers = PrometheusServerSerializer(many=True)


def _instant(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def _side(side: Side) -> dict:
    return {
        "label": side.label,
        "start": _instant(side.start),
        "end": _instant(side.end),
        "run": str(side.run.code) if side.run else None,
        "run_number": side.run.number if side.run else None,
    }


def _note(figures: BeforeAfter) -> str:
    if figures.basis == "runs":
        return (
            f"Under the same load: {figures.before.label}, the last run before the change, against "
            f"{figures.after.label}, the first under it, each over its measured seconds."
        )
    return figures.note


def payload(change) -> dict:
    """The answer of ``GET /api/v1/tuning-changes/{code}/prometheus/`` (reads Prometheus when there is one)."""
    reason = unavailable(change)
    figures = None if reason else change_before_after(change)
    if figures is None:
        reason = reason or unavailable(change) or "no_servers"
        return {
            "change": str(change.code),
            "available": False,
            "reason": reason,
            "message": UNAVAILABLE[reason],
            "basis": None,
            "note": "",
            "step_s": None,
            "before": None,
            "after": None,
            "servers": [],
        }
    return {
        "change": str(change.code),
        "available": True,
        "reason": "",
        "message": "",
        "basis": figures.basis,
        "note": _note(figures),
        "step_s": figures.step_s,
        "before": _side(figures.before),
        "after": _side(figures.after),
        "servers": [
            {
                "name": server.name,
                "selector": server.selector,
                "error": server.error,
                "figures": [
                    {
                        "key": row.key,
                        "name": row.name,
                        "unit": row.unit,
                        "main": row.main,
                        "before": row.before,
                        "after": row.after,
                        "change_pct": None if row.change_pct is None else round(row.change_pct, 2),
                        "lower_is_better": row.lower_is_better,
                        "better": row.better,
                    }
                    for row in server.rows
                ],
            }
            for server in figures.servers
        ],
    }
