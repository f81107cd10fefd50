from django.urls import path

from . import views

app_name = "sharing"

urlpatterns = [
    # For members
    path("projects/<uuid:code>/shared-links/", views.share_list, name="list"),
    path("projects/<uuid:code>/shared-links/new/", views.share_new, name="new"),
    path("projects/<uuid:code>/shared-links/setting/", views.sharing_toggle, name="toggle"),
    path("shared-links/<uuid:code>/revoke/", views.share_revoke, name="revoke"),
    # Public: the token is the only key
    path("s/<str:token>/", views.public_page, name="public"),
    path("s/<str:token>/runs/<uuid:run_code>/series.json", views.public_series, name="series"),
    path("s/<str:token>/runs/<uuid:run_code>/detail.json", views.public_detail, name="detail"),
    path("s/<str:token>/runs/<uuid:run_code>/protocols.json", views.public_protocol_series, name="protocol-series"),
    path("s/<str:token>/journey.json", views.public_journey_data, name="journey-data"),
]
