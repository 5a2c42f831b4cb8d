from django.urls import path

from portal.storage import views

urlpatterns = [
    path("", views.data_page, name="data"),
    path("datasets/", views.dataset_create, name="data-datasets"),
    path("manage/", views.data_manage, name="data-manage"),
    path("uploads/<uuid:upload_id>/abort/", views.upload_abort, name="data-upload-abort"),
    path("<int:pk>/download/", views.download, name="data-download"),
]
