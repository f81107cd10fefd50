from django.urls import path

from . import views

app_name = "accounts"

# /teams/
urlpatterns = [
    path("teams/", views.teams, name="teams"),
    path("teams/<uuid:code>/members/add/", views.member_add, name="member-add"),
    path("teams/<uuid:code>/members/<id:user_id>/role/", views.member_role, name="member-role"),
    path("teams/<uuid:code>/members/<id:user_id>/remove/", views.member_remove, name="member-remove"),
    # Invitations and sign-up (issue 13)
    path("teams/<uuid:code>/invitations/", views.invitation_create, name="invitation-create"),
    path("teams/<uuid:code>/invitations/<id:pk>/revoke/", views.invitation_revoke, name="invitation-revoke"),
    path("invitations/<str:token>/", views.invitation, name="invitation"),
    path("signup/", views.signup, name="signup"),
    # /tokens/: personal API tokens
    path("tokens/", views.tokens, name="tokens"),
    path("tokens/<id:token_id>/revoke/", views.token_revoke_view, name="token-revoke"),
]
