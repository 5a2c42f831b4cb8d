"""The site's rule on second factors: who must have one (settings.KAKEHASHI_MFA_REQUIRED_FOR), and the middleware
that sends such a person to set one up before anything else.

allauth.mfa does the rest: TOTP, recovery codes and WebAuthn enrolment, and asking for the second factor at
sign-in once one is set up.
"""

from __future__ import annotations

from allauth.mfa.models import Authenticator
from allauth.mfa.utils import is_mfa_enabled
from django.conf import settings
from django.contrib import messages
from django.http import JsonResponse
from django.shortcuts import redirect

from portal.projects.models import Membership, Role

# What a person may still reach while enrolment is pending: allauth's own pages (MFA set-up, sign-out,
# re-authentication, password change), static files and the health check.
_EXEMPT_PREFIXES = ("/accounts/", "/static/", "/healthz")
SECOND_FACTORS = [Authenticator.Type.TOTP, Authenticator.Type.WEBAUTHN]


def mfa_required(user) -> bool:
    """Whether the site requires this user to have a second factor (recovery codes alone do not count)."""
    required_for = settings.KAKEHASHI_MFA_REQUIRED_FOR
    if not required_for or not user.is_authenticated:
        return False
    if "staff" in required_for and (user.is_staff or user.is_superuser):
        return True
    if "project-admins" in required_for:
        return Membership.objects.filter(user=user, role__in=[Role.OWNER, Role.ADMIN]).exists()
    return False


def missing_second_factor(user) -> bool:
    return mfa_required(user) and not is_mfa_enabled(user, SECOND_FACTORS)


class RequireMFA:
    """Sends a signed-in person who must have a second factor, and has none, to set one up.

    API tokens are not affected (automation has no second factor); a browser session calling the API is.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if (
            settings.KAKEHASHI_MFA_REQUIRED_FOR
            and not request.path.startswith(_EXEMPT_PREFIXES)
            and request.user.is_authenticated
            and missing_second_factor(request.user)
        ):
            message = "Set up two-factor authentication first: this site requires it for your role."
            if request.path.startswith("/api/"):
                return JsonResponse({"detail": message, "code": "mfa_required"}, status=403)
            messages.warning(request, message)
            return redirect("mfa_index")
        return self.get_response(request)
