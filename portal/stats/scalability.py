"""The Universal Scalability Law (Gunther) fitted to the levels of a steps run.

Plain functions over plain numbers, with no Django, so that the run finaliser, the
comparisons and the tests share them. Throughput X at concurrency N is

    X(N) = λ·N / (1 + σ·(N − 1) + κ·N·(N − 1))

with λ the rate of a single user, σ contention (the fraction of the work that is
serialized: one lock, one tempdb allocation page) and κ coherency (crosstalk that grows
with pairs of users). With κ > 0 throughput peaks at N* = √((1 − σ)/κ) and falls after;
with κ = 0 it levels off towards λ/σ. σ and κ name the kind of bottleneck, which is why
a tuning change that removes contention shows up as σ falling.

Closed model (a steps run of users): N is the users of each level. Open model (arrivals):
N is the concurrency in the system by Little's law, N = X · R (`littles_law`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from portal import formatting

# SciPy (and ruptures, which imports it) are imported where they are used, not with the module: this module
# is imported by every process that loads the portal's URLs or tasks (each Celery worker, gunicorn, manage.py),
# and scipy.stats alone takes about a second of CPU to import, for figures only a few pages compute.

MIN_LEVELS = 4
"""Three parameters need at least one level more than that to leave a degree of freedom."""
MIN_R2 = 0.9
"""Below this the curve explains too little of the measured throughput to be read..."""
MAX_MISS = 0.1
"""A ceiling (`ceiling_fit`) describes the levels only when it stays this close to them (root mean
square error / the ceiling): a line that rises, then a flat top."""
SATURATION_EFFICIENCY = 0.85
"""The top level must deliver less than this share of linear scaling (λ·N) for σ and κ
to be measured rather than guessed: a system still scaling almost linearly has not
shown what stops it."""
NEGLIGIBLE_SHARE = 0.1
"""A term under a tenth of the other one's slowdown at the top level is negligible."""
EXTRAPOLATE = 1.25
"""The curve drawn goes this far past the last level, marked as extrapolation."""
UNIT = "pages/s"
FLAT = 0.05
"""Levels all within ±5 % of their mean have no curve to fit: throughput is flat, the system at its ceiling."""


@dataclass(frozen=True)
class UslFit:
    """A fitted model, or why there is none (`fitted` False and `reason` in words)."""

    fitted: bool
    reason: str = ""
    lam: float | None = None
    sigma: float | None = None
    kappa: float | None = None
    lam_ci: tuple[float, float] | None = None
    sigma_ci: tuple[float, float] | None = None
    kappa_ci: tuple[float, float] | None = None
    peak_users: float | None = None
    peak_throughput: float | None = None
    r2: float | None = None
    predicted: tuple[float, ...] = ()
    ceiling: float | None = None
    """With no model because the levels show a sharp ceiling: the throughput measured at it (a mean of levels)."""
    ceiling_users: float | None = None
    """...and the lowest level that reached it."""


def usl(n, lam: float, sigma: float, kappa: float):
    """Throughput at concurrency n (a number or a numpy array)."""
    return lam * n / (1.0 + sigma * (n - 1.0) + kappa * n * (n - 1.0))


def littles_law(throughput_per_s: float, response_time_s: float) -> float:
    """Concurrency in an open system: N = X · R (items in the system = rate × time in it)."""
    return throughput_per_s * response_time_s


def peak(lam: float, sigma: float, kappa: float) -> tuple[float | None, float]:
    """(N*, X(N*)); N* is None with κ = 0, where throughput only levels off (towards λ/σ, or grows with σ = 0)."""
    if kappa <= 0:
        return None, (lam / sigma if sigma > 0 else math.inf)
    n_star = math.sqrt(max(1.0 - sigma, 0.0) / kappa)
    return n_star, float(usl(n_star, lam, sigma, kappa))


