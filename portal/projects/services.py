"""Writes that touch several rows or enforce a rule; views call these, never the other way round."""

import datetime
import json
import pickle
import re
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.files.uploadedfile import UploadedFile
from django.db import IntegrityError, transaction
from django.db.models import Max, QuerySet
from django.utils import timezone

from portal.accounts.models import Team
from portal.common import Invalid, write_private
from portal.telemetry.promql import check_prometheus_url, token_encrypt
from workers.engine.targets import BadTargetURL, parse_target_url

from . import har, profiles, rules
from .models import DataSet, Environment, HarImport, MixEntry, Plan, PlanLevel, Project, Server, Step, TestCase


class InUse(Exception):
    """Refused: something still refers to the object (a plan uses this environment or test case)."""


def _names(queryset: QuerySet) -> str:
    return ", ".join(f"“{name}”" for name in queryset.order_by("name").values_list("name", flat=True))


def _move(queryset: QuerySet, pk: int, direction: str) -> list:
    """Moves row ``pk`` one place up or down and renumbers all positions densely 0..n-1."""
    rows = list(queryset.select_for_update().order_by("position", "id"))
    index = next(i for i, row in enumerate(rows) if row.pk == pk)
    other = index - 1 if direction == "up" else index + 1
    if 0 <= other < len(rows):
        rows[index], rows[other] = rows[other], rows[index]
    return _renumber(rows)


def _renumber(rows: list) -> list:
    changed = []
    for position, row in enumerate(rows):
        if row.position != position:
            row.position = position
            changed.append(row)
    if changed:
        type(changed[0]).objects.bulk_update(changed, ["position"])
    return rows


def _next_position(queryset: QuerySet) -> int:
    last = queryset.aggregate(last=Max("position"))["last"]
    return 0 if last is None else last + 1


@transaction.atomic
def project_create(*, team: Team, name: str, description: str = "") -> Project:
    return Project.objects.create(team=team, name=name, description=description)


@transaction.atomic
def project_delete(*, project: Project) -> None:
    # The whole project goes, its results history too (the confirmation page lists it). Experiments
    # go first: they PROTECT their plan and their tuning change, which the cascade removes.
    project.experiments.all().delete()
    # Plans go first: they PROTECT the environments and (through their mix) the test cases
    # that the project's cascade would otherwise refuse to delete. Runs keep their snapshots
    # until the project's cascade removes them too.
    MixEntry.objects.filter(plan__project=project).delete()
    project.plans.all().delete()
    project.delete()


@dataclass(frozen=True)
class ServerSpec:
    """One server row of an environment, in the order given; ``id`` names an existing row to edit in place."""

    name: str
    role: str = ""
    hardware: str = ""
    metrics_url: str = ""
    counter_set: str = ""
    prometheus_selector: str = ""
    id: int | None = None


ENVIRONMENT_NAME_TAKEN = "This project already has an environment called “{name}”."


