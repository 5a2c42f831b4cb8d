"""Secrets at rest: Fernet encryption with rotatable keys (settings.ENCRYPTION_KEYS), SHA-256 for tokens."""

from __future__ import annotations

import hashlib
from functools import lru_cache

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings


@lru_cache(maxsize=4)
def _fernet(keys: tuple[str, ...]) -> MultiFernet:
    return MultiFernet([Fernet(k.encode() if isinstance(k, str) else k) for k in keys])


def encrypt(plaintext: str) -> str:
    return _fernet(tuple(settings.ENCRYPTION_KEYS)).encrypt(plaintext.encode()).decode()


def decrypt(ciphertext: str) -> str:
    try:
        return _fernet(tuple(settings.ENCRYPTION_KEYS)).decrypt(ciphertext.encode()).decode()
    except InvalidToken:
        raise ValueError("cannot decrypt: the encryption key changed or the value is corrupt") from None


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()
