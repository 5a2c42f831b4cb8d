"""Settings come from the environment; production refuses to start on development defaults."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from portal.env import EnvError, env_bool, env_int, env_positive_int

ROOT = Path(__file__).resolve().parents[2]
GOOD_KEY = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="
REAL_KEY = "k8Yq2v9WzR4tN7pL1xC6bM3hJ5sD0fGaE-Uo_iKrTyQw-3nVb7Xe"


def _load_settings(**env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("KAKEHASHI_", "SECRET_KEY", "DATABASE_URL", "DEBUG", "CELERY_", "REDIS_URL", "CACHE_"))}
    return subprocess.run(
        [sys.executable, "-c", "import portal.settings as s; print(s.DEBUG, s.DATABASES['default']['ENGINE'], s.CELERY_BROKER_URL)"],
        cwd=ROOT, env={**clean, **env}, capture_output=True, text=True,
    )


def test_development_defaults_need_no_configuration():
    result = _load_settings()
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "django.db.backends.sqlite3", "filesystem://"]


def test_production_refuses_the_default_secret_key():
    result = _load_settings(KAKEHASHI_PROFILE="production", KAKEHASHI_ENCRYPTION_KEYS=GOOD_KEY)
    assert result.returncode != 0
    assert "SECRET_KEY must be set" in result.stderr


def test_production_refuses_a_missing_encryption_key():
    result = _load_settings(KAKEHASHI_PROFILE="production", SECRET_KEY=REAL_KEY)
    assert result.returncode != 0
    assert "KAKEHASHI_ENCRYPTION_KEYS must be set" in result.stderr


def test_production_starts_with_real_secrets_and_debug_off():
    result = _load_settings(
        KAKEHASHI_PROFILE="production", SECRET_KEY=REAL_KEY, KAKEHASHI_ENCRYPTION_KEYS=GOOD_KEY,
        DATABASE_URL="postgres://u:p@db:5432/k", CELERY_BROKER_URL="redis://r:6379/0",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "django.db.backends.postgresql", "redis://r:6379/0"]


def test_an_unknown_profile_is_refused():
    result = _load_settings(KAKEHASHI_PROFILE="prod")
    assert result.returncode != 0 and "KAKEHASHI_PROFILE" in result.stderr


def test_a_mistyped_boolean_names_the_variable(monkeypatch):
    monkeypatch.setenv("DEBUG", "maybe")
    with pytest.raises(EnvError, match="DEBUG='maybe'"):
        env_bool("DEBUG")
    monkeypatch.setenv("N", "ten")
    with pytest.raises(EnvError, match="N='ten'"):
        env_int("N", 1)


def test_a_limit_of_zero_files_or_levels_of_outputs_is_refused_naming_the_variable(monkeypatch):
    monkeypatch.setenv("KAKEHASHI_OUTPUT_MAX_FILES", "0")
    with pytest.raises(EnvError, match="KAKEHASHI_OUTPUT_MAX_FILES='0' must be 1 or more"):
        env_positive_int("KAKEHASHI_OUTPUT_MAX_FILES", 10_000)
    monkeypatch.setenv("KAKEHASHI_OUTPUT_MAX_FILES", "25000")
    assert env_positive_int("KAKEHASHI_OUTPUT_MAX_FILES", 10_000) == 25_000


def test_an_object_store_is_configured_by_its_bucket_and_a_mistyped_address_is_named():
    result = subprocess.run(
        [sys.executable, "-c", "import portal.settings as s; print(s.STORAGES['default']['BACKEND'])"],
        cwd=ROOT, capture_output=True, text=True,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("KAKEHASHI_")},
             "KAKEHASHI_S3_BUCKET": "site-data", "KAKEHASHI_S3_ENDPOINT_URL": "http://s3.example:8333/"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "storages.backends.s3.S3Storage"
    assert "S3Storage" not in _load_settings().stdout  # without a bucket: the file system of `make run`
    assert "KAKEHASHI_S3_ENDPOINT_URL='s3.example:8333' is not an http" in _load_settings(
        KAKEHASHI_S3_BUCKET="b", KAKEHASHI_S3_ENDPOINT_URL="s3.example:8333").stderr
    assert "KAKEHASHI_S3_BUCKET is not" in _load_settings(KAKEHASHI_S3_ENDPOINT_URL="http://s3:8333").stderr
    assert "set both" in _load_settings(KAKEHASHI_S3_BUCKET="b", KAKEHASHI_S3_ACCESS_KEY_ID="k").stderr


def test_the_object_stores_secret_never_appears_in_what_is_printed_of_its_configuration(settings):
    from portal.storage import objectstore

    settings.KAKEHASHI_S3_SECRET_ACCESS_KEY = "very-secret-value"
    assert "very-secret-value" not in repr(objectstore._config()) and "very-secret-value" not in str(objectstore._config())


def test_production_refuses_a_short_or_repetitive_secret_key():
    for weak in ("k8Yq2v9WzR4tN7pL1xC6bM3hJ5sD0f", "ab" * 30):
        result = _load_settings(KAKEHASHI_PROFILE="production", SECRET_KEY=weak, KAKEHASHI_ENCRYPTION_KEYS=GOOD_KEY)
        assert result.returncode != 0 and "at least 50 characters" in result.stderr