@transaction.atomic
def environment_save(
    *,
    project: Project,
    environment: Environment | None = None,
    name: str,
    base_url: str,
    description: str = "",
    metrics_interval_s: int | None = None,
    configuration: list[dict] | None = None,
    servers: list[ServerSpec] | None = None,
    config_url: str | None = None,
    generator_pool: str | None = None,
    prometheus_url: str | None = None,
    prometheus_token: str | None = None,
    trace_url_template: str | None = None,
    otlp_endpoint: str | None = None,
    protocol: str | None = None,
    ca_bundle: str | None = None,
    ca_bundle_name: str | None = None,
) -> Environment:
    """Creates or changes an environment and (unless ``servers`` is None) replaces its server rows.

    The configuration is given at creation only: afterwards it changes through tuning changes
    (portal.history), so that every run can name the configuration it measured. Servers with an
    ``id`` keep their row (their metrics stay attached); rows left out are deleted. Raises Invalid.
    ``prometheus_url`` and ``prometheus_token``: None leaves them unchanged, "" clears them; the
    token is stored encrypted and never shown back.
    """
    errors: dict = {}
    env = environment if environment is not None else Environment(project=project)
    if env.project_id != project.pk:
        errors["project"] = ["An environment stays in its project."]
    name = (name or "").strip()
    if messages := rules.name_taken(
        Environment, project=project, name=name, exclude_pk=env.pk, message=ENVIRONMENT_NAME_TAKEN
    ):
        errors["name"] = messages
    base_url, messages = rules.clean_base_url(base_url)
    if messages:
        errors["base_url"] = messages
    if configuration is not None:
        if environment is not None:
            errors["configuration"] = [
                "The configuration changes only through tuning changes (/api/v1/tuning-changes/)."
            ]
        elif messages := rules.configuration_errors(configuration):
            errors["configuration"] = messages
    if config_url is not None:  # None: unchanged
        config_url = config_url.strip()
        if config_url:
            try:
                parse_target_url(config_url)
            except BadTargetURL as exc:
                errors["config_url"] = [str(exc)]
        env.config_url = config_url
    if prometheus_url is not None:
        prometheus_url = prometheus_url.strip().rstrip("/")
        if prometheus_url:
            try:
                prometheus_url = check_prometheus_url(prometheus_url)
            except ValueError as exc:
                errors["prometheus_url"] = [f"This Prometheus cannot be queried: {exc}"]
        env.prometheus_url = prometheus_url
    if prometheus_token is not None:
        env.prometheus_token = token_encrypt(prometheus_token.strip())
    if protocol is not None:  # None: unchanged; checked against the choices below
        env.protocol = protocol or "auto"
    if ca_bundle is not None:  # None: unchanged, "": no bundle
        bundle, messages = rules.clean_ca_bundle(ca_bundle)
        if messages:
            errors["ca_bundle"] = messages
        env.ca_bundle = bundle
        env.ca_bundle_name = (ca_bundle_name or "").strip()[:255] if bundle else ""
    if trace_url_template is not None:  # None: unchanged; checked by the field's validator below
        env.trace_url_template = trace_url_template.strip()
    if otlp_endpoint is not None:  # None: unchanged; checked by the field's validator below
        env.otlp_endpoint = otlp_endpoint.strip()
    env.name, env.base_url, env.description = name, base_url, description or ""
    env.metrics_interval_s = metrics_interval_s if metrics_interval_s is not None else (env.metrics_interval_s or 5)
    if generator_pool is not None:  # issue 25: the pool names a Celery queue (engine.<pool>)
        generator_pool = generator_pool.strip()
        if generator_pool and not re.fullmatch(r"[-a-zA-Z0-9_]+", generator_pool):
            errors["generator_pool"] = ["A pool's name has letters, numbers, underscores or hyphens only."]
        env.generator_pool = generator_pool
    if environment is None:
        env.configuration = [
            {"key": str(i["key"]).strip(), "value": str(i.get("value", ""))} for i in configuration or []
        ]
    for field, messages in rules.model_field_errors(env, exclude=["project", "configuration"]).items():
        errors.setdefault(field, messages)
    rows = []
    if servers is not None:
        existing = {s.pk: s for s in env.servers.all()} if env.pk else {}
        server_errors = []
        for spec in servers:
            row = existing.get(spec.id) if spec.id is not None else Server(environment=env)
            problems = {}
            if row is None:
                row, problems = Server(environment=env), {"id": ["Not a server of this environment."]}
            metrics_url, more = rules.server_errors(metrics_url=spec.metrics_url, counter_set=spec.counter_set)
            row.name, row.role, row.hardware = spec.name.strip(), spec.role, spec.hardware
            row.metrics_url, row.counter_set = metrics_url, spec.counter_set
            problems.update(more)
            row.prometheus_selector, more = rules.prometheus_errors(
                selector=spec.prometheus_selector, counter_set=spec.counter_set, prometheus_url=env.prometheus_url
            )
            for field, messages in more.items():
                problems.setdefault(field, messages)
            for field, messages in rules.model_field_errors(row, exclude=["environment"]).items():
                problems.setdefault(field, messages)
            server_errors.append(problems)
            rows.append(row)
        if any(server_errors):
            errors["servers"] = server_errors
    if errors:
        raise Invalid(errors)
    env.save()
    if servers is not None:
        kept = {row.pk for row in rows if row.pk}
        env.servers.exclude(pk__in=kept).delete()
        for position, row in enumerate(rows):
            row.environment, row.position = env, position
            row.save()
    return env


