from django import forms

from portal.clusters.models import username_validator


class LinkAccountForm(forms.Form):
    username = forms.CharField(
        max_length=32,
        validators=[username_validator],
        label="Your user name on this cluster",
        help_text="The account you log in to the login node with, e.g. ab12345",
    )
