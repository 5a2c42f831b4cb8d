"""The OAuth provider's URLs, which django-allauth mounts under /accounts/: jupyterhub/login/ and …/callback/."""

from allauth.socialaccount.providers.oauth2.urls import default_urlpatterns

from portal.hub.provider import HubProvider

urlpatterns = default_urlpatterns(HubProvider)
