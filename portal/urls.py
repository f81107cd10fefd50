from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.templatetags.static import static
from django.urls import include, path, register_converter
from django.views.generic import RedirectView

from portal.accounts.views import PasswordResetView
from portal.runs.exporter import metrics_view


class IdConverter:
    """``<id:…>``: a database id, at most 18 digits; a longer number is a 404, not a 500.

    Django's ``int`` takes any length, and SQLite raises OverflowError on a value past 64 bits.
    Registered here, before the apps' URL modules are included below.
    """

    regex = "[0-9]{1,18}"

    def to_python(self, value: str) -> int:
        return int(value)

    def to_url(self, value) -> str:
        return str(value)


register_converter(IdConverter, "id")

urlpatterns = [
    path("login/", auth_views.LoginView.as_view(template_name="accounts/login.html"), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    # Password reset by e-mail, with Django's own views (issue 13; the request page limited per client, issue 30).
    path(
        "password-reset/",
        PasswordResetView.as_view(),
        name="password_reset",
    ),
    path(
        "password-reset/sent/",
        auth_views.PasswordResetDoneView.as_view(template_name="accounts/password_reset_done.html"),
        name="password_reset_done",
    ),
    path(
        "password-reset/<uidb64>/<token>/",
        auth_views.PasswordResetConfirmView.as_view(template_name="accounts/password_reset_confirm.html"),
        name="password_reset_confirm",
    ),
    path(
        "password-reset/done/",
        auth_views.PasswordResetCompleteView.as_view(template_name="accounts/password_reset_complete.html"),
        name="password_reset_complete",
    ),
    path("", include("portal.sharing.urls")),
    path("", include("portal.projects.urls")),
    path("", include("portal.runs.urls")),
    path("", include("portal.history.urls")),
    path("", include("portal.accounts.urls")),
    # Plimsoll's own metrics for Prometheus (issue 29): a bearer token or an allowed address
    path("metrics", metrics_view, name="metrics"),
    # Server metrics of runs (issue 14)
    path("", include("portal.metrics.urls")),
    # i12-schedules
    path("", include("portal.schedules.urls")),
    path("", include("portal.notifications.urls")),
    path("admin/", admin.site.urls),
    path("api/v1/", include("portal.api.urls")),
    # Issue 15: browsers ask for /favicon.ico on every page whatever the <link> says; send them to the icon.
    path("favicon.ico", RedirectView.as_view(url=static("img/favicon.svg"), permanent=True)),
]

# A request Django refuses before any view (an empty or foreign Host, a malformed multipart body): JSON under /api/.
handler400 = "portal.api.errors.bad_request"
