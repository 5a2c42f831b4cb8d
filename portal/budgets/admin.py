from django.contrib import admin

from portal.budgets.models import Budget, BudgetAlert, LedgerEntry, UnitConversion


@admin.register(Budget)
class BudgetAdmin(admin.ModelAdmin):
    list_display = ["project", "amount", "unit", "period", "strict", "updated_at"]


@admin.register(LedgerEntry)
class LedgerEntryAdmin(admin.ModelAdmin):
    list_display = ["id", "budget", "kind", "amount", "job", "period_start", "created_at", "note"]
    list_filter = ["kind", "budget"]

    # Append-only: visible, never editable.
    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def has_add_permission(self, request):
        return False


admin.site.register(UnitConversion)
admin.site.register(BudgetAlert)
