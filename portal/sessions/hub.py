"""The portal's Start asks the hub to start a named server with the chosen options; the hub's spawner then comes
back to the portal's API to record the session (portal/sessions/actions.py). The hub is asked with the service's
own token (its role has the scope `servers`), never a user's."""

from __future__ import annotations

import requests
from django.conf import settings

from portal.hub import hubapi
from portal.hub.models import HubUserMapping

TIMEOUT_SECONDS = 10


class HubRefused(Exception):
    """The hub did not start the server; the message says why, for the person. `status`: the API's answer (409 when
    no hub is connected to this portal, 502 when the hub refused or could not be reached)."""

    def __init__(self, message: str, status: int = 502) -> None:
        super().__init__(message)
        self.status = status


def hub_user_of(user) -> str:
    """The hub user name of a portal account: its admin's mapping, else its own name (portal/hub/accounts.py's
    rule, read the other way)."""
    mapping = HubUserMapping.objects.filter(user=user).order_by("pk").first()
    return mapping.hub_username if mapping else user.username


def connect_url(hub_user: str, server_name: str) -> str:
    """Where a person opens the session: its named server on the hub (the hub signs them in; no second password)."""
    return f"{settings.KAKEHASHI_HUB_URL}/user/{hub_user}/{server_name + '/' if server_name else ''}"


def open_on_hub(hub_user: str, server_name: str, options: dict) -> None:
    """Ask the hub to start `hub_user`'s named server `server_name` with `options` (what the spawner posts back)."""
    if not hubapi.enabled():
        raise HubRefused("sessions open through JupyterHub, and this portal is not connected to one", status=409)
    try:
        answer = hubapi.service_request("POST", f"users/{hub_user}/servers/{server_name}", json=options,
                                        timeout=TIMEOUT_SECONDS)
    except requests.RequestException as exc:
        raise HubRefused(f"the JupyterHub could not be reached: {type(exc).__name__}") from None
    if answer.status_code in (201, 202):
        return
    try:
        message = answer.json().get("message", "")
    except ValueError:
        message = answer.text[:200]
    if answer.status_code == 404:
        raise HubRefused(f"the hub has no user {hub_user!r}: sign in to the hub once first")
    raise HubRefused(f"the hub did not start the session ({answer.status_code}): {message}")


class HubBusy(Exception):
    """The hub is still starting or stopping the server: ask again in a few seconds."""


def forget_on_hub(hub_user: str, server_name: str) -> None:
    """Stop and remove the named server (`remove: true`), so an ended session does not count against the hub's
    named_server_limit_per_user: JupyterHub counts stopped named servers too, and a sixth session would be refused.
    Gone already (404) is done; a server the hub is still stopping is HubBusy (the task asks again)."""
    if not hubapi.enabled():
        return
    try:
        answer = hubapi.service_request("DELETE", f"users/{hub_user}/servers/{server_name}", json={"remove": True},
                                        timeout=TIMEOUT_SECONDS)
    except requests.RequestException as exc:
        raise HubBusy(f"the JupyterHub could not be reached: {type(exc).__name__}") from None
    if answer.status_code in (202, 204, 404):
        return
    # 400 "… is pending stop, please wait": the hub's own stop (its poll saw the job end) is under way.
    raise HubBusy(f"the hub did not remove {hub_user}/{server_name} ({answer.status_code}): {answer.text[:200]}")
