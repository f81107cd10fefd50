from django.urls import path

from . import views

app_name = "notifications"

urlpatterns = [
    path("projects/<uuid:code>/notifications/", views.project_channels, name="project"),
    path("projects/<uuid:code>/notifications/new/", views.channel_new, name="new"),
    path("channels/<uuid:code>/edit/", views.channel_edit, name="edit"),
    path("channels/<uuid:code>/test/", views.channel_test, name="test"),
    path("channels/<uuid:code>/delete/", views.channel_delete, name="delete"),
    # A channel's address confirms it wants mail (issue 30): the link in the confirmation mail.
    path("mail-addresses/confirm/<str:token>/", views.address_confirm, name="address-confirm"),
]
