from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.db import models


class Period(models.TextChoices):
    ONCE = "once", "One-off"
    MONTHLY = "monthly", "Monthly"
    FISCAL_YEAR = "fiscal_year", "Fiscal year (April–March)"


class Budget(models.Model):
    """A project's allowance for one period. Its row is the lock every reservation takes."""

    project = models.OneToOneField("projects.Project", on_delete=models.CASCADE, related_name="budget")
    amount = models.DecimalField(max_digits=14, decimal_places=4)
    unit = models.CharField(max_length=16, default="points")
    period = models.CharField(max_length=16, choices=Period.choices, default=Period.ONCE)
    # Strict: running jobs are cancelled when spending plus their burn reaches the amount. Soft: warn only.
    strict = models.BooleanField(default=True)
    alert_thresholds = models.JSONField(default=list, blank=True, help_text="percentages, e.g. [50, 80, 100]")
    updated_at = models.DateTimeField(auto_now=True)
    # The ledger's sums for the period starting `balance_period`, kept by the ledger's one writer
    # (portal/budgets/actions.py) in the statement that appends the entries: what lets a reservation lock, check
    # and reserve in one conditional UPDATE (docs/decisions/0024). The ledger stays the record; `balance_drift`
    # (and `manage.py check_budget_balances`) compares the two.
    balance_period = models.DateField(null=True, blank=True, editable=False)
    reserved = models.DecimalField(max_digits=14, decimal_places=4, default=Decimal("0"), editable=False)
    spent = models.DecimalField(max_digits=14, decimal_places=4, default=Decimal("0"), editable=False)

    def __str__(self) -> str:
        return f"{self.project}: {self.amount} {self.unit} ({self.get_period_display()})"

    def thresholds(self) -> list[int]:
        return sorted(int(t) for t in (self.alert_thresholds or [50, 80, 100]))


class LedgerEntry(models.Model):
    """Append-only money movements. Available = amount − spent − reserved, computed from these rows."""

    class Kind(models.TextChoices):
        RESERVE = "reserve", "Reserve"
        SETTLE = "settle", "Settle"
        RELEASE = "release", "Release"
        ADJUST = "adjust", "Adjust"

    budget = models.ForeignKey(Budget, on_delete=models.PROTECT, related_name="entries")
    job = models.ForeignKey("jobs.Job", null=True, blank=True, on_delete=models.PROTECT, related_name="ledger")
    kind = models.CharField(max_length=10, choices=Kind.choices)
    amount = models.DecimalField(max_digits=14, decimal_places=4)
    # The budget period this entry counts in: the period in which the job's reservation was made.
    period_start = models.DateField()
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    note = models.CharField(max_length=255, blank=True)

    class Meta:
        ordering = ["id"]
        verbose_name_plural = "ledger entries"
        indexes = [models.Index(fields=["budget", "period_start"])]
        constraints = [
            # A job is reserved, settled and released at most once each.
            models.UniqueConstraint(
                fields=["job", "kind"],
                condition=models.Q(kind__in=["reserve", "settle", "release"]),
                name="one_movement_of_each_kind_per_job",
            )
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.amount} ({self.budget.unit}) job={self.job_id}"

    def save(self, *args, **kwargs):
        if self.pk is not None:
            raise ValueError("ledger entries are append-only")
        return super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise ValueError("ledger entries are append-only")


class UnitConversion(models.Model):
    """How many of `to_unit` one `from_unit` is worth (e.g. 1 USD = 150 JPY), set by site admins."""

    from_unit = models.CharField(max_length=16)
    to_unit = models.CharField(max_length=16)
    factor = models.DecimalField(max_digits=16, decimal_places=6, default=Decimal("1"))

    class Meta:
        constraints = [models.UniqueConstraint(fields=["from_unit", "to_unit"], name="one_conversion_per_pair")]

    def __str__(self) -> str:
        return f"1 {self.from_unit} = {self.factor} {self.to_unit}"


class BudgetAlert(models.Model):
    """An alert already sent, so each threshold is announced once per period."""

    budget = models.ForeignKey(Budget, on_delete=models.CASCADE, related_name="alerts")
    period_start = models.DateField()
    threshold = models.PositiveIntegerField()
    sent_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["budget", "period_start", "threshold"], name="one_alert_per_threshold")
        ]
