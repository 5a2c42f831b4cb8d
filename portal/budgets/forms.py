from decimal import Decimal

from django import forms

from portal.budgets.models import Period


class BudgetForm(forms.Form):
    amount = forms.DecimalField(min_value=Decimal("0"), max_digits=14, decimal_places=2)
    unit = forms.CharField(max_length=16, initial="points", help_text="points, JPY, USD, node-hours…")
    period = forms.ChoiceField(choices=Period.choices)
    strict = forms.BooleanField(required=False, initial=True, label="Strict: refuse new jobs and cancel running ones when spent",
                                help_text="Off = soft: jobs still run, admins are warned")
    # Asked only when a strict amount would cancel jobs not ended (the page names them first).
    confirm_cancel = forms.BooleanField(required=False, label="Save it and let the budget cancel these jobs")
