from __future__ import annotations

from django.conf import settings
from django.db import models


class HubUserMapping(models.Model):
    """An admin's exception to the matching rule: this hub user signs in as that portal account.

    Without a mapping a hub user matches the portal account with the same user name. A portal account named in a
    mapping is reached only through its mapping(s), so a hub user who merely shares its name cannot take it over.
    """

    hub_username = models.CharField(max_length=255, unique=True, help_text="the user's name on the JupyterHub")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="hub_mappings",
                             help_text="the portal account this hub user signs in as")
    note = models.CharField(max_length=200, blank=True, help_text="why, e.g. 'hub name from the university directory'")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["hub_username"]
        verbose_name = "hub user mapping"

    def __str__(self) -> str:
        return f"hub user {self.hub_username} → {self.user}"