def fit(concurrency: Sequence[float], throughput: Sequence[float], *, confidence: float = 0.95) -> UslFit:
    """Least-squares fit of λ, σ, κ with confidence intervals, or the reason there is no model.

    Bounds keep the parameters physical (λ > 0, 0 ≤ σ ≤ 1, κ ≥ 0). The intervals come
    from the fit's covariance and Student's t with (levels − 3) degrees of freedom.
    """
    n = np.asarray(concurrency, dtype=float)
    x = np.asarray(throughput, dtype=float)
    if len(n) != len(x):
        raise ValueError("one throughput per concurrency")
    keep = np.isfinite(n) & np.isfinite(x) & (n > 0)
    n, x = n[keep], x[keep]
    if len(n) < MIN_LEVELS or len(set(n.tolist())) < MIN_LEVELS:
        return UslFit(
            fitted=False,
            reason=f"A scalability model needs at least {MIN_LEVELS} measured levels of different load; "
            f"this run has {len(set(n.tolist()))}.",
        )
    order = np.argsort(n)
    n, x = n[order], x[order]
    if x.max() <= 0:
        return UslFit(fitted=False, reason="No level served any page, so there is nothing to model.")
    # From one user up, flat throughput is the law's own case σ = 1 (one user already holds the serialized
    # step, a pool of one); from more users up it is a ceiling reached before the lowest level, of unknown kind.
    one_user = float(n[0]) <= 1.0
    if not one_user and float(np.max(np.abs(x - x.mean()))) <= FLAT * float(x.mean()):
        # Every level within ±5 % while the users grew: whatever σ and κ a fit finds describe noise.
        return _ceiling(n, x, float(x.mean()), None)
    full = _least_squares(n, x, ())
    if full is None:
        return UslFit(fitted=False, reason="The scalability model did not converge on these levels.")
    params, se, ss_res = full
    from scipy import stats

    dof = len(n) - 3
    t = float(stats.t.ppf(0.5 + confidence / 2, dof))
    # A term the levels cannot tell from 0 is dropped when the two-parameter model fits as well
    # (the extra-sum-of-squares F test): otherwise σ and κ trade off against each other and
    # neither value means anything (a hard ceiling fits as much "κ" as "σ").
    if any(p - t * e <= 0 for p, e in zip(params[1:], se[1:], strict=True)):
        f_crit = float(stats.f.ppf(confidence, 1, dof))
        good = []
        for fixed in (("kappa",), ("sigma",)):
            reduced = _least_squares(n, x, fixed)
            if reduced is None or (reduced[2] - ss_res) / max(ss_res / dof, 1e-12) >= f_crit:
                continue
            if not any(p - t * e <= 0 for p, e in zip(reduced[0][1:], reduced[1][1:], strict=True) if e > 0):
                good.append(reduced)
        if good:
            params, se, ss_res = min(good, key=lambda r: r[2])  # the simpler model that fits best
    lam, sigma, kappa = (float(p) for p in params)
    predicted = usl(n, lam, sigma, kappa)
    ss_tot = float(np.sum((x - x.mean()) ** 2))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 0.0

    def ci(value: float, s: float, top: float = math.inf) -> tuple[float, float]:
        # Clipped to the parameter's physical range, as the fit's bounds are: σ above 1 or below 0 means nothing.
        return (max(0.0, value - t * float(s)), min(top, value + t * float(s)))

    sigma_ci, kappa_ci = ci(sigma, se[1], 1.0), ci(kappa, se[2])
    # A κ the levels cannot tell from 0 puts N* anywhere up to infinity: no peak, it levels off (λ/σ).
    n_star, x_star = peak(lam, sigma, kappa if kappa_ci[0] > 0 else 0.0)
    common = {
        "lam": lam,
        "sigma": sigma,
        "kappa": kappa,
        "lam_ci": ci(lam, se[0]),
        "sigma_ci": sigma_ci,
        "kappa_ci": kappa_ci,
        "peak_users": n_star,
        "peak_throughput": x_star if math.isfinite(x_star) else None,
        "r2": r2,
        "predicted": tuple(float(p) for p in predicted),
    }
    # A sharp ceiling (a pool, a fixed number of slots: throughput rises with the users, then stays flat)
    # is a shape the law does not describe: fitted anyway it reads as a σ of 1 on flat levels (r² ≈ 0 beside
    # "σ dominates"), or as a κ that makes throughput fall where it measured flat. When a rising line and a
    # flat top fit the levels at least as closely as the law does, that measured ceiling is the answer.
    top_fit = ceiling_fit(n, x)
    # A ceiling below twice what one user gets is one serialized step (a pool of one, a single lock): the
    # law's σ describes it and "whatever the hardware" holds. A pool of four slots rises four-fold first.
    serialized = one_user and top_fit is not None and top_fit[1] < 2 * float(x[n == n[0]].mean())
    # ...and (nearly) flat from one user up, r² is low only because flat levels leave nothing but noise to
    # explain: one user within a fifth of the ceiling (the demo's single tempdb lock: 159 of 171 pages/s).
    flat = serialized and float(x[n == n[0]].mean()) >= (1 - 2 * MAX_MISS) * top_fit[1]
    if top_fit is not None and ((not serialized and top_fit[0] <= ss_res * (1 + 1e-9)) or (r2 < MIN_R2 and not flat)):
        return _ceiling(n, x, top_fit[1], r2)
    if r2 < MIN_R2 and not flat:
        return UslFit(
            fitted=False,
            reason=f"No model: the scalability curve fits these levels poorly (r² = {r2:.2f}, below {MIN_R2:g}), "
            "so its σ, κ and peak would mean nothing. Throughput varies too much between levels for one curve; "
            "hold each level longer or look for what changed during the run.",
            r2=r2,
        )
    efficiency = x[-1] / (lam * n[-1])
    if efficiency >= SATURATION_EFFICIENCY:
        return UslFit(
            fitted=False,
            reason=f"The levels do not reach saturation: at {n[-1]:g} users the system still delivers "
            f"{100 * efficiency:.0f} % of linear scaling, so what stops it (σ, κ, the peak) cannot be measured "
            "yet. Add higher levels.",
            # Kept for comparisons only: "σ fell to about 0" is what a change that removed contention shows.
            **{k: common[k] for k in ("lam", "lam_ci", "sigma", "sigma_ci", "kappa", "kappa_ci", "r2")},
        )
    if sigma_ci[0] <= 0 and kappa_ci[0] <= 0:
        # Neither term can be told from 0 and neither simpler model fitted: the curve names no bottleneck,
        # and the limit it implies (λ/σ with σ ≈ 0) is not a figure the levels support.
        best = int(np.argmax(x))
        return UslFit(
            fitted=False,
            reason="No model: on these levels neither contention σ "
            f"({_coefficient(sigma_ci[0])} to {_coefficient(sigma_ci[1])}) nor coherency κ "
            f"({_coefficient(kappa_ci[0])} to {_coefficient(kappa_ci[1])}, 95 % intervals) can be told from 0, "
            "and neither alone fits them, so the model names no bottleneck and no limit. The highest throughput "
            f"measured was {_number(float(x[best]))} pages/s at {n[best]:g} users; a sharp ceiling (a pool or a fixed "
            "number of slots) is a shape the scalability law does not describe.",
            r2=r2,
        )
    return UslFit(fitted=True, **common)


