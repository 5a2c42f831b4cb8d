"""Audit rows for what changes outside the portal's own actions: sign-in, its factors and e-mail addresses, and the
Django admin."""

from __future__ import annotations

from allauth.account import signals as account_signals
from allauth.mfa import signals as mfa_signals
from allauth.socialaccount import signals as social_signals
from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry
from django.contrib.auth import signals as auth_signals
from django.db.models.signals import post_save
from django.dispatch import receiver

from portal.audit.actions import record

_ADMIN_ACTIONS = {ADDITION: "admin.add", CHANGE: "admin.change", DELETION: "admin.delete"}


@receiver(auth_signals.user_logged_in)
def _logged_in(sender, request, user, **kwargs):
    record("auth.login", actor=user, request=request)


@receiver(auth_signals.user_logged_out)
def _logged_out(sender, request, user, **kwargs):
    if user is not None:
        record("auth.logout", actor=user, request=request)


@receiver(auth_signals.user_login_failed)
def _login_failed(sender, credentials, request=None, **kwargs):
    # Only the name that was tried: Django masks the password in `credentials`, but nothing else is needed.
    tried = credentials.get("username") or credentials.get("email") or credentials.get("login") or ""
    record("auth.login_failed", login=str(tried)[:150], request=request)


@receiver(account_signals.user_signed_up)
def _signed_up(sender, request, user, **kwargs):
    record("auth.signup", actor=user, target=user, request=request)


@receiver(account_signals.password_changed)
@receiver(account_signals.password_set)
@receiver(account_signals.password_reset)
def _password(sender, request, user, **kwargs):
    record("auth.password_change", actor=user, target=user, request=request)


@receiver(account_signals.email_added)
def _email_added(sender, request, user, email_address, **kwargs):
    record("auth.email_add", actor=user, target=email_address, email=email_address.email, request=request)


@receiver(account_signals.email_removed)
def _email_removed(sender, request, user, email_address, **kwargs):
    record("auth.email_remove", actor=user, email=email_address.email, request=request)


@receiver(account_signals.email_changed)
def _email_primary(sender, request, user, from_email_address, to_email_address, **kwargs):
    # Where password resets go: the step an account takeover takes.
    record("auth.email_primary", actor=user, target=to_email_address, request=request,
           before=getattr(from_email_address, "email", ""), after=to_email_address.email)


@receiver(account_signals.email_confirmed)
def _email_verified(sender, request, email_address, **kwargs):
    record("auth.email_verify", actor=email_address.user, target=email_address, email=email_address.email,
           request=request)


@receiver(mfa_signals.authenticator_added)
def _factor_added(sender, request, user, authenticator, **kwargs):
    record("mfa.add", actor=user, target=authenticator, type=authenticator.type, request=request)


@receiver(mfa_signals.authenticator_removed)
def _factor_removed(sender, request, user, authenticator, **kwargs):
    record("mfa.remove", actor=user, type=authenticator.type, request=request)


@receiver(mfa_signals.authenticator_reset)
def _factor_reset(sender, request, user, authenticator, **kwargs):
    record("mfa.reset", actor=user, target=authenticator, type=authenticator.type, request=request)


@receiver(social_signals.social_account_added)
def _identity_linked(sender, request, sociallogin, **kwargs):
    record("sso.link", actor=sociallogin.user, provider=sociallogin.account.provider, uid=sociallogin.account.uid,
           request=request)


@receiver(social_signals.social_account_removed)
def _identity_unlinked(sender, request, socialaccount, **kwargs):
    record("sso.unlink", actor=socialaccount.user, provider=socialaccount.provider, uid=socialaccount.uid,
           request=request)


@receiver(post_save, sender=LogEntry)
def _admin_change(sender, instance: LogEntry, created: bool, **kwargs):
    if not created:
        return
    record(
        _ADMIN_ACTIONS.get(instance.action_flag, "admin.change"), actor=instance.user,
        model=instance.content_type.model if instance.content_type else "", object_id=instance.object_id or "",
        object=instance.object_repr, change=instance.get_change_message(),
    )

