from __future__ import annotations

from django import forms

from portal.api.models import Scope
from portal.api.tokens import MAX_EXPIRY_DAYS


class TokenForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="what uses it, e.g. laptop or nightly-sweep")
    scopes = forms.MultipleChoiceField(choices=Scope.choices, initial=[Scope.READ],
                                       widget=forms.CheckboxSelectMultiple(attrs={"class": "form-check-input"}))
    expires_in_days = forms.IntegerField(required=False, min_value=1, max_value=MAX_EXPIRY_DAYS, initial=90,
                                         label="Expires in (days)", help_text="blank = never")
