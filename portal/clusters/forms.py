import re

from django import forms

from portal.clusters.models import username_validator


class LinkAccountForm(forms.Form):
    username = forms.CharField(
        max_length=32,
        validators=[username_validator],
        label="Your user name on this cluster",
        help_text="The account you log in to the login node with, e.g. ab12345",
    )


class OperationsAccountForm(forms.Form):
    """The site's service account on a cluster, for site staff's health checks (the site page)."""

    username = forms.CharField(max_length=32, validators=[username_validator], label="Service account",
                               help_text="The site's own user name on the login node, e.g. kkops")
    group = forms.CharField(max_length=64, required=False, label="Group",
                            help_text="The scheduler group or account the checks are charged to (optional)")

    def clean_group(self):
        group = self.cleaned_data["group"].strip()
        if group and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", group):
            raise forms.ValidationError("letters, digits, '_', '.' and '-' only")
        return group