def ceiling_fit(n: np.ndarray, x: np.ndarray) -> tuple[float, float, float] | None:
    """The best "rises in proportion to the users, then flat" description of sorted levels, if it fits.

    (residual sum of squares, the ceiling, the lowest users at it). The levels below the ceiling
    lie on a line through 0 (λ·N), those from the split up on a flat top (their mean), which holds
    at least two distinct levels, each within ±`FLAT` of it. None when no such split stays within
    `MAX_MISS` of the levels.
    """
    distinct = np.unique(n)
    best = None
    for k in range(len(distinct) - 1):  # distinct[k:] flat: at least two levels
        flat = n >= distinct[k]
        top = float(x[flat].mean())
        if any(abs(float(x[n == u].mean()) - top) > FLAT * top for u in distinct[k:]):
            continue  # a top is flat: each of its levels within ±5 % of it (807 after 673 pages/s is growth)
        ss = float(np.sum((x[flat] - top) ** 2))
        if k:
            lam = float(np.sum(n[~flat] * x[~flat]) / np.sum(n[~flat] ** 2))
            if lam * float(distinct[k - 1]) > top:  # a line already above the top is no rise to it
                continue
            ss += float(np.sum((x[~flat] - lam * n[~flat]) ** 2))
        if best is None or ss < best[0]:
            best = (ss, top, float(distinct[k]))
    if best is None or best[1] <= 0 or math.sqrt(best[0] / len(n)) / best[1] > MAX_MISS:
        return None
    return best


def _reached_at(n: np.ndarray, x: np.ndarray, top: float) -> float:
    """The lowest level at a ceiling: the first within 5 % of it, or the lowest one when it is within 10 %."""
    if float(x[n == n[0]].mean()) >= (1 - MAX_MISS) * top:
        return float(n[0])
    return next(float(u) for u in np.unique(n) if float(x[n == u].mean()) >= (1 - FLAT) * top)


