"""The hub's way into the portal: /services/<name>/… on the hub, and the OAuth views allauth mounts."""

from __future__ import annotations

from urllib.parse import urlencode, urlsplit

from allauth.socialaccount.providers.oauth2.views import OAuth2CallbackView, OAuth2LoginView
from django.conf import settings
from django.http import Http404, HttpResponseRedirect
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme

from portal.hub import hubapi
from portal.hub.provider import HubOAuth2Adapter


class HubLoginView(OAuth2LoginView):
    """Starts the hub's OAuth on GET too: the hub's links lead here, and the sign-in it starts can only ever be the
    browser's own hub user."""

    def dispatch(self, request, *args, **kwargs):
        if not hubapi.enabled():
            raise Http404("this portal is not connected to a JupyterHub")
        return self.get_provider().redirect_from_request(request)


class HubCallbackView(OAuth2CallbackView):
    """The hub's answer: 404 as the login is when no hub is connected (allauth would fail looking its app up)."""

    def dispatch(self, request, *args, **kwargs):
        if not hubapi.enabled():
            raise Http404("this portal is not connected to a JupyterHub")
        return super().dispatch(request, *args, **kwargs)


oauth2_login = HubLoginView.adapter_view(HubOAuth2Adapter)
oauth2_callback = HubCallbackView.adapter_view(HubOAuth2Adapter)


def service_entry(request, service: str, path: str = ""):
    """/services/kakehashi/<path> on the hub (its proxy keeps the prefix): sign in through the hub, then show <path>.

    The proxy serves this on the hub's address, where the portal's session cookie does not belong; so this sends the
    browser to the portal's own address (that of its OAuth callback) to sign in there.
    """
    if not hubapi.enabled() or service != settings.KAKEHASHI_HUB_SERVICE_NAME:
        raise Http404("no such JupyterHub service here")
    next_path = "/" + path
    if request.GET:
        next_path += "?" + request.GET.urlencode()
    if not url_has_allowed_host_and_scheme(next_path, allowed_hosts=None):
        next_path = "/"
    callback = urlsplit(settings.KAKEHASHI_HUB_CALLBACK_URL)
    login = f"{callback.scheme}://{callback.netloc}{reverse('jupyterhub_login')}"
    return HttpResponseRedirect(f"{login}?{urlencode({'next': next_path})}")
