"""Share links: the *Share* form, the project's *Shared links* list, and the public pages.

The public pages (``/s/<token>/…``) need no account. They answer every link that does not
work now (unknown, tampered, expired, revoked, sharing off) with the same plain 410 page, so
nothing tells what was there or whether it ever existed; their chart data answers only for
runs of the shared object. They carry noindex and no-referrer, are never cached, and Django
does not log their paths (the token is in the path).
"""

from functools import wraps

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from portal.accounts.access import get_for_user, membership_for
from portal.history.models import Experiment, TrialSet
from portal.projects.models import Environment, Plan, Project
from portal.runs import selectors as run_selectors
from portal.runs.models import Run
from portal.runs.results import drilldown

from . import content, selectors, services
from .forms import ShareForm
from .models import ShareLink

TARGET_PARAMS = ("kind", "run", "a", "b", "experiment", "environment", "plan")

# --------------------------------------------------------------------------------------
# For members: create, list, revoke, turn sharing on or off
# --------------------------------------------------------------------------------------


def _target(request, project: Project, kind: str) -> tuple[str, dict]:
    """The object a new link opens, from the query string, as (title, ShareLink fields); 404 if not the project's."""
    params = request.POST if request.method == "POST" else request.GET

    def one(queryset, name):
        code = params.get(name, "")
        if not _is_uuid(code):
            raise Http404
        return get_for_user(request.user, queryset.filter(project=project), code=code)

    if kind == ShareLink.Kind.RUN:
        run = one(Run.objects.all(), "run")
        if run.is_active:
            raise Http404("A run is shared once it has ended.")
        return f"Run #{run.number} · {run.plan_name}", {"run": run}
    if kind == ShareLink.Kind.COMPARISON:
        labels, codes = [], {}
        for name, field in (("a", "before_code"), ("b", "after_code")):
            code = params.get(name, "")
            obj = Run.objects.filter(project=project, code=code).first() if _is_uuid(code) else None
            if obj is None and _is_uuid(code):
                obj = TrialSet.objects.filter(project=project, code=code).first()
            if obj is None:
                raise Http404
            labels.append(
                f"run #{obj.number}" if isinstance(obj, Run) else (obj.label or f"trial set of {obj.plan_name}")
            )
            codes[field] = obj.code
        return f"Comparison: {labels[0]} → {labels[1]}", codes
    if kind == ShareLink.Kind.EXPERIMENT:
        experiment = one(Experiment.objects.select_related("change"), "experiment")
        return f"Experiment: {experiment.title}", {"experiment": experiment}
    if kind == ShareLink.Kind.JOURNEY:
        environment = one(Environment.objects.all(), "environment")
        plan = one(Plan.objects.all(), "plan")
        return f"Journey · {environment.name} · {plan.name}", {"environment": environment, "plan": plan}
    raise Http404


def _is_uuid(value: str) -> bool:
    import uuid

    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


@login_required
def share_new(request, code):
    """The *Share* form (GET) and the new link, shown once (POST): only editors and owners."""
    project = get_for_user(request.user, Project.objects.select_related("team"), code=code, write=True)
    params = request.POST if request.method == "POST" else request.GET
    kind = params.get("kind", "")
    title, target = _target(request, project, kind)
    form = ShareForm(request.POST or None)
    sharing_on = services.sharing_enabled(project)
    if request.method == "POST" and form.is_valid():
        try:
            link, token = services.share_create(
                project=project,
                kind=kind,
                title=title,
                user=request.user,
                days=form.cleaned_data["days"],
                note=form.cleaned_data["note"],
                **target,
            )
        except services.ShareError as exc:
            form.add_error(None, str(exc))
        else:
            url = request.build_absolute_uri(f"/s/{token}/")
            return render(
                request, "sharing/created.html", {"project": project, "link": link, "url": url, "nav": "projects"}
            )
    context = {
        "project": project,
        "form": form,
        "title": title,
        "kind": kind,
        "params": request.GET.urlencode() if request.method == "GET" else request.POST.urlencode(),
        "hidden": {
            k: v
            for k, v in (request.GET if request.method == "GET" else request.POST).items()
            if k in ("kind", "run", "a", "b", "experiment", "environment", "plan")
        },
        "sharing_on": sharing_on,
        "nav": "projects",
    }
    return render(request, "sharing/new.html", context, status=400 if form.errors else 200)


