"""/api/v1/sessions/… (mounted by portal/urls.py ahead of the API's own catch-all)."""

from django.urls import path

from portal.sessions import api

urlpatterns = [
    path("", api.SessionListCreateView.as_view(), name="api-sessions"),
    path("report/", api.SessionReportView.as_view(), name="api-session-report"),
    path("choices/", api.SessionChoicesView.as_view(), name="api-session-choices"),
    path("estimate/", api.SessionEstimateView.as_view(), name="api-session-estimate"),
    path("<int:pk>/", api.SessionDetailView.as_view(), name="api-session-detail"),
    path("<int:pk>/stop/", api.SessionStopView.as_view(), name="api-session-stop"),
]
