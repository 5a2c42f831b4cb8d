"""Where the hub's proxy sends /services/<name>/… (it keeps the prefix)."""

from django.urls import path

from portal.hub import views

urlpatterns = [
    path("services/<str:service>/", views.service_entry, name="hub-service-entry"),
    path("services/<str:service>/<path:path>", views.service_entry, name="hub-service-entry-path"),
]