def _ceiling(n: np.ndarray, x: np.ndarray, top: float, r2: float | None) -> UslFit:
    """No model, and the ceiling the levels measured in its place (reached at the first level within 5 % of it)."""
    users = _reached_at(n, x, top)
    top = float(x[n >= users].mean())  # the levels at the ceiling, as the sentence names them
    low, high = float(x[n >= users].min()), float(x[n >= users].max())
    spread = f"{_number(low)} to {_number(high)} {UNIT}"
    lowest = f"{_users(n[0])} user{'' if n[0] == 1 else 's'}"
    if users == n[0]:
        reason = (
            f"No model: throughput is flat at about {_number(top)} {UNIT} ({spread}) from the lowest level, "
            f"{lowest}, to the highest, {_users(n[-1])} users: every level was already at the system's ceiling, "
            "so the levels measure the ceiling but not what sets it (σ, κ). Add levels below "
            f"{lowest} to see where throughput stops growing."
        )
    else:
        reason = (
            f"No model: throughput grows with the users up to about {_number(top)} {UNIT}, reached at "
            f"{_users(users)} users, and stays there ({spread}) up to {_users(n[-1])} users: a sharp ceiling, "
            "such as a pool or a fixed number of slots, which the scalability law does not describe. The ceiling "
            "is the measured limit; the model's σ, κ and peak would mean nothing here."
        )
    return UslFit(fitted=False, reason=reason, r2=r2, ceiling=top, ceiling_users=users)


def _least_squares(n: np.ndarray, x: np.ndarray, fixed: tuple[str, ...]):
    """(λ, σ, κ), their standard errors (0 for a term fixed at 0) and the residual sum of squares; None if no fit."""
    names = ("lam", "sigma", "kappa")
    free = [name for name in names if name not in fixed]
    p0 = {"lam": max(x[0] / n[0], 1e-9), "sigma": 0.05, "kappa": 1e-4}
    upper = {"lam": np.inf, "sigma": 1.0, "kappa": np.inf}

    def model(nn, *values):
        p = dict.fromkeys(names, 0.0) | dict(zip(free, values, strict=True))
        return usl(nn, p["lam"], p["sigma"], p["kappa"])

    from scipy.optimize import curve_fit

    try:
        values, cov = curve_fit(
            model,
            n,
            x,
            p0=[p0[k] for k in free],
            bounds=([1e-12 if k == "lam" else 0.0 for k in free], [upper[k] for k in free]),
            x_scale="jac",
            maxfev=20_000,
        )
    except (RuntimeError, ValueError):
        return None
    errors = np.sqrt(np.clip(np.diag(cov), 0.0, None)) if np.all(np.isfinite(cov)) else np.full(len(free), np.inf)
    fitted = dict(zip(free, values, strict=True))
    se = dict(zip(free, errors, strict=True))
    params = np.array([float(fitted.get(k, 0.0)) for k in names])
    ses = np.array([float(se.get(k, 0.0)) for k in names])
    ss_res = float(np.sum((x - model(n, *values)) ** 2))
    return params, ses, ss_res


def curve(model: UslFit, top: float, points: int = 40) -> list[dict]:
    """The fitted curve from 1 to `EXTRAPOLATE` × the top level, each point saying whether it is extrapolated."""
    if not model.fitted:
        return []
    end = top * EXTRAPOLATE
    out = []
    for n in np.linspace(1.0, end, points):
        out.append(
            {
                "n": round(float(n), 2),
                "x": round(float(usl(n, model.lam, model.sigma, model.kappa)), 3),
                "extrapolated": bool(n > top),
            }
        )
    return out


def _number(value: float) -> str:
    """A throughput as every page writes it (portal.formatting.rate)."""
    return formatting.rate(value)


def _coefficient(value: float) -> str:
    """0.21, 0.08, 0.0012: two significant digits, never in exponent form."""
    if abs(value) < 1e-9:  # a term at its bound, not a measured one: 8.4e-17 is 0
        return "0"
    text = f"{value:.2g}"
    if "e" in text:
        text = f"{value:.{1 - math.floor(math.log10(abs(value)))}f}"
    return text


def _users(value: float) -> str:
    return f"{round(value):,}"