@transaction.atomic
def environment_delete(*, environment: Environment) -> None:
    plans = environment.plans.all()
    if plans.exists():
        raise InUse(f"“{environment}” is used by the plans {_names(plans)}; change or delete them first.")
    environment.delete()


def plan_delete_refusal(plan: Plan) -> str | None:
    """Why ``plan`` cannot be deleted, or None.

    An experiment and its trial sets are the record of a tuning journey: they are kept,
    so the plan they measured with stays too. Deleting the project deletes all of them.
    """
    titles = list(plan.experiments.order_by("title").values_list("title", flat=True))
    if not titles:
        return None
    return (
        f"“{plan}” is the plan of the experiments {', '.join(f'“{t}”' for t in titles)}, which are part of "
        "the project's results history; the plan stays as long as they do (deleting the project deletes them all)."
    )


@transaction.atomic
def plan_delete(*, plan: Plan) -> None:
    """Deletes a plan and its mix; InUse while an experiment uses it."""
    if refusal := plan_delete_refusal(plan):
        raise InUse(refusal)
    plan.delete()


@transaction.atomic
def test_case_delete(*, test_case: TestCase) -> None:
    plans = Plan.objects.filter(mix__test_case=test_case)
    if plans.exists():
        raise InUse(f"“{test_case}” is in the mix of the plans {_names(plans)}; remove it from them first.")
    test_case.delete()


@transaction.atomic
def step_create(*, test_case: TestCase, step: Step) -> Step:
    """Saves an unsaved step as the last of its test case."""
    step.test_case = test_case
    step.position = _next_position(test_case.steps.all())
    step.save()
    return step


@transaction.atomic
def step_delete(*, step: Step) -> None:
    test_case = step.test_case
    step.delete()
    _renumber(list(test_case.steps.select_for_update().order_by("position", "id")))


@transaction.atomic
def step_move(*, step: Step, direction: str) -> list[Step]:
    return _move(Step.objects.filter(test_case_id=step.test_case_id), step.pk, direction)


@transaction.atomic
def step_move_to(*, step: Step, position: int) -> list[Step]:
    """Puts ``step`` at ``position`` (0 is first; beyond the end is last) and renumbers the others densely.

    As the page's up and down arrows, a move that leaves a ``{{name}}`` before its extraction is
    allowed: the test case then lists the problem (TestCase.placeholder_problems) until it is fixed.
    """
    rows = list(Step.objects.filter(test_case_id=step.test_case_id).select_for_update().order_by("position", "id"))
    moved = next(row for row in rows if row.pk == step.pk)
    rows.remove(moved)
    rows.insert(max(0, min(position, len(rows))), moved)
    return _renumber(rows)


@transaction.atomic
def data_set_save(
    *, test_case: TestCase, file_name: str, columns: list[str], rows: list[list[str]], mode: str
) -> DataSet:
    """Sets (or replaces) the test case's data set with rows parsed from an upload."""
    data_set, _ = DataSet.objects.update_or_create(
        test_case=test_case,
        defaults={"file_name": file_name[:255], "columns": columns, "rows": rows, "row_count": len(rows), "mode": mode},
    )
    return data_set


@transaction.atomic
def data_set_mode_set(*, data_set: DataSet, mode: str) -> DataSet:
    """How the rows are taken (sequential, random, unique); the rows stay."""
    if mode not in DataSet.Mode.values:
        raise Invalid({"mode": [rules.NOT_A_CHOICE]})
    data_set.mode = mode
    data_set.save(update_fields=["mode"])
    return data_set


@transaction.atomic
def data_set_delete(*, data_set: DataSet) -> None:
    data_set.delete()


# A plan's own values besides its name and environment (PlanForm's fields, the API document's).
PLAN_VALUES = (
    "description",
    "profile_kind",
    *Plan.PROFILE_INPUTS,
    "think_time_mode",
    "request_timeout",
    "protocol",
    "tls_accept_any",
    "trace_context",
    "trace_sample_rate",
    "threshold_apd_ms",
    "threshold_p95_ms",
    "threshold_error_rate_pct",
    "threshold_min_pages_per_s",
    "threshold_ttfe_p95_ms",
    "threshold_gap_p95_ms",
    "threshold_rtt_p95_ms",
    "threshold_min_h2_share_pct",
    "capacity_search",
    *Plan.DEGRADATION_INPUTS,
    "stop_criteria",
)
PLAN_NAME_TAKEN = "This project already has a plan called “{name}”."


