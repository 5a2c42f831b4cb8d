from django.contrib import admin

from portal.admin_mixins import Permanent
from portal.budgets.models import Budget, BudgetAlert, LedgerEntry, UnitConversion


@admin.register(Budget)
class BudgetAdmin(admin.ModelAdmin):
    list_display = ["project", "amount", "unit", "period", "strict", "updated_at"]


@admin.register(LedgerEntry)
class LedgerEntryAdmin(Permanent, admin.ModelAdmin):  # append-only: visible, never editable
    list_display = ["id", "budget", "kind", "amount", "job", "period_start", "created_at", "note"]
    list_filter = ["kind", "budget"]


admin.site.register(UnitConversion)
admin.site.register(BudgetAlert)
