"""Imported runs (issue 18): another tool's result file becomes a run in the history."""

import hashlib
import logging
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Max
from django.utils import timezone

from portal.common import task, write_private
from portal.projects.models import Plan
from workers.engine.plan import Plan as EnginePlan

from .. import result_files
from ..models import (
    ResultImport,
    Run,
    RunShard,
)
from ..results.sink import interval_write
from .lifecycle import _finalize

log = logging.getLogger(__name__)
Status = Run.Status


def _file_sha256(path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def import_limits() -> result_files.Limits:
    """What a result file may hold, from the settings (PLIMSOLL_IMPORT_*): a file over one is refused."""
    return result_files.Limits(
        max_line=settings.PLIMSOLL_IMPORT_MAX_LINE_MB << 20,
        max_field=settings.PLIMSOLL_IMPORT_MAX_FIELD_KB << 10,
        max_decompressed=settings.PLIMSOLL_IMPORT_MAX_GUNZIPPED_GB << 30,
        max_expansion=settings.PLIMSOLL_IMPORT_MAX_EXPANSION,
        expansion_allowance=settings.PLIMSOLL_IMPORT_EXPANSION_ALLOWANCE_MB << 20,
        max_xml_depth=settings.PLIMSOLL_IMPORT_MAX_XML_DEPTH,
        max_sample_elements=settings.PLIMSOLL_IMPORT_MAX_SAMPLE_ELEMENTS,
    )


def _configuration_at(environment, change) -> list[dict]:
    """The environment's configuration under ``change`` (None: the initial one, before any change)."""
    if change is not None:
        return list(change.config_after)
    first = environment.changes.filter(status="applied").order_by("number").first()
    return list(first.config_before) if first else list(environment.configuration)


def _imported_snapshot(results: result_files.ImportedResults, environment, plan: Plan | None) -> dict:
    """The run's plan snapshot: what the file shows, in the engine's plan shape so every report reads it.

    Its profile is *constant* at the file's most active users for the file's duration (the whole
    file is the measurement window); its one test case, named after the tool, has a step per label
    with the path the label requested. Thresholds: those of the plan the import stands for, if one
    was picked; else none, and the run passes unless it has no data.
    """
    steps = [{"name": label[:200], "path": results.paths.get(label, "/")} for label in results.labels]
    snapshot = {
        "base_url": environment.base_url.rstrip("/"),
        "test_cases": [{"name": results.tool, "steps": steps}],
        "profile": {"kind": "constant", "users": max(results.max_users, 1), "hold": float(results.duration_s)},
    }
    if plan is not None:  # judged by the thresholds of the plan it stands for
        snapshot["thresholds"] = plan.to_engine_dict()["thresholds"]
    EnginePlan.from_dict(snapshot)  # the shape every reader of a run relies on
    return snapshot


def run_import(
    *,
    environment,
    user,
    path,
    file_name: str,
    format: str | None = None,
    plan: Plan | None = None,
    progress=None,
) -> tuple[Run, bool]:
    """An imported run of ``environment`` from a result file, and whether it is new.

    With ``plan`` (one of the environment's project), the run stands for a run of that plan: it
    joins the plan's journey and comparisons, and the plan's thresholds judge it.

    The same file (by SHA-256) imported again into the environment finds the first run. The
    file is read whole before anything is written (result_files.ResultFileError names a bad
    line), then the run, its shard and its rows are written in one transaction, through the
    same ``interval_write`` as a native run's, and finalized like one.

    ``progress(bytes_read, bytes_total)`` is called while the file is read (result_files.read).
    """
    if plan is not None and plan.project_id != environment.project_id:
        raise result_files.ResultFileError(f"The plan “{plan}” is not of this environment's project.")
    sha256 = _file_sha256(path)
    imported = Run.objects.filter(environment=environment, kind=Run.Kind.IMPORTED, source_sha256=sha256)
    if existing := imported.first():
        return existing, False
    results = result_files.read(path, format=format, progress=progress, limits=import_limits())
    try:
        return _store_import(results, environment, user, file_name, sha256, plan, imported)
    finally:
        results.discard()


def _store_import(results, environment, user, file_name, sha256, plan, imported) -> tuple[Run, bool]:

    start = datetime.fromtimestamp(results.first_second, UTC)
    change = environment.change_in_effect(start)
    snapshot = _imported_snapshot(results, environment, plan)
    source = {
        "tool": results.tool,
        "version": results.version,
        "format": results.format,
        "file_name": file_name[:255],
        "sha256": sha256,
        "lines": results.lines,
        "approximate": results.approximate,
        "late_samples": results.late_samples,
    }
    try:
        with transaction.atomic():
            project = type(environment.project).objects.select_for_update().get(pk=environment.project_id)
            run = Run.objects.create(
                project=project,
                number=(project.runs.aggregate(n=Max("number"))["n"] or 0) + 1,
                environment=environment,
                plan=plan,
                plan_name=plan.name if plan is not None else f"{results.tool} import: {file_name}"[:100],
                environment_name=environment.name,
                plan_snapshot=snapshot,
                config_snapshot=_configuration_at(environment, change),
                tuning_change=change,
                created_by=user,
                # Finishing from the start: it never runs, and the watchdog's finalize_stuck computes
                # its figures should this process die before finalize below.
                status=Status.FINISHING,
                finishing_at=timezone.now(),
                finalize_attempts=1,
                shard_count=1,
                start_at=start,
                kind=Run.Kind.IMPORTED,
                source=source,
                source_sha256=sha256,
            )
            RunShard.objects.create(
                run=run,
                shard_no=0,
                user_count=results.max_users,
                status=RunShard.Status.DONE,
                worker=f"import of {file_name}"[:200],
                finished_at=timezone.now(),
            )
            for report in results.reports():
                interval_write(run.id, 0, report)
    except IntegrityError:  # the same file, imported by a concurrent request
        return imported.get(), False
    _finalize(run.id)
    run.refresh_from_db()
    return run, True


# The progress row is written at most this often while a file is read.
IMPORT_PROGRESS_EVERY_S = 0.5


def _result_uploads_dir():
    from pathlib import Path

    return Path(settings.VAR_DIR) / "result-uploads"


def result_upload_path(result_import: ResultImport):
    return _result_uploads_dir() / f"{result_import.code}.upload"


def result_import_create(*, environment, user, chunks, file_name: str, format: str = "", plan=None) -> ResultImport:  # noqa: A002
    """Keeps an uploaded result file (owner-only, under VAR_DIR/result-uploads) and queues its import.

    ``chunks`` is an iterable of bytes (an UploadedFile's ``chunks()``). The task that reads it,
    ``result_import_task``, deletes the file when it is done, whatever the outcome.
    """
    if plan is not None and plan.project_id != environment.project_id:
        raise result_files.ResultFileError(f"The plan “{plan}” is not of this environment's project.")
    if format and format not in result_files.FORMATS:
        raise result_files.ResultFileError(f"Unknown format {format!r}: use one of {', '.join(result_files.FORMATS)}.")
    result_import = ResultImport(
        environment=environment, plan=plan, created_by=user, file_name=file_name[:255], format=format or ""
    )
    path = result_upload_path(result_import)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Owner-only: a result file can hold URLs, user names and messages of the system under test.
    result_import.bytes_total = write_private(path, chunks)
    try:
        result_import.save()
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    transaction.on_commit(lambda: _enqueue_result_import(result_import.id))
    return result_import


def _enqueue_result_import(import_id: int) -> None:
    task("result_import_task").delay(import_id)


def result_import_process(import_id: int) -> None:
    """Imports a queued upload into a run: the plain function behind result_import_task.

    Safe to run twice: only the call that moves the row from *queued* to *reading* works on it.
    The upload is deleted at the end whether the import succeeded or not; a file that cannot be
    read leaves the reader's message (with the bad line's number) on the row and no run.
    """
    import time

    with transaction.atomic():
        result_import = (
            ResultImport.objects.select_for_update(of=("self",))
            .select_related("environment__project", "plan", "created_by")
            .filter(id=import_id, status=ResultImport.Status.QUEUED)
            .first()
        )
        if result_import is None:
            return
        result_import.status = ResultImport.Status.READING
        result_import.save(update_fields=["status", "updated_at"])
    path = result_upload_path(result_import)
    rows = ResultImport.objects.filter(id=import_id)
    last = [0.0]

    def progress(done: int, total: int) -> None:
        now = time.monotonic()
        if done >= total:
            rows.update(
                bytes_read=done, bytes_total=total, status=ResultImport.Status.STORING, updated_at=timezone.now()
            )
        elif now - last[0] >= IMPORT_PROGRESS_EVERY_S:
            last[0] = now
            rows.update(bytes_read=done, bytes_total=total, updated_at=timezone.now())

    outcome = {"status": ResultImport.Status.FAILED, "finished_at": timezone.now()}
    try:
        run, created = run_import(
            environment=result_import.environment,
            user=result_import.created_by,
            path=path,
            file_name=result_import.file_name,
            format=result_import.format or None,
            plan=result_import.plan,
            progress=progress,
        )
        outcome.update(status=ResultImport.Status.DONE, run=run, already_imported=not created)
    except FileNotFoundError:
        outcome["error"] = "The uploaded file is no longer on the server (it was already processed): upload it again."
    except result_files.ResultFileError as exc:
        outcome["error"] = str(exc)
    except Exception as exc:
        log.exception("result import %s failed", import_id)
        outcome["error"] = f"The import failed ({type(exc).__name__}); nothing was imported. Try again, or report it."
        raise
    finally:
        path.unlink(missing_ok=True)
        outcome["finished_at"] = outcome["updated_at"] = timezone.now()
        rows.update(**outcome)


# An import whose row has not moved for this long lost its worker (reading updates it twice a second;
# storing a very long file may take minutes, hence the margin).
IMPORT_STALE_AFTER = timedelta(minutes=30)


def result_imports_sweep() -> int:
    """Fails imports whose worker was lost and deletes their uploads; returns how many. Run by beat."""
    stale = ResultImport.objects.filter(
        status__in=ResultImport.ACTIVE, updated_at__lt=timezone.now() - IMPORT_STALE_AFTER
    )
    count = 0
    for result_import in stale:
        result_upload_path(result_import).unlink(missing_ok=True)
        count += ResultImport.objects.filter(id=result_import.id, status__in=ResultImport.ACTIVE).update(
            status=ResultImport.Status.FAILED,
            error="The import stopped: the worker reading it was lost. Nothing was imported; upload the file again.",
            finished_at=timezone.now(),
        )
    return count
