"""URLs under /api/: the schema, the docs and the stable v1 names."""

from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from portal.api import file_views, gpu_views, places, presets, project_views, upload_views, views
from portal.api.fallback import not_found
from portal.api.schema import DESCRIPTION

v1 = [
    path("me/", project_views.MeView.as_view(), name="api-me"),
    path("projects/", project_views.ProjectListView.as_view(), name="api-projects"),
    path("projects/<slug:slug>/", project_views.ProjectDetailView.as_view(), name="api-project-detail"),
    path("projects/<slug:slug>/budget/", project_views.BudgetView.as_view(), name="api-budget"),
    path("projects/<slug:slug>/files/", project_views.FileListCreateView.as_view(), name="api-files"),
    path("projects/<slug:slug>/files/move/", file_views.FileMoveView.as_view(), name="api-files-move"),
    path("projects/<slug:slug>/files/delete/", file_views.FileDeleteView.as_view(), name="api-files-delete"),
    path("projects/<slug:slug>/folders/", file_views.FolderListCreateView.as_view(), name="api-folders"),
    path("projects/<slug:slug>/files/<int:pk>/download/", project_views.FileDownloadView.as_view(), name="api-file-download"),
    path("projects/<slug:slug>/uploads/", upload_views.UploadCreateView.as_view(), name="api-uploads"),
    path("projects/<slug:slug>/uploads/batch/", upload_views.BatchCreateView.as_view(), name="api-upload-batch"),
    path("projects/<slug:slug>/uploads/batch/complete/", upload_views.BatchCompleteView.as_view(),
         name="api-upload-batch-complete"),
    path("projects/<slug:slug>/uploads/<uuid:upload_id>/", upload_views.UploadDetailView.as_view(), name="api-upload"),
    path("projects/<slug:slug>/uploads/<uuid:upload_id>/parts/", upload_views.UploadPartsView.as_view(),
         name="api-upload-parts"),
    path("projects/<slug:slug>/uploads/<uuid:upload_id>/complete/", upload_views.UploadCompleteView.as_view(),
         name="api-upload-complete"),
    path("projects/<slug:slug>/datasets/", project_views.DatasetListCreateView.as_view(), name="api-datasets"),
    path("projects/<slug:slug>/datasets/<str:name>/", project_views.DatasetDetailView.as_view(), name="api-dataset"),
    path("clusters/", project_views.ClusterListView.as_view(), name="api-clusters"),
    path("hardware/", project_views.HardwareListView.as_view(), name="api-hardware"),
    path("software/", project_views.SoftwareListView.as_view(), name="api-software"),
    path("presets/", presets.PresetListView.as_view(), name="api-presets"),
    path("places/", places.PlacesView.as_view(), name="api-places"),
    path("jobs/", views.JobListCreateView.as_view(), name="api-jobs"),
    path("jobs/batch/", views.JobBatchCreateView.as_view(), name="api-jobs-batch"),
    path("jobs/<int:pk>/", views.JobDetailView.as_view(), name="api-job-detail"),
    path("jobs/<int:pk>/events/", views.JobEventsView.as_view(), name="api-job-events"),
    path("jobs/<int:pk>/cancel/", views.JobCancelView.as_view(), name="api-job-cancel"),
    path("jobs/<int:pk>/samples/", gpu_views.JobSamplesView.as_view(), name="api-job-samples"),
    path("jobs/<int:pk>/keep/", gpu_views.JobKeepView.as_view(), name="api-job-keep"),
    path("jobs/<int:pk>/logs/", views.JobLogsView.as_view(), name="api-job-logs"),
    path("jobs/<int:pk>/outputs/<int:artifact_id>/", views.JobOutputDownloadView.as_view(), name="api-job-output"),
    path("sweeps/", views.SweepCreateView.as_view(), name="api-sweeps"),
    path("sweeps/<int:pk>/", views.SweepDetailView.as_view(), name="api-sweep-detail"),
    path("sweeps/<int:pk>/cancel/", views.SweepCancelView.as_view(), name="api-sweep-cancel"),
]

urlpatterns = [
    path("schema/", SpectacularAPIView.as_view(custom_settings={"DESCRIPTION": DESCRIPTION}), name="api-schema"),
    # The split view serves Swagger UI's start-up script as a file: the Content-Security-Policy forbids inline script.
    path("docs/", SpectacularSwaggerSplitView.as_view(url_name="api-schema", template_name="api/swagger_ui.html"), name="api-docs"),
    path("v1/", include(v1)),
    # Anything else under /api/ answers in the API's JSON shape, not with the site's HTML 404 page.
    re_path(r"^[\s\S]*$", not_found),  # [\s\S]: also paths with a newline in them
]