@login_required
def share_list(request, code):
    project = get_for_user(request.user, Project.objects.select_related("team"), code=code)
    membership = membership_for(request.user, project.team)
    links = list(selectors.share_links(project))
    now = timezone.now()
    for link in links:
        link.expired = link.expires_at <= now
    context = {
        "project": project,
        "links": links,
        "sharing_on": services.sharing_enabled(project),
        "can_write": membership.can_write,
        "can_manage": membership.can_manage,
        "nav": "projects",
    }
    return render(request, "sharing/list.html", context)


@login_required
@require_POST
def share_revoke(request, code):
    link = get_for_user(request.user, ShareLink.objects.select_related("project"), code=code, write=True)
    if services.share_revoke(link=link, user=request.user):
        messages.success(request, f"“{link.title}” is revoked: the link stopped working.")
    return redirect("sharing:list", link.project.code)


@login_required
@require_POST
def sharing_toggle(request, code):
    project = get_for_user(request.user, Project.objects.select_related("team"), code=code)
    membership = membership_for(request.user, project.team)
    if not membership.can_manage:
        raise PermissionDenied("Only a team's owners turn sharing on or off.")
    enabled = request.POST.get("enabled") == "1"
    services.sharing_set(project=project, enabled=enabled, user=request.user)
    if enabled:
        messages.success(request, "Sharing is on: links that have not expired or been revoked work again.")
    else:
        messages.success(request, "Sharing is off for this project: every link to it stopped working.")
    return redirect("sharing:list", project.code)


# --------------------------------------------------------------------------------------
# Public: the page a stakeholder opens, and its chart data
# --------------------------------------------------------------------------------------


def _public(view):
    """Headers of every public answer, and no path of theirs in Django's request log."""

    @wraps(view)
    def wrapped(request, *args, **kwargs):
        response = view(request, *args, **kwargs)
        response["X-Robots-Tag"] = "noindex, nofollow"
        response["Referrer-Policy"] = "no-referrer"
        response["Cache-Control"] = "no-store, private"
        # django.utils.log.log_response writes "Gone: /s/<token>/" for 4xx answers; the token
        # opens the page, so the path stays out of the log (Django's own flag for "logged").
        response._has_been_logged = True
        return response

    return wrapped


def _gone(request):
    return render(request, "sharing/gone.html", status=410)


def _not_here():
    return HttpResponse("Not found.\n", status=404, content_type="text/plain; charset=utf-8")


def _link(token: str) -> ShareLink | None:
    link = selectors.share_by_token(token)
    if link is not None:
        # The token itself is never stored: the page's data URLs are built from the one in the request.
        link.token_for_urls = token
    return link


@_public
def public_page(request, token):
    link = _link(token)
    if link is None:
        return _gone(request)
    context = content.share_content(link)
    if context is None:
        return _gone(request)
    services.share_opened(link=link)
    return render(request, "sharing/public.html", {"link": link, **context})


@_public
def public_series(request, token, run_code):
    link = _link(token)
    if link is None:
        return _gone(request)
    if run_code not in content.allowed_runs(link):
        return _not_here()
    run = get_object_or_404(Run, project=link.project, code=run_code)
    return JsonResponse(run_selectors.run_series(run, live=False))


@_public
def public_protocol_series(request, token, run_code):
    """A shared run's streams and WebSocket chart (``run_selectors.run_protocol_series``), as the run page reads it."""
    link = _link(token)
    if link is None:
        return _gone(request)
    if run_code not in content.allowed_runs(link):
        return _not_here()
    run = get_object_or_404(Run, project=link.project, code=run_code)
    return JsonResponse(run_selectors.run_protocol_series(run, live=False))


@_public
def public_detail(request, token, run_code):
    """The drill-down and zoom data of a shared run (``run_selectors.run_detail``), as the run page reads it."""
    link = _link(token)
    if link is None:
        return _gone(request)
    if run_code not in content.allowed_runs(link):
        return _not_here()
    run = get_object_or_404(Run, project=link.project, code=run_code)
    try:
        # No links to the team's tracing backend from a public page: its address is theirs.
        return JsonResponse(run_selectors.run_detail(run, request.GET, trace_links=False))
    except drilldown.RangeError as refusal:
        return JsonResponse({"error": str(refusal)}, status=400)


@_public
def public_journey_data(request, token):
    link = _link(token)
    if link is None:
        return _gone(request)
    if link.kind != ShareLink.Kind.JOURNEY:
        return _not_here()
    return JsonResponse(content.journey_data(link))
