from __future__ import annotations

from django.db import models


class SiteSettings(models.Model):
    """Settings a site admin changes at run time (one row)."""

    signup_open = models.BooleanField(default=True, help_text="Let anyone create an account on the login page")
    reporting_unit = models.CharField(
        max_length=16, blank=True,
        help_text="Unit site-wide usage is reported in (costs converted with the unit conversions); blank = KAKEHASHI_REPORTING_UNIT",
    )

    class Meta:
        verbose_name_plural = "site settings"

    def __str__(self) -> str:
        return "Site settings"

    @classmethod
    def current(cls) -> SiteSettings:
        obj, _ = cls.objects.get_or_create(pk=1)
        return obj


class Protocol(models.TextChoices):
    OIDC = "openid_connect", "OpenID Connect"
    SAML = "saml", "SAML 2.0"


# GakuNin (and most Shibboleth IdPs) release attributes under their OID names.
GAKUNIN_ATTRIBUTE_MAPPING = {
    "uid": "urn:oid:1.3.6.1.4.1.5923.1.1.1.6",  # eduPersonPrincipalName, e.g. taro@u-tokyo.ac.jp
    "email": "urn:oid:0.9.2342.19200300.100.1.3",  # mail
    "first_name": "urn:oid:2.5.4.42",  # givenName
    "last_name": "urn:oid:2.5.4.4",  # sn
}


def _default_attribute_mapping() -> dict:
    return dict(GAKUNIN_ATTRIBUTE_MAPPING)


class IdentityProvider(models.Model):
    """A university's sign-in service (OpenID Connect or SAML) and the rules for whom it may sign in.

    Built into allauth's SocialApp at each request (portal.accounts.sso); the client secret is kept encrypted.
    """

    protocol = models.CharField(max_length=20, choices=Protocol.choices)
    slug = models.SlugField(
        max_length=40, unique=True,
        help_text="Short name in the sign-in URLs (/accounts/oidc/SLUG/… or /accounts/saml/SLUG/…); do not change it "
                  "once registered with the provider",
    )
    name = models.CharField(max_length=100, help_text='Shown on the button: "Sign in with NAME"')
    enabled = models.BooleanField(default=True)
    # OpenID Connect
    server_url = models.URLField(blank=True, help_text="OIDC issuer (its /.well-known/openid-configuration is read)")
    client_id = models.CharField(max_length=255, blank=True)
    client_secret_encrypted = models.TextField(blank=True, editable=False)
    # SAML
    saml_entity_id = models.CharField(max_length=255, blank=True, help_text="The IdP's entityID")
    saml_metadata_url = models.URLField(blank=True, help_text="The IdP's metadata URL (or give the SSO URL and certificate)")
    saml_sso_url = models.URLField(blank=True)
    saml_x509cert = models.TextField(blank=True, help_text="The IdP's signing certificate (PEM body)")
    saml_attribute_mapping = models.JSONField(
        default=_default_attribute_mapping, blank=True,
        help_text="Portal field → SAML attribute name (uid, email, first_name, last_name); GakuNin OIDs by default",
    )
    # Account linking rules
    allow_new_users = models.BooleanField(
        default=False, help_text="Create a portal account for someone who signs in here for the first time",
    )
    link_verified_email = models.BooleanField(
        default=False,
        help_text="Sign an existing portal account in when the provider asserts the same email address as verified "
                  "(only turn on for a provider that verifies addresses, e.g. the university's own)",
    )
    allowed_domains = models.CharField(
        max_length=500, blank=True,
        help_text="Only these email domains may sign in, separated by spaces or commas (e.g. u-tokyo.ac.jp); "
                  "a domain also admits its subdomains; empty: any",
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.get_protocol_display()})"

    def set_client_secret(self, secret: str) -> None:
        from portal.crypto import encrypt

        self.client_secret_encrypted = encrypt(secret) if secret else ""

    def client_secret(self) -> str:
        from portal.crypto import decrypt

        return decrypt(self.client_secret_encrypted) if self.client_secret_encrypted else ""

    def domains(self) -> list[str]:
        return [d.strip().lower().lstrip("@") for d in self.allowed_domains.replace(",", " ").split() if d.strip()]
