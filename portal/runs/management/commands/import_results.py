"""``manage.py import_results FILE... --project NAME --environment NAME [--format F]``: result files of
other tools become imported runs, one per file; each run's URL is printed on its own line.

A file already imported into the environment (same SHA-256) finds its run instead of a second one.
A file that cannot be read is named with the reason, and creates nothing; the others still import.
"""

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from portal.projects.models import Environment
from portal.runs import result_files, services


class Command(BaseCommand):
    help = (
        "Import result files (k6 JSON or CSV, JMeter JTL CSV or XML, Locust _stats_history.csv, Gatling "
        "simulation.log; gzipped too) as runs of an environment, in the foreground; prints each run's URL."
    )

    def add_arguments(self, parser):
        parser.add_argument("files", nargs="+", metavar="FILE")
        parser.add_argument("--project", required=True, help="the project's name")
        parser.add_argument("--environment", required=True, help="the environment's name in that project")
        parser.add_argument("--team", help="the team's name, when several teams have a project of that name")
        parser.add_argument("--plan", help="the plan these results stand for (its journey, its thresholds)")
        parser.add_argument("--format", choices=result_files.FORMATS, help="instead of detecting it from the content")

    def handle(self, *args, **options):
        environment = self._environment(options["project"], options["environment"], options.get("team"))
        plan = None
        if options.get("plan"):
            plan = environment.project.plans.filter(name=options["plan"]).first()
            if plan is None:
                raise CommandError(f"The project has no plan called “{options['plan']}”.")
        failed = 0
        for name in options["files"]:
            path = Path(name)
            try:
                run, created = services.run_import(
                    environment=environment,
                    user=None,
                    path=path,
                    file_name=path.name,
                    format=options["format"],
                    plan=plan,
                )
            except (OSError, result_files.ResultFileError) as exc:
                failed += 1
                self.stderr.write(f"{name}: {exc}")
                continue
            if not created:
                self.stderr.write(f"{name}: already imported as run #{run.number}")
            self.stdout.write(f"{settings.SITE_URL}{run.get_absolute_url()}")
        if failed:
            raise CommandError(f"{failed} of {len(options['files'])} files could not be imported.")

    def _environment(self, project: str, name: str, team: str | None) -> Environment:
        environments = Environment.objects.filter(project__name=project, name=name).select_related("project")
        if team:
            environments = environments.filter(project__team__name=team)
        found = list(environments[:2])
        if not found:
            raise CommandError(f"No environment “{name}” in a project called “{project}”.")
        if len(found) > 1:
            raise CommandError(f"Several teams have a project “{project}” with an environment “{name}”: use --team.")
        return found[0]
