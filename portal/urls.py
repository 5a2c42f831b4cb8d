from django.contrib import admin
from django.urls import include, path

from portal.accounts import views as account_views
from portal.audit import views as audit_views
from portal.clusters import views as cluster_views
from portal.jobs import views as job_views
from portal.notifications import views as notification_views
from portal.overview import views as overview
from portal.projects import views as project_views
from portal.samples import views as samples_views
from portal.sessions import api as session_api
from portal.sessions import views as session_views
from portal.usage import views as usage_views

# Any unhandled exception: a 503 with a message when the database is unreachable, else the 500 page.
handler500 = "portal.unavailable.server_error"

urlpatterns = [
    path("", overview.dashboard, name="dashboard"),
    path("healthz", account_views.healthz, name="healthz"),
    path("projects/", overview.project_list, name="project-list"),
    path("projects/<slug:slug>/", overview.project_detail, name="project-detail"),
    path("projects/<slug:slug>/members/", project_views.members, name="project-members"),
    path("projects/<slug:slug>/clusters/", cluster_views.project_clusters, name="project-clusters"),
    path("projects/<slug:slug>/budget-bar/", overview.budget_bar, name="project-budget-bar"),
    path("projects/<slug:slug>/budget/", usage_views.budget, name="project-budget"),
    path("projects/<slug:slug>/usage/", usage_views.project_usage, name="project-usage"),
    path("projects/<slug:slug>/usage/gpus/", samples_views.project_gpu_efficiency, name="project-gpu-efficiency"),
    path("projects/<slug:slug>/idle-rule/", samples_views.project_idle_rule, name="project-idle-rule"),
    path("usage/", usage_views.site_usage, name="site-usage"),
    path("usage/gpus/", samples_views.site_gpu_efficiency, name="site-gpu-efficiency"),
    path("site/", overview.site_admin, name="site-admin"),
    path("site/audit/", audit_views.audit_log, name="site-audit"),
    path("site/health-checks/<slug:slug>/set-up/", cluster_views.operations_set_up, name="site-health-set-up"),
    path("site/health-checks/<slug:slug>/check/", cluster_views.operations_verify, name="site-health-verify"),
    path("jobs/", job_views.job_list, name="job-list"),
    path("sessions/", session_views.session_list, name="session-list"),
    path("sessions/new/", session_views.session_new, name="session-new"),
    path("sessions/<int:pk>/stop/", session_views.session_stop, name="session-stop"),
    path("jobs/new/", job_views.job_new, name="job-new"),
    path("jobs/cancel/", job_views.job_bulk_cancel, name="job-bulk-cancel"),
    path("jobs/preview/", job_views.job_preview, name="job-preview"),
    path("jobs/notebook/", job_views.job_notebook, name="job-notebook"),
    path("jobs/presets/", job_views.job_presets, name="job-presets"),
    path("jobs/<int:pk>/", job_views.job_detail, name="job-detail"),
    path("jobs/<int:pk>/status/", job_views.job_status, name="job-status"),
    path("jobs/<int:pk>/log/<str:stream>/", job_views.job_log, name="job-log"),
    path("jobs/<int:pk>/cancel/", job_views.job_cancel, name="job-cancel"),
    path("jobs/<int:pk>/gpu/", samples_views.job_gpu, name="job-gpu"),
    path("jobs/<int:pk>/keep/", samples_views.job_keep, name="job-keep"),
    path("jobs/groups/<int:pk>/", job_views.job_group, name="job-group"),
    path("jobs/groups/<int:pk>/cancel/", job_views.job_group_cancel, name="job-group-cancel"),
    path("jobs/groups/<int:pk>/rerun/", job_views.job_group_rerun, name="job-group-rerun"),
    path("jobs/<int:pk>/outputs/<int:artifact_id>/", job_views.job_artifact, name="job-artifact"),
    path("jobs/<int:pk>/notebook/", job_views.job_executed_notebook, name="job-executed-notebook"),
    path("clusters/", cluster_views.cluster_health, name="cluster-health"),
    path("notifications/", notification_views.notification_list, name="notifications"),
    path("notifications/read/", notification_views.mark_read, name="notifications-read"),
    path("settings/notifications/", notification_views.preferences, name="notification-preferences"),
    path("settings/clusters/", cluster_views.cluster_accounts, name="cluster-accounts"),
    path("settings/clusters/<slug:slug>/link/", cluster_views.link, name="cluster-account-link"),
    path("settings/clusters/<slug:slug>/verify/", cluster_views.verify, name="cluster-account-verify"),
    path("settings/clusters/<slug:slug>/status/", cluster_views.account_status, name="cluster-account-status"),
    path("data/", include("portal.storage.urls")),
    path("settings/", include("portal.api.page_urls")),
    # Sessions' API lives with the sessions app (which builds on the API's parts and the hub's), before the API's own
    # catch-all: /api/v1/sessions/…
    path("api/v1/sessions/", include("portal.sessions.api_urls")),
    # The hub's spawn page prices a session while the person chooses: its request comes through the hub's proxy,
    # which keeps the service's prefix (the one API call answered there; other /services/… paths sign in).
    path("services/<str:service>/api/v1/sessions/estimate/", session_api.HubSessionEstimateView.as_view(),
         name="hub-session-estimate"),
    path("api/", include("portal.api.urls")),
    path("accounts/", include("allauth.urls")),  # with the hub's OAuth sign-in (portal/hub/urls.py)
    path("", include("portal.hub.page_urls")),
    path("admin/", admin.site.urls),
]
