"""Kakehashi settings: everything comes from environment variables with safe development defaults.

Profiles (KAKEHASHI_PROFILE):
- development (default): SQLite under var/, a file-system Celery broker, DEBUG on.
- production: refuses to start with a default or missing secret or encryption key; DEBUG off.
"""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from portal.env import env_bool, env_int, env_list, env_str

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("KAKEHASHI_VAR_DIR", str(BASE_DIR / "var")))

PROFILE = env_str("KAKEHASHI_PROFILE", "development")
if PROFILE not in {"development", "production", "test"}:
    raise ImproperlyConfigured(f"KAKEHASHI_PROFILE={PROFILE!r}: use development, production or test")
PRODUCTION = PROFILE == "production"
if not PRODUCTION:
    # The embedded defaults (SQLite, file broker, local jobs) keep their state here.
    (VAR_DIR / "staticfiles").mkdir(parents=True, exist_ok=True)

_DEV_SECRET = "dev-only-insecure-secret-key-change-me"
SECRET_KEY = env_str("SECRET_KEY", _DEV_SECRET)
if PRODUCTION and (SECRET_KEY == _DEV_SECRET or len(SECRET_KEY) < 32):
    raise ImproperlyConfigured(
        "SECRET_KEY must be set to a random value of at least 32 characters in the production profile"
    )

# Fernet keys that encrypt secrets at rest (SSH private keys, cloud credentials). Comma-separated: the first
# encrypts, all decrypt, so keys can be rotated. Development derives one from SECRET_KEY.
_encryption_keys = env_list("KAKEHASHI_ENCRYPTION_KEYS")
if not _encryption_keys:
    if PRODUCTION:
        raise ImproperlyConfigured(
            "KAKEHASHI_ENCRYPTION_KEYS must be set in the production profile "
            "(generate one with: python -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())')"
        )
    _encryption_keys = [base64.urlsafe_b64encode(hashlib.sha256(SECRET_KEY.encode()).digest()).decode()]
ENCRYPTION_KEYS = _encryption_keys

DEBUG = env_bool("DEBUG", not PRODUCTION)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", [] if PRODUCTION else ["127.0.0.1", "localhost", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS")
if PRODUCTION:
    SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", True)
    CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", True)
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_CONTENT_TYPE_NOSNIFF = True
    X_FRAME_OPTIONS = "DENY"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "allauth",
    "allauth.account",
    "django_htmx",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI served from our own static files: no CDN at run time
    "portal.audit",
    "portal.accounts",
    "portal.projects",
    "portal.clusters",
    "portal.catalog",
    "portal.budgets",
    "portal.jobs",
    "portal.api",
    "portal.storage",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "allauth.account.middleware.AccountMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "portal.urls"
WSGI_APPLICATION = "portal.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "portal.context.navigation",
            ],
        },
    },
]

DATABASES = {
    "default": dj_database_url.parse(
        env_str("DATABASE_URL", f"sqlite:///{VAR_DIR / 'kakehashi.sqlite3'}"),
        conn_max_age=env_int("DATABASE_CONN_MAX_AGE", 0),
    )
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env_str("REDIS_URL")
if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": env_str("CACHE_KEY_PREFIX", "kakehashi"),
        }
    }
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
AUTHENTICATION_BACKENDS = [
    "django.contrib.auth.backends.ModelBackend",
    "allauth.account.auth_backends.AuthenticationBackend",
]

# django-allauth: local accounts. Whether sign-up is open is a site setting an admin can switch off.
ACCOUNT_LOGIN_METHODS = {"username", "email"}
ACCOUNT_SIGNUP_FIELDS = ["email*", "username*", "password1*", "password2*"]
ACCOUNT_EMAIL_VERIFICATION = env_str("ACCOUNT_EMAIL_VERIFICATION", "none")
ACCOUNT_ADAPTER = "portal.accounts.adapter.AccountAdapter"
LOGIN_REDIRECT_URL = "/"
LOGIN_URL = "/accounts/login/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = env_str("TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "whitenoise.storage.CompressedManifestStaticFilesStorage"
            if PRODUCTION
            else "django.contrib.staticfiles.storage.StaticFilesStorage"
        )
    },
}
MEDIA_ROOT = Path(env_str("KAKEHASHI_MEDIA_ROOT", str(VAR_DIR / "media")))

EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "kakehashi@localhost")

# Celery. With no broker configured the development profile uses kombu's file-system transport, which needs
# no server; production sets CELERY_BROKER_URL=redis://...
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", "filesystem://")
if CELERY_BROKER_URL == "filesystem://":
    _broker_dir = VAR_DIR / "broker"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir),
        "data_folder_out": str(_broker_dir),
        "processed_folder": str(_broker_dir / "processed"),
        "control_folder": str(_broker_dir / "control"),
        "store_processed": False,
        "polling_interval": 0.5,
    }
