"""Kakehashi settings: everything comes from environment variables with safe development defaults.

Profiles (KAKEHASHI_PROFILE):
- development (default): SQLite under var/, a file-system Celery broker, DEBUG on.
- production: refuses to start with a default or missing secret or encryption key; DEBUG off.

Why one module: Django reads one settings module; each section reads its environment variables next to its
documented default, and the production profile's refusals check them all in one place.
"""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from portal.env import env_bool, env_choices, env_float, env_int, env_list, env_positive_int, env_str, env_url

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
# 50 characters: what `manage.py check --deploy` asks for.
if PRODUCTION and (SECRET_KEY == _DEV_SECRET or len(SECRET_KEY) < 50 or len(set(SECRET_KEY)) < 5):
    raise ImproperlyConfigured(
        "SECRET_KEY must be set to a random value of at least 50 characters in the production profile "
        "(generate one with: python -c 'import secrets; print(secrets.token_urlsafe(50))')"
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
    # Production sits behind a TLS-terminating proxy that sets X-Forwarded-Proto (docs/deployment.md "Production
    # checklist").
    # Plain-HTTP requests are redirected, and browsers are told to use HTTPS only (HSTS) from then on.
    SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", True)
    CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", True)
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    # Health checks come from inside the deployment (load balancer, compose) over plain HTTP.
    SECURE_REDIRECT_EXEMPT = [r"^healthz$"]
    SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 365 * 24 * 3600)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", True)
    # Only matters once the domain is submitted to the browsers' preload list, which is the site's choice.
    SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", True)
    SECURE_CONTENT_TYPE_NOSNIFF = True
    X_FRAME_OPTIONS = "DENY"
SESSION_COOKIE_HTTPONLY = True
SECURE_REFERRER_POLICY = "same-origin"

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
    "allauth.mfa",
    "allauth.socialaccount",
    "allauth.socialaccount.providers.openid_connect",
    "allauth.socialaccount.providers.saml",
    "csp",
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
    "portal.hub",
    "portal.sessions",
    "portal.notifications",
    "portal.usage",
    "portal.samples",
    "portal.cloud",
    "portal.dev",  # make run's demo data and the test cluster's registration (management commands only)
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
    "portal.audit.middleware.RequestOrigin",
    "portal.accounts.mfa.RequireMFA",
    "django_htmx.middleware.HtmxMiddleware",
    "portal.csp.CSPMiddleware",
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
                "portal.context.notifications",
            ],
        },
    },
]

