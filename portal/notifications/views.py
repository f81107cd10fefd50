from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from portal import limits
from portal.accounts import access
from portal.accounts.access import get_for_user
from portal.projects.models import Project

from . import addresses, selectors, services
from .forms import ChannelEditForm, ChannelForm
from .models import Channel


def _page(request, project, form, status=200):
    channels = list(selectors.project_channels(project=project))
    states = addresses.address_states(channels)
    for channel in channels:
        channel.address_states = [(a, states.get(a.strip().lower(), False)) for a in channel.recipients]
    context = {
        "project": project,
        "channels": channels,
        "form": form,
        "can_write": access.can_write(request.user, project),
        "nav": "projects",
    }
    return render(request, "notifications/list.html", context, status=status)


@login_required
def project_channels(request, code):
    project = get_for_user(request.user, Project.objects.select_related("team"), code=code)
    return _page(request, project, ChannelForm(initial={"events": ["regression", "schedule_skipped"]}))


@login_required
@require_POST
def channel_new(request, code):
    project = get_for_user(request.user, Project.objects.select_related("team"), code=code, write=True)
    form = ChannelForm(request.POST)
    if form.is_valid():
        data = form.cleaned_data
        try:
            channel = services.channel_create(
                project=project,
                name=data["name"],
                kind=data["kind"],
                events=data["events"],
                emails=data["emails"],
                url=data["url"],
                payload_format=data["payload_format"],
                token=data["token"],
                dashboard_uid=data["dashboard_uid"],
                panel_id=data["panel_id"],
                requested_by=request.user,
            )
        except services.ChannelError as exc:
            form.add_error(None, str(exc))
        else:
            text = f"Channel “{channel.name}” added."
            if channel.secret:
                # Shown this once: the receiver needs it to check X-Plimsoll-Signature.
                text += f" Its signing secret (shown only now): {channel.secret}"
            messages.success(request, text)
            return redirect("notifications:project", project.code)
    return _page(request, project, form, status=400)


@login_required
def channel_edit(request, code):
    """Edit a channel (editors and owners): name, events, addresses or URL; the secret stays unless replaced."""
    channel = get_for_user(request.user, Channel.objects.select_related("project"), code=code, write=True)
    form = ChannelEditForm(request.POST or None, channel=channel)
    status = 200
    if request.method == "POST":
        if form.is_valid():
            data = form.cleaned_data
            try:
                services.channel_update(
                    channel=channel,
                    name=data["name"],
                    events=data["events"],
                    emails=data.get("emails", ""),
                    url=data.get("url", ""),
                    payload_format=data.get("payload_format", ""),
                    token=data.get("token", ""),
                    dashboard_uid=data.get("dashboard_uid", ""),
                    panel_id=data.get("panel_id"),
                    enabled=data["enabled"],
                    replace_secret=data.get("replace_secret", False),
                    requested_by=request.user,
                )
            except services.ChannelError as exc:
                form.add_error(None, str(exc))
            else:
                text = f"Channel “{channel.name}” saved."
                if data.get("replace_secret"):
                    text += f" Its new signing secret (shown only now): {channel.secret}"
                messages.success(request, text)
                return redirect(channel)
        status = 400
        channel.refresh_from_db()  # the page shows the saved channel, the form what was typed
    context = {"channel": channel, "project": channel.project, "form": form, "nav": "projects"}
    return render(request, "notifications/edit.html", context, status=status)


@login_required
@require_POST
def channel_test(request, code):
    channel = get_for_user(request.user, Channel.objects.select_related("project"), code=code, write=True)
    try:
        services.channel_test(channel=channel, requested_by=request.user)
    except limits.TooMany as exc:
        messages.error(request, str(exc))
    else:
        messages.info(request, "Test sent: its outcome appears in the delivery log in a few seconds.")
    return redirect(channel)


@login_required
@require_POST
def channel_delete(request, code):
    channel = get_for_user(request.user, Channel.objects.select_related("project"), code=code, write=True)
    project = channel.project
    channel.delete()
    messages.success(request, "Channel deleted.")
    return redirect("notifications:project", project.code)


@never_cache
def address_confirm(request, token):
    """The link of a confirmation mail: who asks, and a button (POST) that confirms; no login needed."""
    address = addresses.address_pending(token)
    if address is None:
        context = {"state": "dead", "days": addresses.CONFIRM_DAYS}
        return render(request, "notifications/address_confirm.html", context, status=410)
    if request.method == "POST":
        confirmed = addresses.address_confirm(token=token)
        state = "confirmed" if confirmed else "dead"
        context = {"state": state, "address": address, "days": addresses.CONFIRM_DAYS}
        return render(request, "notifications/address_confirm.html", context, status=200 if confirmed else 410)
    return render(request, "notifications/address_confirm.html", {"state": "pending", "address": address})