def interpretation(model: UslFit, top: float, unit: str = "pages/s") -> str:
    """The plain sentence: which term dominates and what it means for more hardware."""
    if not model.fitted:
        return model.reason
    s, k = model.sigma, model.kappa
    slow_sigma = s * (top - 1)
    slow_kappa = k * top * (top - 1)
    kappa_zero = model.peak_users is None  # κ indistinguishable from 0 (fit)
    sigma_zero = slow_sigma < NEGLIGIBLE_SHARE * slow_kappa
    if slow_sigma >= slow_kappa or kappa_zero:
        if kappa_zero or slow_kappa < NEGLIGIBLE_SHARE * slow_sigma:
            if s <= 0:  # cannot happen after fit(): a model with neither term told from 0 is no model
                return "No model: neither contention σ nor coherency κ can be told from 0 on these levels."
            # λ/σ, or the peak a κ too small to matter still puts within reach: the summary's figure either way.
            limit = model.peak_throughput if model.peak_throughput is not None else model.lam / s
            if model.r2 is not None and model.r2 < MIN_R2:
                # One serialized step from one user up (fit() keeps no other low-r² model): r² is low because
                # (nearly) flat levels leave nothing but noise to explain, not because the curve misses them.
                return (
                    f"Contention σ = {_coefficient(s)}: one user already gets most of what more users get, so a "
                    f"serialized step (one request at a time) limits this system to about {_number(limit)} {unit} "
                    "whatever the hardware; coherency κ is negligible. The fit's r² is low "
                    f"({max(model.r2, 0.0):.2f}) because levels this close to flat leave mostly noise to explain."
                )
            return (
                f"Contention σ = {_coefficient(s)} dominates: a serialized step limits this system to about "
                f"{_number(limit)} {unit} whatever the hardware; coherency κ is negligible."
            )
        return (
            f"Contention σ = {_coefficient(s)} dominates and coherency κ = {_coefficient(k)} adds crosstalk: "
            f"throughput peaks at about {_number(model.peak_throughput)} {unit} with {_users(model.peak_users)} "
            "users and falls beyond; more hardware helps only as far as it shortens the serialized step."
        )
    words = (
        f"Coherency κ = {_coefficient(k)} dominates: crosstalk between users makes throughput peak at about "
        f"{_number(model.peak_throughput)} {unit} with {_users(model.peak_users)} users and fall beyond; "
        "more users make it slower, not faster"
    )
    return words + (
        "; contention σ is negligible." if sigma_zero else f"; contention σ = {_coefficient(s)} adds to it."
    )


def change_in_words(before: dict, after: dict) -> str:
    """What a change did to the model: "σ fell from 0.21 to 0.03: the change removed contention".

    A side marked ``linear`` (its levels never saturated) counts as σ = κ = 0 up to its
    highest level: a change after which throughput grows linearly removed what limited it.
    """
    if after.get("linear") and not before.get("linear"):
        return (
            f"σ fell from {_coefficient(before['sigma'])} to about 0: after the change throughput grows linearly "
            f"up to {_users(after['last_level'])} users, so the change removed contention."
        )
    if before.get("linear") and not after.get("linear"):
        return (
            f"σ rose from about 0 to {_coefficient(after['sigma'])}: before the change throughput grew linearly "
            f"up to {_users(before['last_level'])} users, so the change added contention."
        )
    parts = []
    for key, name, kind in (("sigma", "σ", "contention"), ("kappa", "κ", "coherency (crosstalk)")):
        b, a = before[key], after[key]
        low_b, high_b = before.get(f"{key}_ci") or (b, b)
        low_a, high_a = after.get(f"{key}_ci") or (a, a)
        if high_a < low_b:
            verb = "removed" if a < 0.25 * b else "reduced"
            parts.append(f"{name} fell from {_coefficient(b)} to {_coefficient(a)}: the change {verb} {kind}")
        elif low_a > high_b:
            parts.append(f"{name} rose from {_coefficient(b)} to {_coefficient(a)}: the change added {kind}")
    if not parts:
        return (
            f"σ {_coefficient(before['sigma'])} → {_coefficient(after['sigma'])} and κ "
            f"{_coefficient(before['kappa'])} → {_coefficient(after['kappa'])}: within the models' uncertainty, "
            "the change did not alter the kind of bottleneck."
        )
    return "; ".join(parts) + "."  # σ and κ stay lower case: capitalised they would be other letters
