"""Writes that touch several rows or enforce a rule; views call these, never the other way round."""

import os
import re
import secrets
import time
from pathlib import Path

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Max, QuerySet

from portal.accounts.models import Team

from . import har
from .models import DataSet, Environment, MixEntry, Plan, Project, Step, TestCase


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


@transaction.atomic
def environment_save(*, form, servers) -> Environment:
    """Saves a validated EnvironmentForm and its ServerFormSet; servers keep the order of the rows."""
    environment = form.save()
    servers.instance = environment
    servers.save()
    deleted = set(servers.deleted_forms)
    _renumber([f.instance for f in servers.forms if f.instance.pk and f not in deleted])
    return environment


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
def data_set_delete(*, data_set: DataSet) -> None:
    data_set.delete()


@transaction.atomic
def plan_save(*, form) -> Plan:
    """Saves a validated PlanForm; with a steps profile, also its levels in the order of the rows."""
    plan = form.save()
    if plan.profile_kind == Plan.ProfileKind.STEPS:
        levels = form.levels
        for level_form in levels.deleted_forms:
            if level_form.instance.pk:
                level_form.instance.delete()
        for position, level_form in enumerate(levels.live_forms()):
            level = level_form.instance
            level.plan, level.position = plan, position
            level.save()
    plan._levels = None  # read them again from the database
    return plan


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
    from workers.engine.targets import TargetNotAllowed, check_url

    try:
        check_url(url, settings.PLIMSOLL_ALLOWED_TARGETS)
    except TargetNotAllowed as exc:
        return f"outside the allowed targets ({exc})"
    return None


def har_entries(raw: bytes) -> list[har.Entry]:
    """The recording's entries, under the configured size limit (har.HarError says what is wrong)."""
    return har.load(raw, max_bytes=settings.PLIMSOLL_HAR_MAX_MB * 1024 * 1024)


def har_upload_store(*, project: Project, user_id: int, raw: bytes) -> str:
    """Checks a HAR (raising har.HarError with the reason) and keeps it for its preview; returns its token."""
    har_uploads_sweep()
    har.analyze(har_entries(raw), allowed=allowed_target)  # refuse now what the preview could not show
    token = secrets.token_urlsafe(24)
    path = _har_path(project=project, user_id=user_id, token=token)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Owner-only: the recording holds what the browser sent, cookies and passwords included.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(raw)
    return token


def har_upload_read(*, project: Project, user_id: int, token: str) -> bytes:
    path = _har_path(project=project, user_id=user_id, token=token)
    try:
        if time.time() - path.stat().st_mtime > settings.PLIMSOLL_HAR_UPLOAD_TTL_S:
            path.unlink(missing_ok=True)
            raise FileNotFoundError
        return path.read_bytes()
    except FileNotFoundError:
        raise HarUploadGone(
            "This recording is no longer here: it was imported or discarded, or its preview was left open "
            f"for more than {settings.PLIMSOLL_HAR_UPLOAD_TTL_S // 60} minutes. Upload it again."
        ) from None


def har_upload_discard(*, project: Project, user_id: int, token: str) -> None:
    _har_path(project=project, user_id=user_id, token=token).unlink(missing_ok=True)


def har_uploads_sweep(*, now: float | None = None) -> int:
    """Deletes the recordings whose preview was abandoned; returns how many. Run by Celery beat too."""
    now = time.time() if now is None else now
    deleted = 0
    for path in _har_dir().glob("*.har") if _har_dir().is_dir() else ():
        try:
            if now - path.stat().st_mtime > settings.PLIMSOLL_HAR_UPLOAD_TTL_S:
                path.unlink()
                deleted += 1
        except FileNotFoundError:
            pass  # another sweep took it
    return deleted


class ImportRefused(Exception):
    """The preview cannot become a test case as it stands; the message says why."""


@transaction.atomic
def test_case_import(*, project: Project, name: str, steps: list[dict], description: str) -> TestCase:
    """Creates a test case from imported steps (the fields of har.PreviewStep.to_fields), checked by the engine."""
    from workers.engine.plan import Plan as EnginePlan
    from workers.engine.plan import PlanError

    name = name.strip()[:100]
    if not name:
        raise ImportRefused("Give the test case a name.")
    if TestCase.objects.filter(project=project, name__iexact=name).exists():
        raise ImportRefused(f"This project already has a test case called “{name}”; choose another name.")
    if not steps:
        raise ImportRefused("The recording has no page to import.")
    try:  # the same validation a run's snapshot gets, so an imported test case can run
        EnginePlan.from_dict(
            {
                "base_url": "http://127.0.0.1",
                "test_cases": [{"name": name, "steps": steps}],
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
