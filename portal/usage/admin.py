"""The Django admin's budget page, here rather than in portal/budgets because saving a budget may cancel jobs: a
strict amount that would is saved only once the site admin ticks the box that names them (portal/usage/lowering.py),
as on the project's Budget page."""

from __future__ import annotations

from django import forms
from django.contrib import admin

from portal.budgets.models import Budget
from portal.usage.lowering import lowering


class BudgetAdminForm(forms.ModelForm):
    confirm_cancel = forms.BooleanField(
        required=False, label="Cancel the jobs this budget no longer covers",
        help_text="Needed when a strict amount lower than what running jobs have spent or reserved is saved.")

    class Meta:
        model = Budget
        fields = "__all__"

    def clean(self):
        data = super().clean()
        project, amount = data.get("project"), data.get("amount")
        if project is None or amount is None or self.instance.pk is None:
            return data
        effect = lowering(project, amount=amount, strict=bool(data.get("strict")))
        if effect is not None and not data.get("confirm_cancel"):
            self.add_error("confirm_cancel", f"{effect.text} Tick this box to save it anyway.")
        return data


@admin.register(Budget)
class BudgetAdmin(admin.ModelAdmin):
    form = BudgetAdminForm
    list_display = ["project", "amount", "unit", "period", "strict", "updated_at"]
