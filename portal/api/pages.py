"""Settings → API tokens: create (the secret is shown once), list and revoke personal API tokens."""

from __future__ import annotations

from datetime import timedelta

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from portal.api import tokens
from portal.api.forms import TokenForm
from portal.api.models import ApiToken


@never_cache  # the page that shows a new secret must not be kept by any cache or the browser's history
@login_required
def token_list(request):
    new_secret = None
    new_token = None
    if request.method == "POST":
        form = TokenForm(request.POST)
        if form.is_valid():
            days = form.cleaned_data["expires_in_days"]
            try:
                new_token, new_secret = tokens.issue_token(
                    request.user,
                    name=form.cleaned_data["name"],
                    scopes=form.cleaned_data["scopes"],
                    expires_at=timezone.now() + timedelta(days=days) if days else None,
                )
            except ValueError as exc:
                form.add_error(None, str(exc))
            else:
                # Rendered here rather than after a redirect: keeping the secret for the next page would mean
                # storing it (in the session, i.e. the database), which is exactly what must not happen.
                form = TokenForm()
    else:
        form = TokenForm()
    return render(request, "api/tokens.html", {
        "form": form,
        "tokens": ApiToken.objects.filter(user=request.user),
        "new_secret": new_secret,
        "new_token": new_token,
        "api_url": request.build_absolute_uri("/").rstrip("/"),
        "nav": "settings",
    })


@login_required
@require_POST
def token_revoke(request, pk: int):
    token = get_object_or_404(ApiToken, pk=pk, user=request.user)
    tokens.revoke_token(token, actor=request.user)
    messages.success(request, f"Token {token.name} ({token.prefix}…) is revoked; programs using it can no longer sign in.")
    return redirect("api-tokens")
