from django.urls import path

from . import views

app_name = "accounts"

# /teams/
urlpatterns = [
    path("teams/", views.teams, name="teams"),
    path("teams/<uuid:code>/members/add/", views.member_add, name="member-add"),
    path("teams/<uuid:code>/members/<int:user_id>/role/", views.member_role, name="member-role"),
    path("teams/<uuid:code>/members/<int:user_id>/remove/", views.member_remove, name="member-remove"),
]
