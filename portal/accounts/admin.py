from django import forms
from django.contrib import admin
from django.utils.decorators import method_decorator
from django.views.decorators.debug import sensitive_post_parameters

from portal.accounts.models import IdentityProvider, Protocol, SiteSettings


@admin.register(SiteSettings)
class SiteSettingsAdmin(admin.ModelAdmin):
    list_display = ["__str__", "signup_open"]

    def has_add_permission(self, request):
        return not SiteSettings.objects.exists()


class IdentityProviderForm(forms.ModelForm):
    # Write-only: the stored secret is never sent back to the browser; leave empty to keep it.
    client_secret = forms.CharField(
        required=False, strip=True, widget=forms.PasswordInput(render_value=False),
        help_text="OpenID Connect client secret, kept encrypted; leave empty to keep the current one",
    )

    # Written out for the https default of a scheme-less address (Django 6's, without its warning).
    server_url = forms.URLField(required=False, assume_scheme="https",
                                help_text=IdentityProvider._meta.get_field("server_url").help_text)
    saml_metadata_url = forms.URLField(required=False, assume_scheme="https",
                                       help_text=IdentityProvider._meta.get_field("saml_metadata_url").help_text)
    saml_sso_url = forms.URLField(required=False, assume_scheme="https")

    class Meta:
        model = IdentityProvider
        fields = "__all__"

    def clean(self):
        data = super().clean()
        if data.get("protocol") == Protocol.OIDC:
            missing = [f for f in ("server_url", "client_id") if not data.get(f)]
            if not (data.get("client_secret") or (self.instance.pk and self.instance.client_secret_encrypted)):
                missing.append("client_secret")
        else:
            missing = [] if data.get("saml_entity_id") else ["saml_entity_id"]
            if not data.get("saml_metadata_url") and not (data.get("saml_sso_url") and data.get("saml_x509cert")):
                missing.append("saml_metadata_url")
        for field in missing:
            self.add_error(field, "Required for this protocol.")
        return data

    def save(self, commit=True):
        if self.cleaned_data.get("client_secret"):
            self.instance.set_client_secret(self.cleaned_data["client_secret"])
        return super().save(commit)


@admin.register(IdentityProvider)
@method_decorator(sensitive_post_parameters("client_secret"), name="changeform_view")
class IdentityProviderAdmin(admin.ModelAdmin):
    form = IdentityProviderForm
    list_display = ["name", "protocol", "slug", "enabled", "allow_new_users", "link_verified_email", "allowed_domains"]
    fieldsets = [
        (None, {"fields": ["protocol", "slug", "name", "enabled"]}),
        ("OpenID Connect", {"fields": ["server_url", "client_id", "client_secret"]}),
        ("SAML", {"fields": ["saml_entity_id", "saml_metadata_url", "saml_sso_url", "saml_x509cert",
                             "saml_attribute_mapping"]}),
        ("Who may sign in", {"fields": ["allowed_domains", "link_verified_email", "allow_new_users"]}),
    ]