@dataclass(frozen=True)
class LevelSpec:
    """One level of a steps profile."""

    users: int
    hold: float
    ramp_up: float = 0
    ramp_down: float = 0
    quiet: float = 0


def _plan_environment(project: Project, environment) -> Environment | None:
    if isinstance(environment, Environment):
        return environment if environment.project_id == project.pk else None
    try:
        return project.environments.filter(code=environment).first()
    except (ValueError, TypeError, ValidationError):
        return None


@transaction.atomic
def plan_save(
    *,
    project: Project,
    plan: Plan | None = None,
    name: str,
    environment: "Environment | str",
    values: dict,
    levels: list[LevelSpec] | None = None,
    mix: list[tuple["TestCase | str", int]] | None = None,
) -> Plan:
    """Creates or changes a plan from plain values (PLAN_VALUES; absent ones keep the plan's).

    Only the chosen kind's profile fields are checked and changed, so switching back finds the
    others as they were; empty degradation settings keep the plan's. ``levels`` (None: unchanged)
    replace the steps profile's levels; ``mix`` (None: unchanged) replaces the mix, as
    (test case or its code, weight) in order. Raises Invalid with every problem at once.
    """
    errors: dict = {}
    p = plan if plan is not None else Plan(project=project)
    if p.project_id != project.pk:
        errors["project"] = ["A project's objects stay in their project."]
    name = (name or "").strip()
    if messages := rules.name_taken(Plan, project=project, name=name, exclude_pk=p.pk, message=PLAN_NAME_TAKEN):
        errors["name"] = messages
    p.name = name
    env = _plan_environment(project, environment)
    if env is None:
        errors["environment"] = [rules.NOT_A_CHOICE]
    else:
        p.environment = env
    unknown = sorted(set(values) - set(PLAN_VALUES))
    if unknown:
        raise TypeError(f"plan_save: unknown values {unknown}")
    kind = values.get("profile_kind", p.profile_kind)
    if kind not in Plan.PROFILE_FIELDS:
        errors["profile_kind"] = [rules.NOT_A_CHOICE]
        kind = p.profile_kind
    used = Plan.PROFILE_FIELDS[kind]
    for field, value in values.items():
        if field in Plan.PROFILE_INPUTS and field not in used:
            continue  # not part of this kind: neither checked nor changed
        if value is None and field in Plan.DEGRADATION_INPUTS:
            continue  # empty: keeps the plan's
        if field == "description":
            value = value or ""
        setattr(p, field, value)
    p.profile_kind = kind
    for field in used:
        if getattr(p, field) is None and field not in Plan.OPTIONAL_PROFILE_FIELDS:
            errors.setdefault(field, [rules.REQUIRED])
    for field, messages in {
        **rules.threshold_errors({f: getattr(p, f) for f in rules.THRESHOLD_MAXIMA}),
        **rules.model_field_errors(p, exclude=["project", "environment", "name"]),
    }.items():
        errors.setdefault(field, messages)
    rows = None
    if levels is not None:
        rows = [
            PlanLevel(users=lv.users, ramp_up=lv.ramp_up, hold=lv.hold, ramp_down=lv.ramp_down, quiet=lv.quiet)
            for lv in levels
        ]
        level_errors = [rules.model_field_errors(row, exclude=["plan"]) for row in rows]
        if any(level_errors):
            errors["levels"] = level_errors
    if profiles.kind_named(kind).uses_levels:
        checked = rows if rows is not None else p.get_levels()
        if "levels" not in errors and (message := rules.levels_error(checked)):
            errors["levels"] = [message]
    elif "hold" not in errors and (message := rules.profile_duration_error(kind, {f: getattr(p, f) for f in used})):
        errors["hold"] = [message]
    if "stop_criteria" in values:
        p.stop_criteria = values["stop_criteria"] if values["stop_criteria"] is not None else []
    if "stop_criteria" not in errors and (
        messages := rules.stop_criteria_errors(p.stop_criteria, longest_hold=_longest_hold(p, kind, rows))
    ):
        errors["stop_criteria"] = messages
    elif "stop_criteria" not in errors:
        # Stored as the plan document writes them (defaults filled in: window_s), so every reader sees one form.
        p.stop_criteria = [r.to_dict() for r in p.stop_rules]
    entries = None
    if mix is not None:
        by_code = {str(tc.code): tc for tc in project.test_cases.all()}
        entries, mix_errors, seen = [], [], set()
        for test_case, weight in mix:
            tc = by_code.get(str(getattr(test_case, "code", test_case)))
            entry = MixEntry(test_case=tc, weight=weight)
            problems = rules.model_field_errors(entry, exclude=["plan", "test_case"])
            if tc is None:
                problems["test_case"] = ["Not a test case of this plan's project."]
            elif tc.pk in seen:
                problems["test_case"] = ["This test case is already in the mix."]
            else:
                seen.add(tc.pk)
            entries.append(entry)
            mix_errors.append(problems)
        if any(mix_errors):
            errors["mix"] = mix_errors
    if errors:
        raise Invalid(errors)
    p.save()
    if rows is not None:
        p.levels.all().delete()
        for position, row in enumerate(rows):
            row.plan, row.position = p, position
        PlanLevel.objects.bulk_create(rows)
    if entries is not None:
        p.mix.all().delete()
        for position, entry in enumerate(entries):
            entry.plan, entry.position = p, position
        MixEntry.objects.bulk_create(entries)
    p._levels = None  # read them again from the database
    return p


