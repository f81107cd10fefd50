"""Site-wide middleware of our own."""

from urllib.parse import urlsplit

from django.conf import settings
from django.shortcuts import resolve_url
from django.utils.http import urlencode
from django_htmx.http import HttpResponseClientRedirect


class HtmxLoginRedirectMiddleware:
    """A panel's request whose session has ended goes to the login page as a whole page.

    ``login_required`` answers such a request with a redirect to the login page; the browser follows
    it inside the XMLHttpRequest, and htmx would swap the whole login page into the panel (a 200, so
    base.html's responseHandling swaps it). Instead the answer tells htmx to navigate (``HX-Redirect``)
    to the login page, whose ``next`` is the page the user was on (HX-Current-URL, same origin only),
    not the panel's endpoint: after logging in, the user is back where the panel was.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if not getattr(request, "htmx", False) or response.status_code not in (301, 302, 303, 307, 308):
            return response
        login = resolve_url(settings.LOGIN_URL)
        if urlsplit(response.get("Location", "")).path != login:
            return response
        back = request.htmx.current_url_abs_path or "/"
        return HttpResponseClientRedirect(f"{login}?{urlencode({'next': back})}")
