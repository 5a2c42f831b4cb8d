from django.urls import path

from portal.storage import views

urlpatterns = [
    path("", views.data_page, name="data"),
    path("datasets/", views.dataset_create, name="data-datasets"),
    path("<int:pk>/download/", views.download, name="data-download"),
]