DATABASES = {
    "default": dj_database_url.parse(
        env_str("DATABASE_URL", f"sqlite:///{VAR_DIR / 'kakehashi.sqlite3'}"),
        # Seconds a connection is kept for the next request: production keeps each process's (a new one is a
        # PostgreSQL backend forked and authenticated, its caches cold: a few ms of both cores per request,
        # bench/README.md "Pages at 100,000 jobs"; bench/pages.py and bench/throughput.py measure both); 0 opens one
        # per request. A kept connection is checked before it is reused, so a restarted database costs a reconnect,
        # not a 500.
        conn_max_age=env_int("DATABASE_CONN_MAX_AGE", 300 if PRODUCTION else 0),
        conn_health_checks=env_bool("DATABASE_CONN_HEALTH_CHECKS", True),
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # `make run` has a web server and a worker (and its pool) writing to one file (docs/decisions/0015):
    # - WAL: readers never wait for the writer, and the writer never waits for readers;
    # - IMMEDIATE: a transaction takes the write lock when it begins and waits for it (the timeout) there;
    #   a deferred one that reads first and writes later cannot wait, SQLite refuses it at once with
    #   "database is locked";
    # - synchronous=NORMAL is safe with WAL (a power cut may lose the last commits, never corrupt the file).
    DATABASES["default"].setdefault("OPTIONS", {}).update({
        "transaction_mode": "IMMEDIATE",
        "timeout": env_int("KAKEHASHI_SQLITE_TIMEOUT", 30),
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL",
    })
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
# Login throttling (allauth's rate limits, kept in the cache, which is Redis in production): failed sign-ins
# per address and per account, and the other endpoints an attacker would hammer. Format: "N/period/key".
ACCOUNT_RATE_LIMITS = {
    "login_failed": env_str("KAKEHASHI_LOGIN_FAILED_RATE", "10/m/ip,5/5m/key"),
    "login": env_str("KAKEHASHI_LOGIN_RATE", "30/m/ip"),
    "signup": "20/m/ip",
    "reset_password": "20/m/ip,5/m/key",
    "reset_password_from_key": "20/m/ip",
}

# Multi-factor authentication (allauth.mfa): TOTP apps, recovery codes and WebAuthn security keys/passkeys.
MFA_SUPPORTED_TYPES = ["totp", "recovery_codes", "webauthn"]
MFA_PASSKEY_LOGIN_ENABLED = True
MFA_TOTP_ISSUER = env_str("KAKEHASHI_MFA_ISSUER", "Kakehashi")
MFA_TOTP_TOLERANCE = 1  # one 30-second step either side: phones' clocks drift
# WebAuthn needs a secure origin; plain http is accepted only off production (http://localhost in development).
MFA_WEBAUTHN_ALLOW_INSECURE_ORIGIN = not PRODUCTION
# Who must have a second factor before using the portal: "staff" (site admins), "project-admins" (owners and
# admins of any project). Such a user without one is sent to set it up before anything else.
KAKEHASHI_MFA_REQUIRED_FOR = env_choices("KAKEHASHI_MFA_REQUIRED_FOR", {"staff", "project-admins"})

# Single sign-on (allauth.socialaccount): OpenID Connect and SAML identity providers are configured by site
# admins as Identity providers (portal.accounts.models.IdentityProvider), with their account-linking rules
# (portal.accounts.sso); the JupyterHub sign-in (portal.hub) adds the hub on top of them.
SOCIALACCOUNT_ADAPTER = "portal.hub.adapter.HubSocialAccountAdapter"
SOCIALACCOUNT_AUTO_SIGNUP = True
SOCIALACCOUNT_EMAIL_AUTHENTICATION = False  # linking by email is each provider's rule (link_verified_email)
SOCIALACCOUNT_EMAIL_AUTHENTICATION_AUTO_CONNECT = True  # …and a linked identity stays linked
SOCIALACCOUNT_STORE_TOKENS = False  # the portal signs people in; it never calls the provider's APIs later

LANGUAGE_CODE = "en-us"
TIME_ZONE = env_str("TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"
# Shared storage. With KAKEHASHI_S3_BUCKET set, project files live in that S3 bucket (one per site, keys
# projects/<slug>/...): Django's Storage API through django-storages, multipart uploads and presigned URLs
# through portal/storage/objectstore.py. Without it (`make run`), the file system under MEDIA_ROOT.
KAKEHASHI_S3_BUCKET = env_str("KAKEHASHI_S3_BUCKET")
KAKEHASHI_S3_ENDPOINT_URL = env_url("KAKEHASHI_S3_ENDPOINT_URL").rstrip("/")  # empty: AWS's own endpoint for the region
# The address browsers and the CLI reach the store at, when it differs from the portal's (docker-compose).
KAKEHASHI_S3_PUBLIC_URL = env_url("KAKEHASHI_S3_PUBLIC_URL", KAKEHASHI_S3_ENDPOINT_URL).rstrip("/")
KAKEHASHI_S3_REGION = env_str("KAKEHASHI_S3_REGION", "us-east-1")
# Empty: boto3's own chain (instance role, AWS_* variables). Never logged; Django's error pages hide them.
KAKEHASHI_S3_ACCESS_KEY_ID = env_str("KAKEHASHI_S3_ACCESS_KEY_ID")
KAKEHASHI_S3_SECRET_ACCESS_KEY = env_str("KAKEHASHI_S3_SECRET_ACCESS_KEY")
if bool(KAKEHASHI_S3_ACCESS_KEY_ID) != bool(KAKEHASHI_S3_SECRET_ACCESS_KEY):
    raise ImproperlyConfigured("set both KAKEHASHI_S3_ACCESS_KEY_ID and KAKEHASHI_S3_SECRET_ACCESS_KEY, or neither")
if (KAKEHASHI_S3_ENDPOINT_URL or KAKEHASHI_S3_ACCESS_KEY_ID) and not KAKEHASHI_S3_BUCKET:
    raise ImproperlyConfigured("KAKEHASHI_S3_ENDPOINT_URL or credentials are set but KAKEHASHI_S3_BUCKET is not")
# Upload parts (bytes; S3 allows 5 MiB to 5 GiB and 10,000 parts, so large files get larger parts) and how long
# presigned URLs live; open uploads untouched this long are aborted by the beat task.
KAKEHASHI_UPLOAD_PART_BYTES = env_int("KAKEHASHI_UPLOAD_PART_BYTES", 64 * 1024 * 1024)
# The Data page's parts: small, so a closed tab or a dropped connection loses at most the few parts in flight
# (4 at once) and a resumed upload keeps the rest; the whole file is still hashed once, alongside.
# Each project's dataset cache on each cluster is pruned back under this (least recently used first, never what a
# queued or running job was given) every KAKEHASHI_CACHE_PRUNE_INTERVAL seconds; a project's own limit (its
# ClusterCache row, set by site admins) takes precedence.
KAKEHASHI_CLUSTER_CACHE_BYTES = env_int("KAKEHASHI_CLUSTER_CACHE_BYTES", 200 * 1024**3)
KAKEHASHI_CACHE_PRUNE_INTERVAL = env_int("KAKEHASHI_CACHE_PRUNE_INTERVAL", 3600)
KAKEHASHI_BROWSER_UPLOAD_PART_BYTES = env_int("KAKEHASHI_BROWSER_UPLOAD_PART_BYTES", 8 * 1024 * 1024)
KAKEHASHI_UPLOAD_URL_SECONDS = env_int("KAKEHASHI_UPLOAD_URL_SECONDS", 3600)
KAKEHASHI_DOWNLOAD_URL_SECONDS = env_int("KAKEHASHI_DOWNLOAD_URL_SECONDS", 600)
KAKEHASHI_UPLOAD_ABANDON_HOURS = env_int("KAKEHASHI_UPLOAD_ABANDON_HOURS", 24)
KAKEHASHI_UPLOAD_SWEEP_INTERVAL = env_int("KAKEHASHI_UPLOAD_SWEEP_INTERVAL", 3600)
# Small files also kept in packs, a few large tar objects a first staging reads instead of one GET per file
# (docs/decisions/0062): from this many unpacked small files of a project on (0: never). The packs' bytes are not
# counted in the project's quota.
KAKEHASHI_PACK_MIN_FILES = env_int("KAKEHASHI_PACK_MIN_FILES", 100)
# A project's storage quota when its admins set none (bytes; 0 = no limit).
KAKEHASHI_STORAGE_QUOTA_BYTES = env_int("KAKEHASHI_STORAGE_QUOTA_BYTES", 1024**4)

if KAKEHASHI_S3_BUCKET:
    _default_storage = {
        "BACKEND": "storages.backends.s3.S3Storage",
        "OPTIONS": {
            "bucket_name": KAKEHASHI_S3_BUCKET,
            "endpoint_url": KAKEHASHI_S3_ENDPOINT_URL or None,
            "region_name": KAKEHASHI_S3_REGION,
            "access_key": KAKEHASHI_S3_ACCESS_KEY_ID or None,
            "secret_key": KAKEHASHI_S3_SECRET_ACCESS_KEY or None,
            "signature_version": "s3v4",
            "addressing_style": "path",
            "file_overwrite": False,  # save() picks a free key, as FileSystemStorage does
            "default_acl": None,
        },
    }
else:
    _default_storage = {"BACKEND": "django.core.files.storage.FileSystemStorage"}
STORAGES = {
    "default": _default_storage,
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
# The portal's address as people reach it, for links in emails (notifications).
KAKEHASHI_SITE_URL = env_str("KAKEHASHI_SITE_URL", "http://127.0.0.1:8000").rstrip("/")

# Celery. With no broker configured the development profile uses the file-system transport, which needs
# no server; production sets CELERY_BROKER_URL=redis://...
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", "filesystem://")
if CELERY_BROKER_URL == "filesystem://":
    # kombu's transport with whole-file writes, so a worker never reads a half-written message (issue 12).
    CELERY_BROKER_TRANSPORT = "workers.broker:Transport"
    _broker_dir = VAR_DIR / "broker"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir),
        "data_folder_out": str(_broker_dir),
        "processed_folder": str(_broker_dir / "processed"),
        "control_folder": str(_broker_dir / "control"),
        "store_processed": False,
        # How often an idle worker lists the folder; it also paces a busy one (2 messages in flight per poll).
        "polling_interval": 0.1,
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
# Celery's Django fix-up closes the database connection before and after every task unless this is set: then a
# task costs a PostgreSQL backend forked and authenticated. workers/celery.py applies Django's own rule instead (as
# per web request: DATABASE_CONN_MAX_AGE, and a connection that failed is dropped), so this only has to be large.
CELERY_DB_REUSE_MAX = 1_000_000
# A task that carries work and finds PostgreSQL unreachable is sent again after 1 s, 2 s, 4 s, ... at most this
# (workers/database_outage.py), for as long as the outage lasts.
KAKEHASHI_DATABASE_RETRY_MAX_SECONDS = env_int("KAKEHASHI_DATABASE_RETRY_MAX_SECONDS", 60)

# How often the tracker asks each scheduler about its active jobs, and the other periodic sweeps.
KAKEHASHI_TRACK_INTERVAL = env_int("KAKEHASHI_TRACK_INTERVAL", 5)
KAKEHASHI_RECOVER_INTERVAL = env_int("KAKEHASHI_RECOVER_INTERVAL", 30)
KAKEHASHI_BUDGET_INTERVAL = env_int("KAKEHASHI_BUDGET_INTERVAL", 30)
# How often each cluster is asked how busy it is (queue depth, free nodes) for its page and the comparison.
KAKEHASHI_HEALTH_INTERVAL = env_int("KAKEHASHI_HEALTH_INTERVAL", 60)
# A queued/submitting job untouched this long is re-dispatched (its broker message may have been lost).
KAKEHASHI_STALE_DISPATCH_SECONDS = env_int("KAKEHASHI_STALE_DISPATCH_SECONDS", 60)
# A job neither the queue nor accounting knows is flagged `lost` after this long.
KAKEHASHI_LOST_AFTER_SECONDS = env_int("KAKEHASHI_LOST_AFTER_SECONDS", 120)
# A job the queue says has ended but accounting does not know yet (slurmdbd commits a few seconds late) waits
# this long for accounting's exit code and times before the queue's word alone ends it.
KAKEHASHI_ACCOUNTING_GRACE_SECONDS = env_int("KAKEHASHI_ACCOUNTING_GRACE_SECONDS", 15)
# The cloud reconciler: how often it compares what AWS runs in the portal's queues with the portal, and how long a
# job running past its walltime is left alone (Batch's own timeout kills it within 30 s) before it is stopped.
KAKEHASHI_CLOUD_RECONCILE_INTERVAL = env_int("KAKEHASHI_CLOUD_RECONCILE_INTERVAL", 60)
KAKEHASHI_CLOUD_GRACE_SECONDS = env_int("KAKEHASHI_CLOUD_GRACE_SECONDS", 300)
# Idle GPUs (docs/guide/idle-gpus.md). Every job's script starts a sampler on each node that records its GPUs
# (nvidia-smi) and its processes' CPU and memory every this many seconds; 0 starts none. 30 s as Princeton's
# Jobstats: under 0.1 % of a core (bench/sampler.py), fine enough for a rule that acts after an hour.
KAKEHASHI_SAMPLE_SECONDS = env_int("KAKEHASHI_SAMPLE_SECONDS", 30)
# The site's own rule, for projects that set none: idle below 5 % for 60 minutes, warnings at 60 and 105, told only
# (a project admin may choose to cancel, within the bounds below).
KAKEHASHI_IDLE_THRESHOLD_PERCENT = env_float("KAKEHASHI_IDLE_THRESHOLD_PERCENT", 5.0)
KAKEHASHI_IDLE_WINDOW_SECONDS = env_int("KAKEHASHI_IDLE_WINDOW_SECONDS", 3600)
KAKEHASHI_IDLE_WARN_AT_SECONDS = [int(v) for v in env_list("KAKEHASHI_IDLE_WARN_AT_SECONDS", ["3600", "6300"])]
KAKEHASHI_IDLE_ACTION = env_str("KAKEHASHI_IDLE_ACTION", "tell")
KAKEHASHI_IDLE_CANCEL_AFTER_SECONDS = env_int("KAKEHASHI_IDLE_CANCEL_AFTER_SECONDS", 7200)
# Interactive sessions with a walltime under this many hours are left alone (0: none is): a short Lab session is
# mostly a person thinking, and its walltime ends it anyway.
KAKEHASHI_IDLE_EXEMPT_SESSIONS_UNDER_HOURS = env_float("KAKEHASHI_IDLE_EXEMPT_SESSIONS_UNDER_HOURS", 0.0)
# The bounds within which project admins set their rule: a window no shorter (a job loading data looks idle for
# minutes), a threshold no higher, a keep no longer, and whether cancelling is allowed at all.
KAKEHASHI_IDLE_MIN_WINDOW_SECONDS = env_int("KAKEHASHI_IDLE_MIN_WINDOW_SECONDS", 1800)
KAKEHASHI_IDLE_MAX_THRESHOLD_PERCENT = env_float("KAKEHASHI_IDLE_MAX_THRESHOLD_PERCENT", 25.0)
KAKEHASHI_IDLE_MAX_KEEP_HOURS = env_int("KAKEHASHI_IDLE_MAX_KEEP_HOURS", 72)
KAKEHASHI_IDLE_CANCEL_ALLOWED = env_bool("KAKEHASHI_IDLE_CANCEL_ALLOWED", True)
# Where the built-in local backend keeps per-job working directories.
KAKEHASHI_LOCAL_JOBS_DIR = env_str("KAKEHASHI_LOCAL_JOBS_DIR", str(VAR_DIR / "jobs"))
# Bytes of a finished job's outputs/ copied into the portal's storage (the rest stays on the cluster, listed).
KAKEHASHI_OUTPUT_COPY_BYTES = env_int("KAKEHASHI_OUTPUT_COPY_BYTES", 64 * 1024 * 1024)
# How much of a finished job's outputs/ is collected: files listed at most, folders deep at most. What lies
# beyond is not collected, and the job's page and the API say so.
KAKEHASHI_OUTPUT_MAX_FILES = env_positive_int("KAKEHASHI_OUTPUT_MAX_FILES", 10_000)
KAKEHASHI_OUTPUT_MAX_DEPTH = env_positive_int("KAKEHASHI_OUTPUT_MAX_DEPTH", 32)
KAKEHASHI_MAX_SCRIPT_BYTES = env_int("KAKEHASHI_MAX_SCRIPT_BYTES", 256 * 1024)
KAKEHASHI_MAX_NOTEBOOK_BYTES = env_int("KAKEHASHI_MAX_NOTEBOOK_BYTES", 16 * 1024 * 1024)
# Notebooks arrive as JSON bodies: allow bodies up to the notebook limit plus room for the rest of the request.
DATA_UPLOAD_MAX_MEMORY_SIZE = KAKEHASHI_MAX_NOTEBOOK_BYTES + 1024 * 1024
KAKEHASHI_SSH_TIMEOUT = env_int("KAKEHASHI_SSH_TIMEOUT", 30)
# Dispatches to one cluster in flight at once, over all workers: a login node that answers slowly then holds at most
# this many worker processes, and the other clusters keep the rest (keep it below the workers' --concurrency).
KAKEHASHI_CLUSTER_TASK_SLOTS = env_int("KAKEHASHI_CLUSTER_TASK_SLOTS", 2)
# A task that finds its cluster's slots taken asks again this many seconds later (without holding a worker).
KAKEHASHI_SLOT_RETRY_SECONDS = env_float("KAKEHASHI_SLOT_RETRY_SECONDS", 0.25)
# One dispatch takes along up to this many jobs queued for the same account (cluster, owner, project) and submits
# them over up to KAKEHASHI_SSH_CHANNELS concurrent channels of its one connection (OpenSSH's MaxSessions is 10).
KAKEHASHI_DISPATCH_BATCH = env_int("KAKEHASHI_DISPATCH_BATCH", 16)
KAKEHASHI_SSH_CHANNELS = env_int("KAKEHASHI_SSH_CHANNELS", 8)
# How long a submit attempt owns a job before another attempt may take over (it then looks before submitting).
KAKEHASHI_DISPATCH_LEASE_SECONDS = env_int("KAKEHASHI_DISPATCH_LEASE_SECONDS", 2 * KAKEHASHI_SSH_TIMEOUT + 30)
KAKEHASHI_REPORTING_UNIT = env_str("KAKEHASHI_REPORTING_UNIT", "JPY")

# API requests allowed per token (per user for browser sessions, per address without either), e.g. "600/min".
KAKEHASHI_API_RATE = env_str("KAKEHASHI_API_RATE", "600/min")
# Largest file one upload through the portal itself may bring in (bytes): the file-system storage of `make run`.
# With an object store, uploads go straight to it and only the project's quota limits them.
KAKEHASHI_MAX_UPLOAD_BYTES = env_int("KAKEHASHI_MAX_UPLOAD_BYTES", 1024 * 1024 * 1024)

# JupyterHub (portal/hub; docs/deployment.md "JupyterHub"): off unless KAKEHASHI_HUB_URL is set. The portal is a
# hub service: hub users sign in through the hub's OAuth, and Lab servers call the API with their hub token.
KAKEHASHI_HUB_URL = env_url("KAKEHASHI_HUB_URL").rstrip("/")  # the hub as browsers see it
KAKEHASHI_HUB_API_URL = env_url("KAKEHASHI_HUB_API_URL", f"{KAKEHASHI_HUB_URL}/hub/api" if KAKEHASHI_HUB_URL else "")
KAKEHASHI_HUB_SERVICE_NAME = env_str("KAKEHASHI_HUB_SERVICE_NAME", "kakehashi")
KAKEHASHI_HUB_API_TOKEN = env_str("KAKEHASHI_HUB_API_TOKEN")  # the service's api_token in jupyterhub_config.py
KAKEHASHI_HUB_CLIENT_ID = env_str("KAKEHASHI_HUB_CLIENT_ID", f"service-{KAKEHASHI_HUB_SERVICE_NAME}")
KAKEHASHI_HUB_CLIENT_SECRET = env_str("KAKEHASHI_HUB_CLIENT_SECRET", KAKEHASHI_HUB_API_TOKEN)
KAKEHASHI_HUB_CALLBACK_URL = env_url("KAKEHASHI_HUB_CALLBACK_URL")  # https://PORTAL/accounts/jupyterhub/login/callback/
KAKEHASHI_HUB_TOKEN_CACHE_SECONDS = env_int("KAKEHASHI_HUB_TOKEN_CACHE_SECONDS", 60)
# Where a session's server, on a compute node, reports its address (portal/sessions): blank = this portal's
# KAKEHASHI_SITE_URL. Set it where compute nodes reach the portal by another name than browsers do.
KAKEHASHI_SESSION_REPORT_URL = env_url("KAKEHASHI_SESSION_REPORT_URL").rstrip("/")
# Sessions on clusters with the option `session_tunnel` are reached through an SSH tunnel through the login node,
# held by `manage.py session_tunnels` (docs/decisions/0056): it listens on KAKEHASHI_SESSION_TUNNEL_BIND, on a port of
# KAKEHASHI_SESSION_TUNNEL_PORTS ("first-last"; keep it below the ephemeral range, so a restarted process gets its ports
# back), and the hub's proxy is routed to KAKEHASHI_SESSION_TUNNEL_HOST (that process's host as the hub reaches it).
KAKEHASHI_SESSION_TUNNEL_HOST = env_str("KAKEHASHI_SESSION_TUNNEL_HOST", "127.0.0.1")
KAKEHASHI_SESSION_TUNNEL_BIND = env_str("KAKEHASHI_SESSION_TUNNEL_BIND", "127.0.0.1")
KAKEHASHI_SESSION_TUNNEL_PORTS = env_str("KAKEHASHI_SESSION_TUNNEL_PORTS", "20000-20999")
if KAKEHASHI_HUB_URL and not (KAKEHASHI_HUB_CLIENT_SECRET and KAKEHASHI_HUB_CALLBACK_URL):
    raise ImproperlyConfigured(
        "KAKEHASHI_HUB_URL is set: also set KAKEHASHI_HUB_API_TOKEN (the service's token on the hub) and "
        "KAKEHASHI_HUB_CALLBACK_URL (this portal's https://…/accounts/jupyterhub/login/callback/)"
    )

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "portal.api.authentication.TokenAuthentication",
        "portal.hub.authentication.HubTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    # Bodies with text no database or UTF-8 answer can hold are refused as 400, not met with a 500 (parsers.py).
    "DEFAULT_PARSER_CLASSES": [
        "portal.api.parsers.JSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_RENDERER_CLASSES": ["portal.api.parsers.JSONRenderer"],  # the API speaks JSON only
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_THROTTLE_CLASSES": ["portal.api.throttling.TokenRateThrottle"],
    "DEFAULT_THROTTLE_RATES": {"token": KAKEHASHI_API_RATE},
    "EXCEPTION_HANDLER": "portal.api.errors.exception_handler",
    "DEFAULT_PAGINATION_CLASS": "portal.api.pagination.Pages",
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
    # Choice sets sharing a field name ("state", "kind") each get their own name (and `check --deploy` stays clean).
    "ENUM_NAME_OVERRIDES": {
        "JobStateEnum": "portal.api.serializers.JOB_STATES",  # JobState's and "draft" for a dry run
        "UploadStateEnum": "portal.api.upload_views.UPLOAD_STATES",
        # Jobs and datasets both have a "kind".
        "JobKindEnum": "portal.jobs.models.Job.Kind",
        "DatasetKindEnum": "portal.storage.models.DatasetKind",
    },
}

# Content-Security-Policy on every response (django-csp): scripts and styles only from our own static files,
# no inline script or event handler anywhere (docs/security.md "Content-Security-Policy"). Inline style attributes are
# allowed (progress bars' widths); they cannot run code. Sign-in forms may also post to the configured identity
# providers (added per response by portal.csp.CSPMiddleware, as is the object store for direct uploads).
_SELF, _NONE = "'self'", "'none'"
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [_SELF],
        # 'wasm-unsafe-eval' lets the Data page compile hash-wasm's WebAssembly (each part's SHA-256 before it is
        # sent); it allows no JavaScript eval.
        "script-src": [_SELF, "'wasm-unsafe-eval'"],
        "style-src": [_SELF],
        "style-src-attr": ["'unsafe-inline'"],
        "img-src": [_SELF, "data:"],
        "font-src": [_SELF],
        # Browsers upload straight to the object store: its public origin is added per response (portal.csp).
        "connect-src": [_SELF, *env_list("KAKEHASHI_CSP_CONNECT_SRC")],
        "object-src": [_NONE],
        "base-uri": [_SELF],
        "frame-ancestors": [_NONE],
        "form-action": [_SELF],
        **({"report-uri": env_str("KAKEHASHI_CSP_REPORT_URI")} if env_str("KAKEHASHI_CSP_REPORT_URI") else {}),
    },
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