else:
    # A task whose worker died is redelivered after this many seconds; our own recovery sweep is faster.
    CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": env_int("CELERY_VISIBILITY_TIMEOUT", 3600)}
CELERY_TASK_DEFAULT_QUEUE = env_str("CELERY_TASK_DEFAULT_QUEUE", "kakehashi")
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True

# How often the tracker asks each scheduler about its active jobs, and the other periodic sweeps.
KAKEHASHI_TRACK_INTERVAL = env_int("KAKEHASHI_TRACK_INTERVAL", 5)
KAKEHASHI_RECOVER_INTERVAL = env_int("KAKEHASHI_RECOVER_INTERVAL", 30)
KAKEHASHI_BUDGET_INTERVAL = env_int("KAKEHASHI_BUDGET_INTERVAL", 30)
# A queued/submitting job untouched this long is re-dispatched (its broker message may have been lost).
KAKEHASHI_STALE_DISPATCH_SECONDS = env_int("KAKEHASHI_STALE_DISPATCH_SECONDS", 60)
# A job neither the queue nor accounting knows is flagged `lost` after this long.
KAKEHASHI_LOST_AFTER_SECONDS = env_int("KAKEHASHI_LOST_AFTER_SECONDS", 120)
# A job the queue says has ended but accounting does not know yet (slurmdbd commits a few seconds late) waits
# this long for accounting's exit code and times before the queue's word alone ends it.
KAKEHASHI_ACCOUNTING_GRACE_SECONDS = env_int("KAKEHASHI_ACCOUNTING_GRACE_SECONDS", 15)
# Where the built-in local backend keeps per-job working directories.
KAKEHASHI_LOCAL_JOBS_DIR = env_str("KAKEHASHI_LOCAL_JOBS_DIR", str(VAR_DIR / "jobs"))
# Bytes of a finished job's outputs/ copied into the portal's storage (the rest stays on the cluster, listed).
KAKEHASHI_OUTPUT_COPY_BYTES = env_int("KAKEHASHI_OUTPUT_COPY_BYTES", 64 * 1024 * 1024)
KAKEHASHI_MAX_SCRIPT_BYTES = env_int("KAKEHASHI_MAX_SCRIPT_BYTES", 256 * 1024)
KAKEHASHI_MAX_NOTEBOOK_BYTES = env_int("KAKEHASHI_MAX_NOTEBOOK_BYTES", 16 * 1024 * 1024)
# Notebooks arrive as JSON bodies: allow bodies up to the notebook limit plus room for the rest of the request.
DATA_UPLOAD_MAX_MEMORY_SIZE = KAKEHASHI_MAX_NOTEBOOK_BYTES + 1024 * 1024
KAKEHASHI_SSH_TIMEOUT = env_int("KAKEHASHI_SSH_TIMEOUT", 30)
# How long a submit attempt owns a job before another attempt may take over (it then looks before submitting).
KAKEHASHI_DISPATCH_LEASE_SECONDS = env_int("KAKEHASHI_DISPATCH_LEASE_SECONDS", 2 * KAKEHASHI_SSH_TIMEOUT + 30)
KAKEHASHI_REPORTING_UNIT = env_str("KAKEHASHI_REPORTING_UNIT", "JPY")

# API requests allowed per token (per user for browser sessions, per address without either), e.g. "600/min".
KAKEHASHI_API_RATE = env_str("KAKEHASHI_API_RATE", "600/min")
# Largest file one upload may bring into a project's shared storage (bytes).
KAKEHASHI_MAX_UPLOAD_BYTES = env_int("KAKEHASHI_MAX_UPLOAD_BYTES", 1024 * 1024 * 1024)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "portal.api.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_THROTTLE_CLASSES": ["portal.api.throttling.TokenRateThrottle"],
    "DEFAULT_THROTTLE_RATES": {"token": KAKEHASHI_API_RATE},
    "EXCEPTION_HANDLER": "portal.api.errors.exception_handler",
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.LimitOffsetPagination",
    "PAGE_SIZE": 50,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Kakehashi API",
    "DESCRIPTION": "Run jobs on HPC clusters and the cloud inside project budgets.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SCHEMA_PATH_PREFIX": "/api/v1",
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    # paramiko's transport logs at DEBUG can include key material fingerprints and banners: keep it quiet.
    "loggers": {"paramiko": {"level": "WARNING"}},
}
