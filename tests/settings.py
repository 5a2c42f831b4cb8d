"""Test settings: the real PostgreSQL and Redis on this machine, one Redis queue and cache prefix per run."""

import os
import uuid

# Under pytest-xdist every worker is a run of its own: the controller imported these settings first and its workers
# inherited its environment, so a worker drops what was derived from the controller's run (its queue, cache prefix,
# directories, S3 port and bucket) and derives its own from "<run><worker id>". Its processes (Celery workers, hubs)
# inherit the worker's values unchanged (KAKEHASHI_TEST_WORKER marks them as done). docs/decisions/0047.
_DERIVED = "KAKEHASHI_TEST_DERIVED"
_worker = os.environ.get("PYTEST_XDIST_WORKER", "")
if _worker and os.environ.get("KAKEHASHI_TEST_WORKER") != _worker:
    _base = os.environ.get("KAKEHASHI_TEST_RUN") or uuid.uuid4().hex[:8]
    for _name in filter(None, os.environ.pop(_DERIVED, "").split(",")):
        os.environ.pop(_name, None)
    os.environ["KAKEHASHI_TEST_RUN"] = f"{_base}{_worker}"
    os.environ["KAKEHASHI_TEST_WORKER"] = _worker


def _default(name: str, value: str) -> str:
    """os.environ.setdefault, remembering that this run chose the value (a worker of xdist chooses again)."""
    if name not in os.environ:
        os.environ[name] = value
        os.environ[_DERIVED] = ",".join(filter(None, [*os.environ.get(_DERIVED, "").split(","), name]))
    return os.environ[name]


_run = _default("KAKEHASHI_TEST_RUN", uuid.uuid4().hex[:8])
os.environ.setdefault("KAKEHASHI_PROFILE", "test")
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/kakehashi")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/2")
os.environ.setdefault("CELERY_BROKER_URL", "redis://127.0.0.1:6379/2")
_default("CELERY_TASK_DEFAULT_QUEUE", f"kakehashi-test-{_run}")
_default("CACHE_KEY_PREFIX", f"kakehashi-test-{_run}")
os.environ.setdefault("KAKEHASHI_TRACK_INTERVAL", "1")
_default("KAKEHASHI_VAR_DIR", f"/tmp/kakehashi-test-{_run}")
os.environ.setdefault("EMAIL_BACKEND", "django.core.mail.backends.locmem.EmailBackend")
# Shared storage is a real S3 server (SeaweedFS), started by the `object_store` session fixture on this port; the
# Celery workers the tests start inherit these variables.
if "KAKEHASHI_TEST_S3_PORT" not in os.environ:
    from tests.seaweedfs import free_port

    _default("KAKEHASHI_TEST_S3_PORT", str(free_port()))
_default("KAKEHASHI_S3_ENDPOINT_URL", f"http://127.0.0.1:{os.environ['KAKEHASHI_TEST_S3_PORT']}")
_default("KAKEHASHI_S3_BUCKET", f"kakehashi-test-{_run}")
os.environ.setdefault("KAKEHASHI_S3_ACCESS_KEY_ID", "kakehashi-tests")
_default("KAKEHASHI_S3_SECRET_ACCESS_KEY", f"secret-of-run-{_run}")

from portal.settings import *  # noqa: E402,F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast logins in tests
INSTALLED_APPS = [*INSTALLED_APPS, "tests.testdb"]  # noqa: F405  (the suite's cheap `flush`, tests/testdb)
# One test database per run: two runs on one machine (a developer and CI) never drop each other's.
DATABASES["default"]["TEST"] = {"NAME": f"test_kakehashi_{_run}"}  # noqa: F405
