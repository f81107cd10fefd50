from django.contrib.auth.decorators import login_required
from django.http import JsonResponse

from portal.accounts.access import get_for_user
from portal.runs.models import Run

from . import selectors


@login_required
def run_servers_json(request, code):
    """The Servers section's data for the run page's charts (fetched again every few seconds while it runs)."""
    run = get_for_user(request.user, Run.objects.all(), code=code)
    return JsonResponse(selectors.run_servers_chart(run))
