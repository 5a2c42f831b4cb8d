"""Test settings: the real PostgreSQL and Redis on this machine, one Redis queue and cache prefix per run."""

import os
import uuid

_run = os.environ.setdefault("KAKEHASHI_TEST_RUN", uuid.uuid4().hex[:8])
os.environ.setdefault("KAKEHASHI_PROFILE", "test")
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/kakehashi")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/2")
os.environ.setdefault("CELERY_BROKER_URL", "redis://127.0.0.1:6379/2")
os.environ.setdefault("CELERY_TASK_DEFAULT_QUEUE", f"kakehashi-test-{_run}")
os.environ.setdefault("CACHE_KEY_PREFIX", f"kakehashi-test-{_run}")
os.environ.setdefault("KAKEHASHI_TRACK_INTERVAL", "1")
os.environ.setdefault("KAKEHASHI_VAR_DIR", f"/tmp/kakehashi-test-{_run}")
os.environ.setdefault("EMAIL_BACKEND", "django.core.mail.backends.locmem.EmailBackend")
# Shared storage is a real S3 server (SeaweedFS), started by the `object_store` session fixture on this port; the
# Celery workers the tests start inherit these variables.
if "KAKEHASHI_TEST_S3_PORT" not in os.environ:
    from tests.seaweedfs import free_port

    os.environ["KAKEHASHI_TEST_S3_PORT"] = str(free_port())
os.environ.setdefault("KAKEHASHI_S3_ENDPOINT_URL", f"http://127.0.0.1:{os.environ['KAKEHASHI_TEST_S3_PORT']}")
os.environ.setdefault("KAKEHASHI_S3_BUCKET", f"kakehashi-test-{_run}")
os.environ.setdefault("KAKEHASHI_S3_ACCESS_KEY_ID", "kakehashi-tests")
os.environ.setdefault("KAKEHASHI_S3_SECRET_ACCESS_KEY", f"secret-of-run-{_run}")

from portal.settings import *  # noqa: E402,F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast logins in tests
# One test database per run: two runs on one machine (a developer and CI) never drop each other's.
DATABASES["default"]["TEST"] = {"NAME": f"test_kakehashi_{_run}"}  # noqa: F405
