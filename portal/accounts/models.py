from __future__ import annotations

from django.db import models


class SiteSettings(models.Model):
    """Settings a site admin changes at run time (one row)."""

    signup_open = models.BooleanField(default=True, help_text="Let anyone create an account on the login page")
    reporting_unit = models.CharField(
        max_length=16, blank=True,
        help_text="Unit site-wide usage is reported in (costs converted with the unit conversions); blank = KAKEHASHI_REPORTING_UNIT",
    )

    class Meta:
        verbose_name_plural = "site settings"

    def __str__(self) -> str:
        return "Site settings"

    @classmethod
    def current(cls) -> SiteSettings:
        obj, _ = cls.objects.get_or_create(pk=1)
        return obj
