"""A small OpenID Connect provider for the sign-in tests: django-oauth-toolkit's OIDC server in its own process.

Not the portal: its own database (SQLite in KAKEHASHI_TEST_IDP_DIR), its own users, its own signing key. The
tests start it with tests/signin/oidc_idp/serve.py on a loopback port and register the portal as its client.
"""

import os
from pathlib import Path

STATE = Path(os.environ["KAKEHASHI_TEST_IDP_DIR"])
SECRET_KEY = os.environ.get("KAKEHASHI_TEST_IDP_SECRET", "test-idp-only")
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "oauth2_provider",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
ROOT_URLCONF = "tests.signin.oidc_idp.urls"
TEMPLATES = [{
    "BACKEND": "django.template.backends.django.DjangoTemplates",
    "DIRS": [Path(__file__).parent / "templates"],
    "APP_DIRS": True,
    "OPTIONS": {"context_processors": ["django.template.context_processors.request"]},
}]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": str(STATE / "idp.sqlite3")}}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
USE_TZ = True
LOGIN_URL = "/login/"
# Two providers on one host (127.0.0.1, different ports) would share cookies: give this one its own names.
SESSION_COOKIE_NAME = "idp_sessionid"
CSRF_COOKIE_NAME = "idp_csrftoken"
OAUTH2_PROVIDER = {
    "OIDC_ENABLED": True,
    "OIDC_RSA_PRIVATE_KEY": (STATE / "signing-key.pem").read_text(),
    "PKCE_REQUIRED": True,
    "SCOPES": {"openid": "OpenID Connect", "profile": "Profile", "email": "Email address"},
    "OAUTH2_VALIDATOR_CLASS": "tests.signin.oidc_idp.validator.ClaimsValidator",
}
