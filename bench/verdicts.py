"""The verdict-quality benchmark (issue 24): simulated nights through the real verdict code, old rule vs new.

``python -m bench verdicts [--nights 400] [--trials 300] [--seed 1]``

Each night is one synthetic run of a plan with five pages of very different sample counts (4,000 home pages
down to 46 admin pages in a 300 s window). A page's durations are log-normal (σ 0.5) around its median,
times the night's drift: a factor common to all pages, uniform in ±5 %, and one per page, uniform in ±2 %
(a cache, a query plan). Errors are rare (0.1 %). Each run is cut into 10 batches, as a real run is
(``portal.runs.results.batches``), and gives its figures (APD, p95, pages/s, error rate) per page and in total,
and what the verdict reads of its window histogram: the variance of each page's durations (``sample_v``, as
``Histogram.variance`` buckets the simulated durations), for the noise of an APD within a run.

The same nights are judged by both rules, through the code the portal runs:

* **old**: each row on its own (``portal.stats.analysis.compare``, Welch on batch means pooled over the
  baseline runs, 95 %), regressed when worse and beyond the 10 % tolerance; the rolling baseline is the last
  N runs whatever their verdict (the rule before issue 24).
* **new**: ``portal.schedules.noise.judge_cells`` (the spread between the baseline runs' own figures plus each
  run's noise within it; Holm over all rows at 1 %, weighted: the APD and time-to-first-event rows carry 75 % of
  it, ``--plain-holm`` equal shares; minimum pages per figure; the 10 % tolerance); the rolling
  baseline is the last N runs not judged regressed (``portal.schedules.selectors.baseline_eligible``).

N is the portal's default, 7 (``--last-n``: 3 was the default before 2026-12-07, and gives the figures measured
before then).

Streams (issue 26): each night also has two streaming pages (an SSE "Ask" with 600 streams a run, a
"Summarise" with 150), whose time to first event is log-normal (σ 0.4) around its median, times the same
common drift and a drift of its own (±2 %). Their time-to-first-event p95 per page and over all streams
join the new rule's family as the portal puts them there (``portal.schedules.baselines.protocol_cells``:
no batch figures; the noise within a run from the p95's order statistic, ``noise.percentile_var``, read
from the run's p90, p95 and p99), so its false-alarm rate is the whole family's. The old rule never had
such rows. Their random numbers come from a generator of their own, so the page figures of a seed are
the same with and without them (``--no-streams``: the page figures alone, as before).

It reports the false-alarm rate (nights with nothing changed called regressed), the detection rate of one
page made 20 % slower on the first night (for a streaming page: its time to first event), and how many
nights a lasting regression (the search page 2× slower from one night on) goes on being reported before the
rolling baseline absorbs it.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field

import numpy as np

from portal.schedules import noise
from portal.stats import analysis
from workers.engine.histogram import MAX_US, MIN_US

SECONDS = 300
BATCHES = 10
PAGES = {  # label: (pages per run, median ms)
    "Home": (4000, 40.0),
    "Articles": (1500, 60.0),
    "Search": (400, 80.0),
    "Upload": (120, 200.0),
    "Admin": (46, 30.0),
}
SIGMA = 0.5
COMMON_DRIFT = 0.05
PAGE_DRIFT = 0.02
ERROR_RATE = 0.001
TOLERANCE = 10.0
# The rolling baseline's number of runs: the portal's default (``portal.schedules.models.DEFAULT_LAST_N``, a week of
# nightly runs since 2026-12-07; the figures measured before it are those of ``--last-n 3``).
LAST_N = 7
FIGURES = (("apd_ms", True), ("p95_ms", True), ("pages_per_s", False), ("error_rate_pct", True))
STREAMS = {  # label: (streams per run, median time to first event ms)
    "Ask": (600, 250.0),
    "Summarise": (150, 400.0),
}
TTFE_SIGMA = 0.4
# The streams' own random numbers (None: no streams), apart from the pages' so that a seed's pages stay the same.
stream_rng: np.random.Generator | None = None
# The new rule's share of the false-alarm budget for its primary rows, APD and time to first event (None: plain
# Holm, the rule before 2026-12-07).
primary_share: float | None = noise.PRIMARY_SHARE


@dataclass
class Run:
    figures: dict  # {page or None: {key: value}}
    batches: dict  # {page or None: {key: [10 values]}}
    pages: dict  # {page or None: int}
    # {streaming page or None (all streams): (TTFE p90, p95, p99 in ms, streams)}; empty without streams
    streams: dict = field(default_factory=dict)
    # {page or None: the APD's squared relative standard error were the pages independent}, as the verdict reads
    # it from the run's window histogram (``portal.schedules.baselines._sample_v``)
    sample_v: dict = field(default_factory=dict)


def _figures(durations: np.ndarray, errors: np.ndarray, seconds: float) -> dict:
    n = len(durations)
    return {
        "apd_ms": float(durations.mean()),
        "p95_ms": float(np.quantile(durations, 0.95)),
        "pages_per_s": n / seconds,
        "error_rate_pct": 100.0 * float(errors.sum()) / n,
    }


def simulate_run(rng: np.random.Generator, slow: dict | None = None) -> Run:
    common = 1 + rng.uniform(-COMMON_DRIFT, COMMON_DRIFT)
    figures, batches, pages, sv = {}, {}, {}, {}
    all_d, all_e, all_b = [], [], []
    for label, (n, median) in PAGES.items():
        factor = common * (1 + rng.uniform(-PAGE_DRIFT, PAGE_DRIFT)) * (slow or {}).get(label, 1.0)
        d = median * factor * np.exp(rng.normal(0, SIGMA, n))
        e = rng.random(n) < ERROR_RATE
        b = np.sort(rng.integers(0, BATCHES, n))  # pages spread over the window's batches
        figures[label], pages[label] = _figures(d, e, SECONDS), n
        sv[label] = sample_v(d)
        batches[label] = _batch_figures(d, e, b)
        all_d.append(d), all_e.append(e), all_b.append(b)
    d, e, b = np.concatenate(all_d), np.concatenate(all_e), np.concatenate(all_b)
    figures[None], pages[None], batches[None] = _figures(d, e, SECONDS), len(d), _batch_figures(d, e, b)
    sv[None] = sample_v(d)
    return Run(figures, batches, pages, _streams(common, slow) if stream_rng is not None else {}, sv)


def sample_v(durations_ms: np.ndarray) -> float:
    """What the store keeps of a page's durations for the noise of its APD: the variance of the window
    histogram's values (``Histogram.variance``: integer µs in log-linear buckets, each read at its midpoint
    clamped to the exact min and max) / pages / APD², computed here with numpy on the simulated durations."""
    us = np.clip(durations_ms * 1000.0, MIN_US, MAX_US).astype(np.int64)
    shift = np.maximum(np.floor(np.log2(np.maximum(us, 1))).astype(np.int64) - 10, 0)  # bit_length − 11
    low = (us >> shift) << shift
    mid = np.where(us < 2048, us, low + ((np.int64(1) << shift) - 1) // 2).clip(us.min(), us.max())
    return float(mid.var(ddof=1) / len(us) / us.mean() ** 2)


def _ttfe(t: np.ndarray) -> tuple[float, float, float, int]:
    p90, p95, p99 = np.quantile(t, (0.90, 0.95, 0.99))
    return float(p90), float(p95), float(p99), len(t)


def _streams(common: float, slow: dict | None) -> dict:
    """The night's time to first event per streaming page and over all streams (the summary's p90, p95, p99)."""
    out, every = {}, []
    for label, (n, median) in STREAMS.items():
        factor = common * (1 + stream_rng.uniform(-PAGE_DRIFT, PAGE_DRIFT)) * (slow or {}).get(label, 1.0)
        t = median * factor * np.exp(stream_rng.normal(0, TTFE_SIGMA, n))
        out[label] = _ttfe(t)
        every.append(t)
    out[None] = _ttfe(np.concatenate(every))
    return out


def _batch_figures(d, e, b) -> dict:
    out = {key: [] for key, _ in FIGURES}
    for i in range(BATCHES):
        mask = b == i
        if not mask.any():
            continue
        for key, value in _figures(d[mask], e[mask], SECONDS / BATCHES).items():
            out[key].append(value)
    return out


def old_rule(baseline: list[Run], run: Run) -> set:
    """The rows the rule before issue 24 called regressed: each row alone, Welch on batch means, 95 %."""
    regressed = set()
    for page in run.figures:
        for key, lower in FIGURES:
            before = [v for r in baseline for v in r.batches[page][key]]
            after = run.batches[page][key]
            before_value = float(np.mean([r.figures[page][key] for r in baseline]))
            c = analysis.compare(
                before,
                after,
                lower_is_better=lower,
                samples="batches",
                before_value=before_value,
                after_value=run.figures[page][key],
            )
            pct = abs(c.reduction_pct) if c.reduction_pct is not None else float("inf")
            if c.verdict == analysis.WORSE and pct > TOLERANCE:
                regressed.add((page, key))
    return regressed


def new_rule(baseline: list[Run], run: Run) -> set:
    cells = []
    for page in run.figures:
        for key, lower in FIGURES:
            cells.append(
                noise.Cell(
                    page=page,
                    key=key,
                    lower_is_better=lower,
                    baseline=[r.figures[page][key] for r in baseline],
                    value=run.figures[page][key],
                    baseline_batches=[r.batches[page][key] for r in baseline],
                    batches=run.batches[page][key],
                    baseline_pages=[r.pages[page] for r in baseline],
                    pages=run.pages[page],
                    baseline_sample_v=[r.sample_v[page] for r in baseline],
                    sample_v=run.sample_v[page],
                )
            )
    cells += stream_cells(baseline, run)
    family = noise.judge_cells(cells, tolerance_pct=TOLERANCE, primary_share=primary_share)
    return {(c.page, c.key) for c, j in zip(cells, family.rows, strict=True) if j.verdict == "regressed"}


def stream_cells(baseline: list[Run], run: Run) -> list:
    """The time-to-first-event p95 rows, per streaming page and in total, where every run has them (as
    ``portal.schedules.baselines.protocol_cells`` makes them)."""
    cells = []
    for page, after in run.streams.items():
        before = [r.streams.get(page) for r in baseline]
        if any(b is None for b in before):
            continue
        cells.append(
            noise.Cell(
                page=page,
                key="ttfe_p95_ms",
                lower_is_better=True,
                baseline=[b[1] for b in before],
                value=after[1],
                baseline_batches=[[] for _ in before],
                batches=[],
                baseline_pages=[b[3] for b in before],
                pages=after[3],
                figure="Time to first event p95",
                baseline_v=[noise.percentile_var(*b) for b in before],
                v=noise.percentile_var(*after),
                samples="streams",
            )
        )
    return cells


RULES = {"old": (old_rule, False), "new": (new_rule, True)}


def false_alarms(rng, nights: int) -> dict:
    """Nights with nothing changed, each judged against the rolling baseline of the nights before."""
    history = [simulate_run(rng) for _ in range(LAST_N)]
    called = {name: 0 for name in RULES}
    kept = {name: list(history) for name in RULES}  # each rule's own rolling baseline
    for _ in range(nights):
        run = simulate_run(rng)
        for name, (rule, excludes) in RULES.items():
            regressed = rule(kept[name][-LAST_N:], run)
            called[name] += bool(regressed)
            if not (excludes and regressed):
                kept[name].append(run)
    return {name: called[name] / nights for name in RULES}


def detection(rng, trials: int, page: str, factor: float = 1.2) -> dict:
    """The first night with ``page`` made 20 % slower: is it called regressed, on that page?"""
    found = {name: 0 for name in RULES}
    for _ in range(trials):
        baseline = [simulate_run(rng) for _ in range(LAST_N)]
        run = simulate_run(rng, slow={page: factor})
        for name, (rule, _) in RULES.items():
            found[name] += any(p == page for p, _ in rule(baseline, run))
    return {name: found[name] / trials for name in RULES}


def lasting(rng, trials: int, nights: int = 10, page: str = "Search", factor: float = 2.0) -> dict:
    """From one night on ``page`` is ``factor`` slower for good: how many nights in a row is it reported?"""
    reported = {name: [] for name in RULES}
    for _ in range(trials):
        history = [simulate_run(rng) for _ in range(LAST_N)]
        kept = {name: list(history) for name in RULES}
        streak = {name: 0 for name in RULES}
        ended = set()
        for _ in range(nights):
            run = simulate_run(rng, slow={page: factor})
            for name, (rule, excludes) in RULES.items():
                regressed = rule(kept[name][-LAST_N:], run)
                if name not in ended:
                    if any(p == page for p, _ in regressed):
                        streak[name] += 1
                    else:
                        ended.add(name)
                if not (excludes and regressed):
                    kept[name].append(run)
        for name in RULES:
            reported[name].append(streak[name])
    return {name: (float(np.mean(v)), min(v), max(v), sum(1 for x in v if x == nights) / trials, nights)
            for name, v in reported.items()}  # fmt: skip


def set_last_n(n: int) -> None:
    """The rolling baseline's number of runs for both rules (``--last-n``)."""
    global LAST_N
    LAST_N = n


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench verdicts", description=__doc__.split("\n\n")[0])
    parser.add_argument("--nights", type=int, default=400, help="nights with nothing changed (default 400)")
    parser.add_argument(
        "--trials", type=int, default=300, help="first nights with one page slower (default 300; 0: none)"
    )
    parser.add_argument(
        "--lasting", type=int, default=50, help="lasting regressions of 10 nights (default 50; 0: none)"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--last-n",
        type=int,
        default=LAST_N,
        help=f"the rolling baseline's number of runs, both rules (default {LAST_N}, the portal's default N; "
        "3 before 2026-12-07)",
    )
    parser.add_argument("--no-streams", action="store_true", help="the five pages alone, without streaming pages")
    parser.add_argument(
        "--pages",
        help=f"a plan of only these pages, comma-separated (of {', '.join(PAGES)}; default all five), "
        "e.g. Articles,Search,Upload for three pages of which one is noisy",
    )
    parser.add_argument(
        "--detect", help="the detection trials only for these pages, comma-separated (default every page of the plan)"
    )
    parser.add_argument(
        "--plain-holm",
        action="store_true",
        help="the new rule with Holm's plain step-down, every row an equal share of the false-alarm budget (before "
        f"2026-12-07; default: the APD and time-to-first-event rows carry {noise.PRIMARY_SHARE * 100:g} %% of it)",
    )
    args = parser.parse_args(argv)
    if args.last_n < 2:
        parser.error("--last-n: at least 2 baseline runs (one has no spread between nights)")
    global primary_share
    set_last_n(args.last_n)
    primary_share = None if args.plain_holm else noise.PRIMARY_SHARE
    if args.pages:
        chosen = [p.strip() for p in args.pages.split(",") if p.strip()]
        unknown = [p for p in chosen if p not in PAGES]
        if unknown or not chosen:
            parser.error(f"unknown page(s) {', '.join(unknown) or '(none given)'}: choose from {', '.join(PAGES)}")
        for label in [p for p in PAGES if p not in chosen]:
            del PAGES[label]
        print(f"Pages: {', '.join(f'{p} ({n})' for p, (n, _) in PAGES.items())}")
    rng = np.random.default_rng(args.seed)
    global stream_rng
    stream_rng = None if args.no_streams else np.random.default_rng([args.seed, 26])
    if stream_rng is not None:
        print(f"Streaming pages (time to first event p95 in the new rule's family): {', '.join(STREAMS)}")

    fa = false_alarms(rng, args.nights)
    print(f"False alarms over {args.nights} nights with nothing changed (goal ≤ 2 %):")
    for name in RULES:
        print(f"  {name}: {fa[name] * 100:.1f} %")
    if args.trials > 0:
        print(f"Detection of one page 20 % slower on the first night ({args.trials} trials each; goal ≥ 95 %):")
        print("  page (pages per run): old / new")
        detect = [p.strip() for p in args.detect.split(",")] if args.detect else list(PAGES)
        if unknown := [p for p in detect if p not in PAGES]:
            parser.error(f"--detect: page(s) {', '.join(unknown)} not in the plan ({', '.join(PAGES)})")
        for page, (n, _) in PAGES.items():
            if page not in detect:
                continue
            d = detection(rng, args.trials, page)
            print(f"  {page} ({n}): {d['old'] * 100:.1f} % / {d['new'] * 100:.1f} %")
    if args.lasting > 0 and "Search" in PAGES:
        la = lasting(rng, args.lasting)
        print(f"A lasting regression (Search 2× slower for 10 nights, {args.lasting} trials): nights reported in a row")
        for name, (mean, lo, hi, always, nights) in la.items():
            print(
                f"  {name}: mean {mean:.1f} (min {lo}, max {hi}); reported all {nights} nights in {always * 100:.0f} %"
            )
    if (
        stream_rng is not None and args.trials > 0
    ):  # after the pages' figures, so that a seed gives them as without streams
        print(f"Detection of a streaming page's time to first event 20 % slower ({args.trials} trials each)")
        print("  page (streams per run): old (no such row) / new")
        for page, (n, _) in STREAMS.items():
            d = detection(rng, args.trials, page)
            print(f"  {page} ({n}): — / {d['new'] * 100:.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