def _longest_hold(p: Plan, kind: str, rows) -> float | None:
    """The longest measured part of the profile (its hold; the longest level's for steps), None if unknown."""
    if kind == Plan.ProfileKind.STEPS:
        levels = rows if rows is not None else p.get_levels()
        holds = [lv.hold for lv in levels if lv.hold is not None]
        return max(holds) if holds else None
    return p.hold if isinstance(p.hold, int | float) else None


@transaction.atomic
def mix_entry_add(*, plan: Plan, test_case: TestCase, weight: int) -> MixEntry:
    if test_case.project_id != plan.project_id:
        raise ValueError("A plan's mix takes only its own project's test cases.")
    return MixEntry.objects.create(
        plan=plan, test_case=test_case, weight=weight, position=_next_position(plan.mix.all())
    )


@transaction.atomic
def mix_entry_remove(*, entry: MixEntry) -> None:
    plan = entry.plan
    entry.delete()
    _renumber(list(plan.mix.select_for_update().order_by("position", "id")))


@transaction.atomic
def mix_entry_move(*, entry: MixEntry, direction: str) -> list[MixEntry]:
    return _move(MixEntry.objects.filter(plan_id=entry.plan_id), entry.pk, direction)


# HAR imports: the uploaded recording waits on disk, private to its uploader, while the preview is open;
# it is deleted when the preview is confirmed or discarded, and by the sweep once it is older than
# settings.PLIMSOLL_HAR_UPLOAD_TTL_S (an abandoned preview). The test case is only written on confirmation.

_HAR_TOKEN = re.compile(r"^[A-Za-z0-9_-]{16,64}$")


class HarUploadGone(Exception):
    """The uploaded recording is no longer there: confirmed, discarded, or expired."""


def _har_dir() -> Path:
    return Path(settings.VAR_DIR) / "har-uploads"


def _har_path(*, project: Project, user_id: int, token: str) -> Path:
    if not _HAR_TOKEN.match(token):
        raise HarUploadGone("This import link is not valid.")
    return _har_dir() / f"{project.code}-{user_id}-{token}.har"


def allowed_target(url: str) -> str | None:
    """Why the run allowlist refuses ``url`` (None when it is allowed): the rule a HAR's hosts are sorted by."""
    from portal.outbound import targets_allowlist
    from workers.engine.targets import TargetNotAllowed, check_url

    try:
        check_url(url, targets_allowlist())
    except TargetNotAllowed as exc:
        return f"outside the allowed targets ({exc})"
    return None


def har_too_large(size: int) -> str | None:
    """Why a HAR of ``size`` bytes is refused (over PLIMSOLL_HAR_MAX_MB), or None: asked before reading it."""
    if size <= settings.PLIMSOLL_HAR_MAX_MB * 1024 * 1024:
        return None
    return (
        f"The file is {size / 1024 / 1024:.1f} MB; the limit is {settings.PLIMSOLL_HAR_MAX_MB} MB. "
        "Record only the journey you want to test (start recording just before it)."
    )


