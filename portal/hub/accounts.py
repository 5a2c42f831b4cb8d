"""Which portal account a hub user is: the one documented rule, used by the hub login and by hub tokens alike.

1. An admin's mapping (HubUserMapping, in the Django admin) for the hub user name wins.
2. Otherwise the portal account with exactly the hub user's name, unless that account is the target of some
   mapping: a mapped account is reached only through its mapping(s), so a different person who happens to have
   that name on the hub cannot take it over.
3. Otherwise there is no account: the hub user gets a page saying so (nothing is created automatically).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth import get_user_model

from portal.hub.models import HubUserMapping


@dataclass(frozen=True)
class Match:
    user: object | None  # the portal account, or None when the hub user has none
    rule: str  # "mapping", "same name" or "none"


def match(hub_username: str) -> Match:
    mapping = HubUserMapping.objects.select_related("user").filter(hub_username=hub_username).first()
    if mapping is not None:
        return Match(mapping.user, "mapping")
    user = get_user_model().objects.filter(username=hub_username).first()
    if user is not None and not HubUserMapping.objects.filter(user=user).exists():
        return Match(user, "same name")
    return Match(None, "none")
