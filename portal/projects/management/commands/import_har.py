"""``manage.py import_har FILE --project NAME [--name N]``: a HAR recording becomes a test case.

The command takes the preview's safe defaults (every correlation accepted, passwords posted as
``{{variable}}``, no cookie or credential kept), prints the preview, and creates the test case
unless ``--dry-run``. The file is only read; nothing of it is stored but the steps.
"""

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from portal.projects import har, services
from portal.projects.models import Project


class Command(BaseCommand):
    help = "Import a HAR 1.2 recording as a test case of a project (prints the preview, then the test case's URL)."

    def add_arguments(self, parser):
        parser.add_argument("file", help="the .har file")
        parser.add_argument("--project", required=True, help="the project's name")
        parser.add_argument("--team", help="the team's name, when several teams have a project of that name")
        parser.add_argument("--name", help="the test case's name (default: the file's name)")
        parser.add_argument(
            "--reject", action="append", default=[], metavar="VARIABLE", help="a correlation not to apply"
        )
        parser.add_argument("--dry-run", action="store_true", help="print the preview, create nothing")

    def handle(self, *args, **options):
        path = Path(options["file"])
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise CommandError(f"Cannot read {path}: {exc.strerror}") from None
        project = self._project(options["project"], options.get("team"))
        try:
            preview = har.analyze(
                services.har_entries(raw),
                allowed=services.allowed_target,
                choices=har.Choices(rejected=set(options["reject"])),
            )
        except har.HarError as exc:
            raise CommandError(str(exc)) from None
        self._print(preview)
        if options["dry_run"]:
            return
        name = options.get("name") or path.name.removesuffix(".har")
        try:
            test_case = services.test_case_import(
                project=project, name=name, steps=preview.step_fields(), description=f"Imported from {path.name}."
            )
        except services.ImportRefused as exc:
            raise CommandError(str(exc)) from None
        needed = preview.variables_needed()
        if needed:
            names = ", ".join(f"{{{{{v}}}}}" for v in needed)
            self.stdout.write(f"It posts {names}: upload a data set with that column before running it.")
        self.stdout.write(test_case.get_absolute_url())

    def _project(self, name: str, team: str | None) -> Project:
        projects = Project.objects.filter(name=name).select_related("team")
        if team:
            projects = projects.filter(team__name=team)
        found = list(projects[:2])
        if not found:
            raise CommandError(f"No project is called “{name}”{f' in team “{team}”' if team else ''}.")
        if len(found) > 1:
            raise CommandError(f"Several teams have a project called “{name}”: name the team with --team.")
        return found[0]

    def _print(self, preview: har.Preview) -> None:
        out = self.stdout.write
        out(f"Site: {preview.base_url}")
        for host in preview.hosts:
            out(f"  host {host.host}: {host.requests} requests, {'kept' if host.kept else 'dropped'} ({host.reason})")
        for note in preview.notes:
            out(f"  {note}")
        for number, step in enumerate(preview.steps, start=1):
            extra = f", {len(step.resources)} resources" if step.resources else ""
            out(f"{number}. {step.name}: {step.method} {step.path} (think {step.think_time} s{extra})")
            for item in step.extract:
                out(f"     extracts {item['name']} = {item['source']}: {item['expression']}")
            for note in step.notes:
                out(f"     {note}")
            dropped = sorted({r.name for r in step.header_rules if not r.kept})
            if dropped:
                out(f"     headers dropped: {', '.join(dropped)}")
        for c in preview.correlations:
            state = "accepted" if c.accepted else "rejected"
            uses = ", ".join(str(u + 1) for u in c.uses)
            out(f"Correlation {c.name} ({c.kind}, {state}): set by step {c.step + 1}, sent by step {uses}")
        for f in preview.secret_fields:
            what = "Secret field" if f.secret else "Login user field"
            posted = "the recorded value" if f.kept else f"{{{{{f.variable}}}}}"
            out(f"{what} {f.field} of step {f.step + 1}: posts {posted}")
