from django import forms
from django.contrib import admin, messages

from portal.admin_mixins import Permanent
from portal.budgets import conversions
from portal.budgets.models import BudgetAlert, LedgerEntry, UnitConversion

# Budget's own page is portal/usage/admin.py: saving one may cancel jobs, which this app cannot see.


@admin.register(LedgerEntry)
class LedgerEntryAdmin(Permanent, admin.ModelAdmin):  # append-only: visible, never editable
    list_display = ["id", "budget", "kind", "amount", "job", "period_start", "created_at", "note"]
    list_filter = ["kind", "budget"]


class UnitConversionForm(forms.ModelForm):
    class Meta:
        model = UnitConversion
        fields = ["from_unit", "to_unit", "factor"]

    def clean(self):
        data = super().clean()
        if not self.errors and data.get("factor") is not None:
            if data["factor"] <= 0:
                raise forms.ValidationError("The factor must be more than 0.")
            rates = [*conversions.site_rates(exclude_pk=self.instance.pk),
                     conversions.Rate(data["from_unit"], data["to_unit"], data["factor"])]
            found = conversions.disagreements(rates)
            if found:
                raise forms.ValidationError(
                    "This conversion disagrees with the others, so a cost would differ with the way it is "
                    "converted: " + "; ".join(found) + ". Change this factor or the other conversion first.")
        return data


@admin.register(UnitConversion)
class UnitConversionAdmin(admin.ModelAdmin):
    form = UnitConversionForm
    list_display = ["from_unit", "to_unit", "factor"]

    def changelist_view(self, request, extra_context=None):
        # Conversions saved before this check (or through the shell) may already disagree: say so where they are set.
        for found in conversions.disagreements(conversions.site_rates()):
            messages.warning(request, f"These conversions disagree: {found}.")
        return super().changelist_view(request, extra_context)


admin.site.register(BudgetAlert)