def har_entries(raw: bytes) -> list[har.Entry]:
    """The recording's entries, under the configured limits (har.HarError says what is wrong)."""
    return har.load(
        raw, max_bytes=settings.PLIMSOLL_HAR_MAX_MB * 1024 * 1024, max_values=settings.PLIMSOLL_HAR_MAX_JSON_VALUES
    )


def har_upload_store(*, project: Project, user_id: int, upload: UploadedFile) -> str:
    """Checks a HAR (raising har.HarError with the reason) and keeps it for its preview; returns its token.

    A HAR over PLIMSOLL_HAR_INLINE_MB is kept unchecked, in chunks (never whole in the web process's
    memory), and analysed by har_analysis_task, off the web request: its preview waits for the task
    (``har_analysis_state``) and says then why it is refused.
    """
    har_uploads_sweep()
    large = upload.size > settings.PLIMSOLL_HAR_INLINE_MB * 1024 * 1024
    data: bytes | Iterable[bytes] = upload.chunks() if large else upload.read()
    if not large:
        har.analyze(har_entries(data), allowed=allowed_target)  # refuse now what the preview could not show
    token = secrets.token_urlsafe(24)
    path = _har_path(project=project, user_id=user_id, token=token)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Owner-only: the recording holds what the browser sent, cookies and passwords included.
    write_private(path, data)
    if large:
        har_analysis_request(project=project, user_id=user_id, token=token, choices=har.Choices())
    return token


def har_preview_summary(preview: har.Preview) -> dict:
    """The preview as the API shows it (steps, hosts, correlations numbered from 1): no header, body or cookie."""
    return {
        "base_url": preview.base_url,
        "steps": [
            {
                "name": s.name,
                "kind": "websocket" if s.ws_actions is not None else "request",
                "method": s.method,
                "path": s.path,
                "think_time": s.think_time,
                "resources": s.resources,
                "recorded_protocol": s.recorded_protocol,
                **({"actions": len(s.ws_actions)} if s.ws_actions is not None else {}),
            }
            for s in preview.steps
        ],
        "hosts": [{"host": h.host, "requests": h.requests, "kept": h.kept, "reason": h.reason} for h in preview.hosts],
        "correlations": [
            {
                "name": c.name,
                "kind": c.kind,
                "step": c.step + 1,
                "uses": [u + 1 for u in c.uses],
                "accepted": c.accepted,
            }
            for c in preview.correlations
        ],
        "variables_needed": preview.variables_needed(),
        "notes": list(preview.notes),
    }


# A large HAR through the API: the recording waits on disk as a page upload does (same path, same
# sweep), a HarImport row says how its analysis goes; har_analysis_process finishes it (the test case
# or the preview's summary, or the refusal) and deletes the recording at once.


def har_api_import_start(
    *, project: Project, user, chunks: Iterable[bytes], file_name: str, name: str, dry_run: bool, rejected: set[str]
) -> HarImport:
    """Keeps a large HAR and queues its analysis (har_analysis_task); the row is the client's status."""
    if not dry_run:
        _test_case_name_free(project, name)
    har_uploads_sweep()
    token = secrets.token_urlsafe(24)
    path = _har_path(project=project, user_id=user.pk, token=token)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_private(path, chunks)  # in chunks: a 50 MB recording is never whole in the web process's memory
    item = HarImport.objects.create(
        project=project, created_by=user, token=token, file_name=file_name, name=name, dry_run=dry_run
    )
    har_analysis_request(project=project, user_id=user.pk, token=token, choices=har.Choices(rejected=rejected))
    return item


def _har_api_import_finish(item: HarImport, preview: har.Preview | None, error: str) -> None:
    test_case = None
    if preview is not None and not item.dry_run:
        try:
            test_case = test_case_import(
                project=item.project,
                name=item.name,
                steps=preview.step_fields(),
                description=f"Imported from {item.file_name} through the API.",
            )
        except ImportRefused as exc:
            error = str(exc)
    HarImport.objects.filter(pk=item.pk, status=HarImport.Status.ANALYSING).update(
        status=HarImport.Status.FAILED if error else HarImport.Status.DONE,
        error=error,
        preview=har_preview_summary(preview) if preview is not None and not error else None,
        test_case=test_case,
        finished_at=timezone.now(),
    )


