"""Refusals of the storage actions. Each knows its HTTP status and code (portal/api/errors.py maps them)."""

from __future__ import annotations


class StorageError(Exception):
    """An upload or download that cannot happen as asked. `status` is the HTTP status that fits."""

    status = 400
    code = "invalid"

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message, self.field = message, field


class FileTooLarge(StorageError):
    status = 413
    code = "too_large"


class FileExists(StorageError):
    status = 409
    code = "exists"


class FileMissing(StorageError):
    status = 404
    code = "missing"


class QuotaExceeded(StorageError):
    status = 413
    code = "quota_exceeded"


class UploadConflict(StorageError):
    """The upload is not open any more (completed or aborted), or the object store is not set up for it."""

    status = 409

    def __init__(self, message: str, *, code: str = "conflict", field: str | None = None) -> None:
        super().__init__(message, field=field)
        self.code = code


class StoreUnavailable(StorageError):
    status = 503
    code = "store_unavailable"
