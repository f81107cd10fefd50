"""Writes that touch several rows or enforce a rule; views call these, never the other way round."""

from django.db import transaction
from django.db.models import Max, QuerySet

from portal.accounts.models import Team

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
