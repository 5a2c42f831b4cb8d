from django.urls import path

from portal.api import pages

urlpatterns = [
    path("tokens/", pages.token_list, name="api-tokens"),
    path("tokens/<int:pk>/revoke/", pages.token_revoke, name="api-token-revoke"),
]
