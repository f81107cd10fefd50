from django.urls import include, path

from . import views

app_name = "projects"

# /projects/
project_urls = [
    path("", views.project_list, name="list"),
    path("new/", views.project_new, name="new"),
    path("<uuid:code>/", views.project_detail, name="detail"),
    path("<uuid:code>/edit/", views.project_edit, name="edit"),
    path("<uuid:code>/delete/", views.project_delete, name="delete"),
    path("<uuid:code>/environments/new/", views.environment_new, name="environment-new"),
    path("<uuid:code>/testcases/new/", views.testcase_new, name="testcase-new"),
    path("<uuid:code>/plans/new/", views.plan_new, name="plan-new"),
    # Issue 18: a HAR recording becomes a test case, after a preview that saves nothing.
    path("<uuid:code>/testcases/import-har/", views.har_import, name="har-import"),
    path("<uuid:code>/testcases/import-har/<str:token>/", views.har_import_preview, name="har-import-preview"),
    # The plan form's chart: its values in, users (or rate) over time out; for new and saved plans alike.
    path("<uuid:code>/plans/preview/", views.plan_preview, name="plan-preview"),
]

# /environments/
environment_urls = [
    path("<uuid:code>/", views.environment_detail, name="environment"),
    path("<uuid:code>/edit/", views.environment_edit, name="environment-edit"),
    path("<uuid:code>/delete/", views.environment_delete, name="environment-delete"),
]

# /testcases/
testcase_urls = [
    path("<uuid:code>/", views.testcase_detail, name="testcase"),
    path("<uuid:code>/edit/", views.testcase_edit, name="testcase-edit"),
    path("<uuid:code>/delete/", views.testcase_delete, name="testcase-delete"),
    path("<uuid:code>/steps/new/", views.step_new, name="step-new"),
    path("<uuid:code>/data-set/", views.data_set_upload, name="data-set-upload"),
    path("<uuid:code>/data-set/mode/", views.data_set_mode, name="data-set-mode"),
    path("<uuid:code>/data-set/delete/", views.data_set_delete, name="data-set-delete"),
]

# /steps/
step_urls = [
    path("<uuid:code>/edit/", views.step_edit, name="step-edit"),
    path("<uuid:code>/delete/", views.step_delete, name="step-delete"),
    path("<uuid:code>/move/<str:direction>/", views.step_move, name="step-move"),
]

# /plans/
plan_urls = [
    path("<uuid:code>/", views.plan_detail, name="plan"),
    path("<uuid:code>/edit/", views.plan_edit, name="plan-edit"),
    path("<uuid:code>/delete/", views.plan_delete, name="plan-delete"),
    path("<uuid:code>/mix/add/", views.mix_add, name="mix-add"),
]

# /mix/ (entries are addressed by pk: they are reached only through their plan's page)
mix_urls = [
    path("<id:pk>/", views.mix_update, name="mix-update"),
    path("<id:pk>/delete/", views.mix_delete, name="mix-delete"),
    path("<id:pk>/move/<str:direction>/", views.mix_move, name="mix-move"),
]

urlpatterns = [
    path("", views.project_list, name="home"),
    path("projects/", include(project_urls)),
    path("environments/", include(environment_urls)),
    path("testcases/", include(testcase_urls)),
    path("steps/", include(step_urls)),
    path("plans/", include(plan_urls)),
    path("mix/", include(mix_urls)),
]
