"""Secrets at rest: Fernet encryption with rotatable keys (settings.ENCRYPTION_KEYS), SHA-256 for tokens."""

from __future__ import annotations

import hashlib
from functools import lru_cache

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.views.decorators.debug import sensitive_variables

# sensitive_variables: a traceback's report (the debug page, error mails) shows these locals as stars.


@lru_cache(maxsize=4)
@sensitive_variables("keys")
def _fernet(keys: tuple[str, ...]) -> MultiFernet:
    return MultiFernet([Fernet(k.encode() if isinstance(k, str) else k) for k in keys])


@sensitive_variables("plaintext")
def encrypt(plaintext: str) -> str:
    return _fernet(tuple(settings.ENCRYPTION_KEYS)).encrypt(plaintext.encode()).decode()


@sensitive_variables()
def decrypt(ciphertext: str) -> str:
    try:
        return _fernet(tuple(settings.ENCRYPTION_KEYS)).decrypt(ciphertext.encode()).decode()
    except InvalidToken:
        raise ValueError("cannot decrypt: the encryption key changed or the value is corrupt") from None


@sensitive_variables("token")
def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()