# A large HAR's analysis: beside ``x.har``, ``x.har.state`` (JSON: the state, the choices it is for,
# the refusal) and ``x.har.preview`` (the pickled preview, written by the task, read by the page).


def _choices_dict(choices: har.Choices) -> dict:
    return {
        "rejected": sorted(choices.rejected),
        "keep_headers": sorted(choices.keep_headers),
        "keep_fields": sorted(choices.keep_fields),
        "vary_fields": sorted(choices.vary_fields),
        "variables": dict(sorted(choices.variables.items())),
    }


def _choices_of(d: dict) -> har.Choices:
    return har.Choices(
        rejected=set(d["rejected"]),
        keep_headers=set(d["keep_headers"]),
        keep_fields=set(d["keep_fields"]),
        vary_fields=set(d["vary_fields"]),
        variables=dict(d["variables"]),
    )


def har_analysis_request(*, project: Project, user_id: int, token: str, choices: har.Choices) -> None:
    """Asks har_analysis_task for the preview of a large HAR with ``choices``; the page waits for it."""
    from portal.common import task

    path = _har_path(project=project, user_id=user_id, token=token)
    state = {"state": "analysing", "choices": _choices_dict(choices), "since": time.time()}
    write_private(path.with_name(path.name + ".state"), json.dumps(state).encode())
    args = (project.id, user_id, token)
    transaction.on_commit(lambda: task("har_analysis_task").delay(*args))


def har_analysis_state(*, project: Project, user_id: int, token: str) -> dict | None:
    """A large HAR's analysis: {"state": "analysing" | "ready" | "refused", "choices", "since", "error"}.

    None for a HAR analysed in the web request (small); HarUploadGone when the recording is gone.
    """
    path = _har_path(project=project, user_id=user_id, token=token)
    try:
        state = json.loads(path.with_name(path.name + ".state").read_bytes())
    except FileNotFoundError:
        return None
    if state["state"] != "refused":
        _har_live(path)
    state["choices"] = _choices_of(state["choices"])
    return state


def har_analysis_process(*, project_id: int, user_id: int, token: str) -> None:
    """The task's work: analyses a large HAR with the choices asked last and keeps the preview for its page."""
    project = Project.objects.get(id=project_id)
    path = _har_path(project=project, user_id=user_id, token=token)
    state_path = path.with_name(path.name + ".state")
    try:
        asked = json.loads(state_path.read_bytes())
        raw = path.read_bytes()
    except FileNotFoundError:
        return  # discarded or swept meanwhile
    api_import = HarImport.objects.filter(project=project, token=token).first()
    if api_import is not None:  # one delivery of this task claims it; another one leaves it alone
        queued = HarImport.objects.filter(pk=api_import.pk, status=HarImport.Status.QUEUED)
        if not queued.update(status=HarImport.Status.ANALYSING):
            return
    try:
        preview = har.analyze(har_entries(raw), allowed=allowed_target, choices=_choices_of(asked["choices"]))
    except har.HarError as exc:
        if api_import is not None:
            har_upload_discard(project=project, user_id=user_id, token=token)
            return _har_api_import_finish(api_import, None, str(exc))
        path.unlink(missing_ok=True)  # nothing of a refused recording is kept
        path.with_name(path.name + ".preview").unlink(missing_ok=True)
        done = {**asked, "state": "refused", "error": str(exc)}
    except Exception:
        if api_import is not None:  # its client would poll "analysing" until the sweep: it fails now
            har_upload_discard(project=project, user_id=user_id, token=token)
            _har_api_import_finish(api_import, None, "The analysis stopped on an error; nothing was imported.")
        raise
    else:
        if api_import is not None:  # the API's client reads the outcome from the row: nothing of the file is kept
            har_upload_discard(project=project, user_id=user_id, token=token)
            return _har_api_import_finish(api_import, preview, "")
        write_private(path.with_name(path.name + ".preview"), pickle.dumps(preview))
        done = {**asked, "state": "ready"}
    try:
        if json.loads(state_path.read_bytes()) != asked:
            return  # other choices were asked meanwhile: their own task answers them
    except FileNotFoundError:
        return
    write_private(state_path, json.dumps(done).encode())


