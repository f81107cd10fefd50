"""Handoffs in a run's timeline: where a shard moved to another worker, and the seconds of its gap.

Moved out of ``analysis.py`` (issue 27); ``portal.runs.analysis`` re-exports its public names.
"""

from .models import Run, RunShard


def _handoffs(run: Run) -> list[dict]:
    return [
        {**h, "shard": shard_no}
        for shard_no, handoffs in RunShard.objects.filter(run=run).values_list("shard_no", "handoffs")
        for h in handoffs or []
    ]


def _gap(h: dict) -> range:
    """The seconds a handoff left with reduced load: from the stopping worker's last (partial)
    second to the resuming worker's first (partial) one; to the run's end if nobody resumed."""
    end = h.get("resumed_at_s")
    return range(max(0, h["stopped_at_s"] - 1), (end + 1) if end is not None else 10**9)


def handoff_seconds(run: Run) -> set[int]:
    """Every second some shard was handing off (stopping, waiting for a worker, resuming)."""
    out: set[int] = set()
    for h in _handoffs(run):
        gap = _gap(h)
        out.update(range(gap.start, min(gap.stop, gap.start + 100_000)))
    return out


def handoff_timeline(run: Run, windows: list[dict]) -> list[dict]:
    """Each handoff for the timeline, with the measured window it fell in; the windows count them.

    A window that had a handoff says so in its note, with its seconds of reduced load, so that
    they are not silently averaged into its figures. The seconds from the one the stopping (or
    crashed) worker did not flush to the one the next worker resumed at have no rows of that shard:
    they are counted as missing (``missing_s``; a window's ``missing_seconds``), not as zero.
    """
    out = []
    for w in windows:
        w.setdefault("handoffs", 0)
        w.setdefault("reduced_seconds", 0)
        w.setdefault("missing_seconds", 0)
    for h in sorted(_handoffs(run), key=lambda h: h["stopped_at_s"]):
        gap = _gap(h)
        window = next((w for w in windows if w["start"] <= h["stopped_at_s"] < w["end"]), None)
        resumed = h.get("resumed_on")
        missing = range(h["stopped_at_s"], h["resumed_at_s"]) if resumed else range(0)
        what = "stopped" if h["kind"] == "stopped" else "went silent"
        text = f"worker {h.get('worker', '?')} {what} at {h['stopped_at_s']} s; " + (
            f"shard {h['shard']} resumed on {resumed} after {h.get('gap_s')} s"
            + (f" ({len(missing)} s missing)" if len(missing) else "")
            if resumed
            else f"no worker took shard {h['shard']} over"
        )
        out.append(
            {
                **h,
                "text": text,
                "window": window["label"] if window else None,
                "missing_s": len(missing) if resumed else None,
            }
        )
        for w in windows:
            reduced = len(range(max(gap.start, w["start"]), min(gap.stop, w["end"])))
            if reduced > 0:
                w["handoffs"] += 1
                w["reduced_seconds"] += reduced
                w["missing_seconds"] += len(range(max(missing.start, w["start"]), min(missing.stop, w["end"])))
                w["note"] = (w["note"] + " " if w["note"] else "") + (
                    f"A handoff ({text}) reduced the load for {reduced} s of this window."
                )
    return out
