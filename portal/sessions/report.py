"""Where a session's server reports its address: the portal as compute nodes reach it."""

from django.conf import settings
from django.urls import reverse


def report_url() -> str:
    base = settings.KAKEHASHI_SESSION_REPORT_URL or settings.KAKEHASHI_SITE_URL
    return f"{base.rstrip('/')}{reverse('api-session-report')}"
