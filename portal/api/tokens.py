"""API tokens: issue, check, revoke. The secret is shown once and only its SHA-256 digest is stored."""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterable
from datetime import date, datetime, time, timedelta

from django.db import transaction
from django.utils import timezone

from portal.api.models import ApiToken, Scope
from portal.audit.actions import record
from portal.compiled import CompiledRead
from portal.crypto import token_digest

TOKEN_PREFIX = "kh_"
# kh_ + 32 random bytes in URL-safe base64 (43 characters).
_TOKEN_RE = re.compile(r"^kh_[A-Za-z0-9_-]{43}$")
DISPLAY_CHARS = 11  # "kh_" and 8 characters of the secret: enough to tell tokens apart, useless to guess
# A token's last use is written at most this often: a busy script must not turn every GET into a write.
LAST_USED_EVERY = timedelta(seconds=60)
MAX_EXPIRY_DAYS = 3650


class TokenRefused(Exception):
    """The presented token cannot be used. The message says why and what to do."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


def new_secret() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def clean_scopes(scopes: Iterable[str]) -> list[str]:
    chosen = sorted({s.strip().lower() for s in scopes if s and s.strip()})
    unknown = [s for s in chosen if s not in Scope.values]
    if unknown:
        raise ValueError(f"unknown scope(s) {', '.join(unknown)}: choose from {', '.join(Scope.values)}")
    if not chosen:
        raise ValueError(f"choose at least one scope ({', '.join(Scope.values)})")
    return chosen


def parse_expiry(text: str | None, now: datetime | None = None) -> datetime | None:
    """When a token expires: "30d", "12h", "2w", a date "2026-12-31" (valid through that day), or never."""
    raw = (text or "").strip().lower()
    if raw in {"", "never", "none", "0"}:
        return None
    now = now or timezone.now()
    match = re.fullmatch(r"(\d{1,5})\s*([hdw])", raw)
    if match:
        count, unit = int(match.group(1)), match.group(2)
        delta = {"h": timedelta(hours=count), "d": timedelta(days=count), "w": timedelta(weeks=count)}[unit]
    else:
        try:
            day = date.fromisoformat(raw)
        except ValueError:
            raise ValueError(f"expiry {text!r}: write a number of days like 30d, hours like 12h, or a date like 2026-12-31") from None
        # A date means "valid through that day" in the portal's time zone.
        end = timezone.make_aware(datetime.combine(day + timedelta(days=1), time.min))
        delta = end - now
    if delta <= timedelta(0):
        raise ValueError(f"expiry {text!r} is in the past")
    if delta > timedelta(days=MAX_EXPIRY_DAYS):
        raise ValueError(f"expiry {text!r} is more than {MAX_EXPIRY_DAYS} days away")
    return now + delta


def issue_token(user, *, name: str, scopes: Iterable[str], expires_at: datetime | None = None) -> tuple[ApiToken, str]:
    """Create a token for `user`. Returns the row and the secret, which is never stored and cannot be shown again."""
    name = (name or "").strip()
    if not name or len(name) > 100:
        raise ValueError("give the token a name of 1 to 100 characters (e.g. the machine or script that uses it)")
    chosen = clean_scopes(scopes)
    if expires_at is not None and expires_at <= timezone.now():
        raise ValueError("the expiry must be in the future")
    secret = new_secret()
    with transaction.atomic():
        token = ApiToken.objects.create(
            user=user,
            name=name,
            prefix=secret[:DISPLAY_CHARS],
            digest=token_digest(secret),
            scopes=chosen,
            expires_at=expires_at,
        )
        record("api_token.issue", actor=user, target=token, name=name, scopes=chosen,
               expires_at=expires_at.isoformat() if expires_at else None)
    return token, secret


def revoke_token(token: ApiToken, *, actor) -> ApiToken:
    """Revoke a token for good (idempotent). Only its owner or site staff may."""
    from django.core.exceptions import PermissionDenied

    if token.user_id != actor.pk and not actor.is_staff:
        raise PermissionDenied("only the token's owner can revoke it")
    with transaction.atomic():
        locked = ApiToken.objects.select_for_update().get(pk=token.pk)
        if locked.revoked_at is None:
            locked.revoked_at = timezone.now()
            locked.save(update_fields=["revoked_at"])
            record("api_token.revoke", actor=actor, target=locked, name=locked.name)
    return locked


# Every API request reads this: compiled once per process (docs/decisions/0054).
_BY_DIGEST = CompiledRead(lambda digest: ApiToken.objects.select_related("user").filter(digest=digest), digest=str)


def authenticate(secret: str) -> ApiToken:
    """The active token with this secret, or TokenRefused with a message a person can act on."""
    if not _TOKEN_RE.match(secret):
        raise TokenRefused(
            "malformed API token: tokens look like kh_ followed by 43 letters, digits, '-' or '_' "
            "(copy it again from Settings → API tokens)",
            "token_malformed",
        )
    token = _BY_DIGEST.first(digest=token_digest(secret))
    if token is None:
        raise TokenRefused("unknown API token: it was never issued or was deleted; create one at /settings/tokens/",
                           "token_unknown")
    if token.revoked_at is not None:
        raise TokenRefused(
            f"API token {token.name!r} ({token.prefix}…) was revoked on {token.revoked_at:%Y-%m-%d %H:%M %Z}; "
            "create a new one at /settings/tokens/",
            "token_revoked",
        )
    if token.is_expired:
        raise TokenRefused(
            f"API token {token.name!r} ({token.prefix}…) expired on {token.expires_at:%Y-%m-%d %H:%M %Z}; "
            "create a new one at /settings/tokens/",
            "token_expired",
        )
    if not token.user.is_active:
        raise TokenRefused("the account this API token belongs to is disabled", "account_disabled")
    return token


def record_use(token: ApiToken, ip: str | None, now: datetime | None = None) -> bool:
    """Note when and from where a token was used, at most once a minute per token (or when the address changes)."""
    now = now or timezone.now()
    if token.last_used_at is not None and now - token.last_used_at < LAST_USED_EVERY and token.last_used_ip == ip:
        return False
    # A queryset update: no read-modify-write of the other fields, and concurrent requests cannot clobber them.
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=now, last_used_ip=ip)
    token.last_used_at, token.last_used_ip = now, ip
    return True
