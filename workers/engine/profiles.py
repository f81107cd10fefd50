"""The kinds of load profile, one class each: the only place that knows what a kind is.

A kind says which keys its ``profile`` object takes (docs/plan-format.md), checks
them (``parse``), and answers every question about its shape: how long it lasts,
how many users it needs at most, when each user runs (closed model) or each
iteration is due (open model), which parts are measured, and how to say it in
words. ``schedule.py`` (the runner's and the preview's functions of time), the
plan parser and the portal (its plan columns, form, API and pages) all ask the
kind in ``KINDS`` instead of testing ``kind ==``.

**Adding a kind** takes three files: a class here (registered with ``@register``),
its section in docs/plan-format.md (``### `kind`: …``, checked by the tests) and,
only if it needs a parameter no other kind has, the portal's plan column for it
(portal/projects/models.py plus its migration). The form, the API's choices, the
plan page, the preview chart and the tests that iterate ``KINDS`` follow by
themselves.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from .plan import MAX_LEVELS, MAX_RATE, MAX_USERS, Level, PlanError, Profile, _int, _number, _obj

# The flat parameters a kind may take, in the order a form shows them. A kind takes a subset
# (``fields``); the portal keeps one column per name.
PARAMETERS = ("users", "rate", "rate_start", "ramp_up", "hold", "ramp_down", "pacing", "max_users")


class Words:
    """How a description spells durations, counts and numbers; the portal passes its own (human durations)."""

    def duration(self, seconds: float) -> str:
        return f"{seconds:g} s"

    def plural(self, n: int | None, word: str) -> str:
        n = n or 0
        return f"{n:,} {word}{'' if n == 1 else 's'}"

    def number(self, value: float | None) -> str:
        return f"{value or 0:g}"

    def span(self, values: Sequence[float]) -> str:
        """One duration when all are equal, else the range: "1 h", "30 min–1 h"."""
        low, high = min(values), max(values)
        return self.duration(low) if low == high else f"{self.duration(low)}–{self.duration(high)}"


WORDS = Words()


class ProfileKind:
    """One kind of load profile. Subclasses set the class attributes and override what differs from a ramp."""

    name: ClassVar[str]
    label: ClassVar[str]  # the form's choice: "Ramp: up, hold, down"
    position: ClassVar[int]  # where the form lists it (the default, ramp, first)
    help: ClassVar[str]  # one paragraph for the form and the docs: what the kind does
    required: ClassVar[tuple[str, ...]]  # keys of the plan's profile object (besides "kind")
    optional: ClassVar[tuple[str, ...]] = ()
    uses_levels: ClassVar[bool] = False  # a list of levels instead of flat parameters
    open_model: ClassVar[bool] = False  # iterations arrive at a rate, users only serve them
    timed_from_intended_start: ClassVar[bool] = False  # an iteration's first page is timed from when it was due
    duration_keys: ClassVar[tuple[str, ...]] = ("ramp_up", "hold", "ramp_down")  # they add up to the duration
    users_key: ClassVar[str | None] = "users"  # the parameter the CLI's --users sets (None: not one)
    hold_exclusive: ClassVar[bool] = False  # the hold must be more than 0 (not only the sum)
    example: ClassVar[dict[str, Any]]  # a valid profile object of this kind (docs, tests)

    @property
    def fields(self) -> tuple[str, ...]:
        """The flat parameters this kind takes, in PARAMETERS order."""
        keys = set(self.required) | set(self.optional)
        return tuple(p for p in PARAMETERS if p in keys)

    # -- the plan format ------------------------------------------------------------------

    def parse(self, d: dict[str, Any], path: str) -> Profile:
        """A checked Profile from the plan's object (keys already checked against required/optional)."""
        profile = Profile(
            kind=self.name,
            users=_int(d["users"], f"{path}.users", minimum=1, maximum=MAX_USERS),
            ramp_up=_number(d.get("ramp_up", 0.0), f"{path}.ramp_up"),
            hold=_number(d["hold"], f"{path}.hold", exclusive=self.hold_exclusive),
            ramp_down=_number(d.get("ramp_down", 0.0), f"{path}.ramp_down"),
            pacing=_number(d["pacing"], f"{path}.pacing", exclusive=True) if "pacing" in self.required else 0.0,
        )
        if self.duration(profile) <= 0:
            raise PlanError(f"{path}: {' + '.join(self.duration_keys)} must be greater than 0")
        return profile

    def to_dict(self, p: Profile) -> dict[str, Any]:
        d: dict[str, Any] = {"kind": self.name}
        for key in self.fields:
            d[key] = getattr(p, key)
        return d

    def document(self, values: Mapping[str, Any], levels: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
        """The plan's profile object from flat values (the portal's columns); an optional None is left out."""
        d: dict[str, Any] = {"kind": self.name}
        if self.uses_levels:
            d["levels"] = [dict(level) for level in levels]
        for key in self.fields:
            if key in self.optional and values.get(key) is None:
                continue
            d[key] = values.get(key)
        return d

    def unchecked(self, values: Mapping[str, Any], levels: Sequence[Any] = ()) -> Profile:
        """A Profile from flat values that may be incomplete (a form being filled in): None counts as 0."""

        def v(key: str) -> float:
            return values.get(key) or 0.0

        return Profile(
            kind=self.name,
            users=int(values.get("users") or 0),
            hold=v("hold"),
            ramp_up=v("ramp_up"),
            ramp_down=v("ramp_down"),
            pacing=v("pacing"),
        )

    # -- the shape ----------------------------------------------------------------------------

    def duration(self, p: Any) -> float:
        """Seconds from the run's start until the last user stops starting steps (or the last arrival is due)."""
        return p.ramp_up + p.hold + p.ramp_down

    def peak_users(self, p: Any) -> int:
        """The most virtual users active at once (for an open model, the pool's cap)."""
        return p.users

    def user_windows(self, k: int, p: Any) -> list[tuple[float, float]]:
        return [_ramp_window(k, p.users, p.ramp_up, p.hold, p.ramp_down)]

    def users_at(self, t: float, p: Any) -> int | None:
        return _ramp_active(t, p.users, p.ramp_up, p.hold, p.ramp_down)

    def rate_at(self, t: float, p: Any) -> float | None:
        """Iterations per second the plan starts at ``t``; None when the target's response times decide."""
        return None

    def windows(self, p: Any) -> list[tuple[float, float, str]]:
        """The measured parts: (start, end, label)."""
        return [(p.ramp_up, p.ramp_up + p.hold, "Hold")]

    def corners(self, p: Any) -> list[float]:
        """Times where the shape bends, so that a sampled chart keeps its corners."""
        a = p.ramp_up
        b = a + p.hold
        return [0.0, a, b, b + p.ramp_down]

    # -- in words -----------------------------------------------------------------------------

    def describe(self, p: Any, w: Words = WORDS) -> str:
        """The profile in a sentence, e.g. "20 users: 10 s ramp-up, 1 min measured, 0 s ramp-down"."""
        return f"{w.plural(p.users, 'user')}: {self._ramp_words(p, w)}"

    def _ramp_words(self, p: Any, w: Words) -> str:
        return f"{w.duration(p.ramp_up)} ramp-up, {w.duration(p.hold)} measured, {w.duration(p.ramp_down)} ramp-down"

    def load_words(self, p: Any, w: Words = WORDS) -> str:
        """Its size in a few words, for lists: "50 users", "20 → 50 users", "20 iterations/s"."""
        return w.plural(p.users, "user")

    def size_words(self, p: Any, w: Words = WORDS) -> str:
        """A run's load in a few words (the runs list): "20 users", "5 levels up to 200 users"."""
        return self.load_words(p, w)

    def cli_words(self, p: Any) -> str:
        """The command line's one-line summary."""
        return f"{p.users} users, {p.hold:g} s hold"


KINDS: dict[str, ProfileKind] = {}


def register(cls: type[ProfileKind]) -> type[ProfileKind]:
    KINDS[cls.name] = cls()
    return cls


def kind_named(name: str | None) -> ProfileKind:
    """The kind called ``name`` (missing: ``ramp``, the default); KeyError for an unknown one."""
    return KINDS[name or "ramp"]


def kind_of(profile: Any) -> ProfileKind:
    """The kind of a Profile (or any object with a ``kind``; none means ``ramp``)."""
    return KINDS[getattr(profile, "kind", "ramp") or "ramp"]


def parse(d: Any, path: str) -> Profile:
    """The plan's ``profile`` object, checked by its kind."""
    if not isinstance(d, dict):
        raise PlanError(f"{path}: must be an object")
    name = d.get("kind", "ramp")
    if name not in KINDS:
        raise PlanError(f"{path}.kind: must be one of {', '.join(KINDS)}")
    kind = KINDS[name]
    _obj(d, path, required=kind.required, optional=("kind", *kind.optional))
    return kind.parse(d, path)


# -- the kinds ---------------------------------------------------------------------------------


@register
class Constant(ProfileKind):
    name = "constant"
    position = 1
    label = "Constant: all users from the start"
    help = "All users start at once and run for the hold, which is measured as a whole."
    required = ("users", "hold")
    duration_keys = ("hold",)
    hold_exclusive = True
    example = {"kind": "constant", "users": 5, "hold": 30}

    def duration(self, p: Any) -> float:
        return p.hold

    def user_windows(self, k: int, p: Any) -> list[tuple[float, float]]:
        return [(0.0, p.hold)]

    def users_at(self, t: float, p: Any) -> int | None:
        return p.users if 0 <= t < p.hold else 0

    def windows(self, p: Any) -> list[tuple[float, float, str]]:
        return [(0.0, p.hold, "Hold")]

    def corners(self, p: Any) -> list[float]:
        return [0.0, p.hold]

    def describe(self, p: Any, w: Words = WORDS) -> str:
        return f"{w.plural(p.users, 'user')} from the start, {w.duration(p.hold)} measured"


@register
class Ramp(ProfileKind):
    name = "ramp"
    position = 0
    label = "Ramp: up, hold, down"
    help = (
        "Users start one after another over the ramp-up, all run during the hold, then leave over the ramp-down. "
        "The hold is measured."
    )
    required = ("users", "hold")
    optional = ("ramp_up", "ramp_down")
    example = {"kind": "ramp", "users": 10, "ramp_up": 10, "hold": 60, "ramp_down": 5}

    def document(self, values: Mapping[str, Any], levels: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
        # A ramp has no "kind" key: it is the engine's default, and older engines refuse the key.
        return {key: values.get(key) for key in ("users", "ramp_up", "hold", "ramp_down")}


@register
class Steps(ProfileKind):
    name = "steps"
    position = 2
    label = "Steps: a suite of levels"
    help = (
        "A suite of levels: each ramps up to its users, holds (measured), ramps down to none, then waits its "
        "quiet time before the next level. Each level's hold is one measured window."
    )
    required = ("levels",)
    uses_levels = True
    duration_keys = ()
    users_key = None
    example = {
        "kind": "steps",
        "levels": [
            {"users": 2, "ramp_up": 2, "hold": 10, "ramp_down": 1, "quiet": 2},
            {"users": 4, "ramp_up": 0, "hold": 10, "ramp_down": 0, "quiet": 0},
        ],
    }

    def parse(self, d: dict[str, Any], path: str) -> Profile:
        levels = d["levels"]
        if not isinstance(levels, list) or not levels:
            raise PlanError(f"{path}.levels: must be a non-empty list")
        if len(levels) > MAX_LEVELS:
            raise PlanError(f"{path}.levels: must have at most {MAX_LEVELS} levels")
        parsed = []
        for i, level in enumerate(levels):
            at = f"{path}.levels[{i}]"
            _obj(level, at, required=("users", "hold"), optional=("ramp_up", "ramp_down", "quiet"))
            users = _int(level["users"], f"{at}.users", minimum=1)
            if users > MAX_USERS:
                raise PlanError(f"{at}.users: must be at most {MAX_USERS}")
            parsed.append(
                Level(
                    users=users,
                    ramp_up=_number(level.get("ramp_up", 0.0), f"{at}.ramp_up"),
                    hold=_number(level["hold"], f"{at}.hold", exclusive=True),
                    ramp_down=_number(level.get("ramp_down", 0.0), f"{at}.ramp_down"),
                    quiet=_number(level.get("quiet", 0.0), f"{at}.quiet"),
                )
            )
        return Profile(kind="steps", users=max(level.users for level in parsed), hold=0.0, levels=tuple(parsed))

    def to_dict(self, p: Profile) -> dict[str, Any]:
        return {"kind": "steps", "levels": [level.to_dict() for level in p.levels]}

    def unchecked(self, values: Mapping[str, Any], levels: Sequence[Any] = ()) -> Profile:
        levels = tuple(_level(lv) for lv in (levels or values.get("levels") or ()))
        return Profile(kind="steps", users=max((lv.users for lv in levels), default=0), hold=0.0, levels=levels)

    def duration(self, p: Any) -> float:
        # The run ends when the last level has ramped down: its quiet time is not waited for.
        levels = p.levels
        if not levels:
            return 0.0
        return level_starts(p)[-1] + levels[-1].ramp_up + levels[-1].hold + levels[-1].ramp_down

    def user_windows(self, k: int, p: Any) -> list[tuple[float, float]]:
        windows = []
        for start, level in zip(level_starts(p), p.levels, strict=True):
            if k < level.users:
                a, b = _ramp_window(k, level.users, level.ramp_up, level.hold, level.ramp_down)
                windows.append((start + a, start + b))
        return windows

    def users_at(self, t: float, p: Any) -> int | None:
        for start, level in zip(level_starts(p), p.levels, strict=True):
            if start <= t < start + level.ramp_up + level.hold + level.ramp_down:
                return _ramp_active(t - start, level.users, level.ramp_up, level.hold, level.ramp_down)
        return 0

    def windows(self, p: Any) -> list[tuple[float, float, str]]:
        return [
            (
                start + level.ramp_up,
                start + level.ramp_up + level.hold,
                f"Level {i + 1}: {level.users} user{'' if level.users == 1 else 's'}",
            )
            for i, (start, level) in enumerate(zip(level_starts(p), p.levels, strict=True))
        ]

    def corners(self, p: Any) -> list[float]:
        out = []
        for start, level in zip(level_starts(p), p.levels, strict=True):
            a = start + level.ramp_up
            b = a + level.hold
            out += [start, a, b, b + level.ramp_down, b + level.ramp_down + level.quiet]
        return out

    def describe(self, p: Any, w: Words = WORDS) -> str:
        levels = p.levels
        if not levels:
            return "Steps with no levels yet"
        users = " → ".join(str(u) for u in (levels[0].users, levels[-1].users)) if len(levels) > 1 else None
        parts = [
            users and f"{users} users" or w.plural(levels[0].users, "user"),
            f"{w.span([lv.ramp_up for lv in levels])} ramp-up",
            f"{w.span([lv.hold for lv in levels])} measured",
            f"{w.span([lv.ramp_down for lv in levels])} ramp-down",
            f"{w.span([lv.quiet for lv in levels])} quiet",
        ]
        count = f"{len(levels)} level{'' if len(levels) == 1 else 's'}"
        return f"{count}: {', '.join(parts)}{' each' if len(levels) > 1 else ''}"

    def load_words(self, p: Any, w: Words = WORDS) -> str:
        users = [level.users for level in p.levels]
        if len(users) > 1:
            return f"{users[0]} → {users[-1]} users"
        return w.plural(users[0], "user") if users else "no levels"

    def size_words(self, p: Any, w: Words = WORDS) -> str:
        return f"{w.plural(len(p.levels), 'level')} up to {w.plural(p.users, 'user')}"

    def cli_words(self, p: Any) -> str:
        return f"steps of {', '.join(str(level.users) for level in p.levels)} users"


@register
class Pacing(ProfileKind):
    name = "pacing"
    position = 3
    label = "Pacing: one iteration every N seconds per user"
    help = (
        "Like a ramp, but each user starts one iteration every <em>pacing</em> seconds whatever the response "
        "times (think times still apply between its steps). The hold is measured."
    )
    required = ("users", "hold", "pacing")
    optional = ("ramp_up", "ramp_down")
    timed_from_intended_start = True
    example = {"kind": "pacing", "users": 4, "ramp_up": 2, "hold": 20, "ramp_down": 0, "pacing": 2}

    def rate_at(self, t: float, p: Any) -> float | None:
        return (self.users_at(t, p) or 0) / p.pacing

    def describe(self, p: Any, w: Words = WORDS) -> str:
        every = w.number(p.pacing)
        return f"{w.plural(p.users, 'user')}, each starting an iteration every {every} s: {self._ramp_words(p, w)}"

    def cli_words(self, p: Any) -> str:
        return f"{super().cli_words(p)}, one iteration every {p.pacing:g} s"


@register
class ArrivalRate(ProfileKind):
    name = "arrival_rate"
    position = 4
    label = "Arrival rate: iterations per second (open model)"
    help = (
        "An open model: iterations start at the given rate whatever the responses, each on a free user, up to "
        "the maximum; an iteration that finds no free user is dropped and counted. The hold is measured."
    )
    required = ("rate", "hold", "max_users")
    optional = ("rate_start", "ramp_up")
    open_model = True
    timed_from_intended_start = True
    duration_keys = ("ramp_up", "hold")
    users_key = "max_users"
    example = {"kind": "arrival_rate", "rate": 5, "rate_start": 1, "ramp_up": 5, "hold": 20, "max_users": 10}

    def parse(self, d: dict[str, Any], path: str) -> Profile:
        rate = _number(d["rate"], f"{path}.rate", exclusive=True)
        if rate > MAX_RATE:
            raise PlanError(f"{path}.rate: must be at most {MAX_RATE:g} per second")
        rate_start = _number(d.get("rate_start", rate), f"{path}.rate_start")
        if rate_start > MAX_RATE:
            raise PlanError(f"{path}.rate_start: must be at most {MAX_RATE:g} per second")
        profile = Profile(
            kind=self.name,
            users=_int(d["max_users"], f"{path}.max_users", minimum=1, maximum=MAX_USERS),
            rate=rate,
            rate_start=rate_start,
            ramp_up=_number(d.get("ramp_up", 0.0), f"{path}.ramp_up"),
            hold=_number(d["hold"], f"{path}.hold"),
        )
        if self.duration(profile) <= 0:
            raise PlanError(f"{path}: ramp_up + hold must be greater than 0")
        return profile

    def to_dict(self, p: Profile) -> dict[str, Any]:
        return {
            "kind": self.name,
            "rate": p.rate,
            "rate_start": p.rate_start,
            "ramp_up": p.ramp_up,
            "hold": p.hold,
            "max_users": p.users,
        }

    def unchecked(self, values: Mapping[str, Any], levels: Sequence[Any] = ()) -> Profile:
        rate = values.get("rate") or 0.0
        start = values.get("rate_start")
        return Profile(
            kind=self.name,
            users=int(values.get("max_users") or 0),
            rate=rate,
            rate_start=rate if start is None else start,
            ramp_up=values.get("ramp_up") or 0.0,
            hold=values.get("hold") or 0.0,
        )

    def duration(self, p: Any) -> float:
        return p.ramp_up + p.hold

    def user_windows(self, k: int, p: Any) -> list[tuple[float, float]]:
        raise ValueError("an arrival_rate profile has no user windows: its users serve arrivals")

    def users_at(self, t: float, p: Any) -> int | None:
        return None  # it depends on the target's response times

    def rate_at(self, t: float, p: Any) -> float | None:
        if t < 0 or t >= p.ramp_up + p.hold:
            return 0.0
        if t < p.ramp_up:
            return p.rate_start + (p.rate - p.rate_start) * t / p.ramp_up
        return p.rate

    def corners(self, p: Any) -> list[float]:
        return [0.0, p.ramp_up, p.ramp_up + p.hold, p.ramp_up + p.hold]

    def describe(self, p: Any, w: Words = WORDS) -> str:
        rate = w.number(p.rate)
        ramp = ""
        if p.ramp_up:
            ramp = f"{w.number(p.rate_start)} → {rate} iterations/s over {w.duration(p.ramp_up)}, then "
        return f"{ramp}{rate} iterations/s for {w.duration(p.hold)} measured, at most {w.plural(p.users, 'user')}"

    def load_words(self, p: Any, w: Words = WORDS) -> str:
        return f"{w.number(p.rate)} iterations/s"

    def size_words(self, p: Any, w: Words = WORDS) -> str:
        return self.load_words(p, w)

    def cli_words(self, p: Any) -> str:
        ramp = f" (from {p.rate_start:g}/s over {p.ramp_up:g} s)" if p.ramp_up else ""
        return f"{p.rate:g} iterations/s{ramp}, at most {p.users} users, {p.hold:g} s hold"


# -- shared arithmetic -------------------------------------------------------------------------


def _ramp_window(k: int, n: int, ramp_up: float, hold: float, ramp_down: float) -> tuple[float, float]:
    return ramp_up * k / n, ramp_up + hold + ramp_down * (n - 1 - k) / n


def _level(lv: Any) -> Any:
    """A level as an object: a Mapping (a stored profile object, maybe incomplete) becomes a Level."""
    if not isinstance(lv, Mapping):
        return lv
    return Level(**{key: lv.get(key) or 0 for key in ("users", "hold", "ramp_up", "ramp_down", "quiet")})


def level_starts(profile: Any) -> list[float]:
    """Start time of each level of a ``steps`` profile."""
    starts = []
    t = 0.0
    for level in profile.levels:
        starts.append(t)
        t += level.ramp_up + level.hold + level.ramp_down + level.quiet
    return starts


def _ramp_active(t: float, n: int, ramp_up: float, hold: float, ramp_down: float) -> int:
    """Users of a ramp active at ``t``, in O(1) but exactly as ``_ramp_window`` decides (same float arithmetic)."""
    if n <= 0 or t < 0:
        return 0

    def start(k: int) -> float:
        return ramp_up * k / n

    def stop(k: int) -> float:
        return ramp_up + hold + ramp_down * (n - 1 - k) / n

    # started: users 0..s-1 with start(k) <= t (start grows with k)
    s = n if ramp_up <= 0 else min(n, max(0, int(t * n / ramp_up) + 1))
    while s < n and start(s) <= t:
        s += 1
    while s > 0 and start(s - 1) > t:
        s -= 1
    # stopped: users f..n-1 with stop(k) <= t (stop falls as k grows)
    end = ramp_up + hold
    if t < end:
        f = n
    elif ramp_down <= 0:
        f = 0
    else:
        f = min(n, max(0, n - 1 - int((t - end) * n / ramp_down)))
    while f > 0 and stop(f - 1) <= t:
        f -= 1
    while f < n and stop(f) > t:
        f += 1
    return max(0, min(s, f))