def har_preview_kept(*, project: Project, user_id: int, token: str) -> har.Preview:
    """The preview har_analysis_process kept (for the choices of ``har_analysis_state``)."""
    path = _har_path(project=project, user_id=user_id, token=token)
    try:
        return pickle.loads(path.with_name(path.name + ".preview").read_bytes())  # our own file, owner-only
    except FileNotFoundError:
        raise HarUploadGone("This recording is no longer here: upload it again.") from None


def har_upload_read(*, project: Project, user_id: int, token: str) -> bytes:
    path = _har_path(project=project, user_id=user_id, token=token)
    _har_live(path)
    try:
        return path.read_bytes()
    except FileNotFoundError:
        _har_live(path)
        raise


def _har_live(path: Path) -> None:
    """HarUploadGone unless the recording at ``path`` is still there and within its time."""
    try:
        if time.time() - path.stat().st_mtime > settings.PLIMSOLL_HAR_UPLOAD_TTL_S:
            path.unlink(missing_ok=True)
            raise FileNotFoundError
    except FileNotFoundError:
        raise HarUploadGone(
            "This recording is no longer here: it was imported or discarded, or its preview was left open "
            f"for more than {settings.PLIMSOLL_HAR_UPLOAD_TTL_S // 60} minutes. Upload it again."
        ) from None


def har_upload_discard(*, project: Project, user_id: int, token: str) -> None:
    path = _har_path(project=project, user_id=user_id, token=token)
    for kept in (path, path.with_name(path.name + ".state"), path.with_name(path.name + ".preview")):
        kept.unlink(missing_ok=True)


def har_uploads_sweep(*, now: float | None = None) -> int:
    """Deletes the recordings whose preview was abandoned; returns how many. Run by Celery beat too."""
    now = time.time() if now is None else now
    deleted = 0
    for path in _har_dir().glob("*.har*") if _har_dir().is_dir() else ():
        try:
            if now - path.stat().st_mtime > settings.PLIMSOLL_HAR_UPLOAD_TTL_S:
                path.unlink()
                deleted += 1
        except FileNotFoundError:
            pass  # another sweep took it
    # An API import's outcome is kept as long as a recording would be, for its client to read.
    expired = timezone.now() - datetime.timedelta(seconds=settings.PLIMSOLL_HAR_UPLOAD_TTL_S)
    HarImport.objects.filter(created_at__lt=expired).delete()
    return deleted


class ImportRefused(Exception):
    """The preview cannot become a test case as it stands; the message says why."""


def _test_case_name_free(project: Project, name: str) -> str:
    """The name, trimmed, unless the project has a test case by that name already (ImportRefused)."""
    name = name.strip()[:100]
    if not name:
        raise ImportRefused("Give the test case a name.")
    if TestCase.objects.filter(project=project, name__iexact=name).exists():
        raise ImportRefused(f"This project already has a test case called “{name}”; choose another name.")
    return name


@transaction.atomic
def test_case_import(*, project: Project, name: str, steps: list[dict], description: str) -> TestCase:
    """Creates a test case from imported steps (the fields of har.PreviewStep.to_fields), checked by the engine."""
    from workers.engine.plan import Plan as EnginePlan
    from workers.engine.plan import PlanError

    name = _test_case_name_free(project, name)
    if not steps:
        raise ImportRefused("The recording has no page to import.")
    try:  # the same validation a run's snapshot gets, so an imported test case can run
        EnginePlan.from_dict(
            {
                "base_url": "http://127.0.0.1",
                # As a run sends them: a WebSocket session's actions under "websocket", say.
                "test_cases": [{"name": name, "steps": [Step(**fields).to_engine_dict() for fields in steps]}],
                "profile": {"users": 1, "hold": 1},
            }
        )
    except PlanError as exc:
        raise ImportRefused(f"The imported steps are not valid: {exc}") from None
    try:
        with transaction.atomic():
            test_case = TestCase.objects.create(project=project, name=name, description=description)
    except IntegrityError:  # the same name, taken by a concurrent request
        raise ImportRefused(f"This project already has a test case called “{name}”; choose another name.") from None
    for fields in steps:
        step_create(test_case=test_case, step=Step(**fields))
    return test_case
