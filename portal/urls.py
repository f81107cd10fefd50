from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

urlpatterns = [
    path("login/", auth_views.LoginView.as_view(template_name="accounts/login.html"), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", include("portal.projects.urls")),
    path("", include("portal.runs.urls")),
    path("", include("portal.history.urls")),
    path("", include("portal.accounts.urls")),
    path("admin/", admin.site.urls),
]
