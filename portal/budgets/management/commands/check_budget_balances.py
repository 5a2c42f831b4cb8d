"""`manage.py check_budget_balances [--fix]`: the balance each budget row keeps equals its ledger's sums.

The ledger is the record; the balance is what a reservation checks in one statement (docs/decisions/0024). They
can only differ if entries were written around portal/budgets/actions.py: this says which budgets, and `--fix`
sets their balances from the ledger (under each row's lock).
"""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from portal.budgets import actions, locks


class Command(BaseCommand):
    help = "Check that each budget's kept balance equals the sums of its ledger (--fix: set it from the ledger)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--fix", action="store_true", help="set drifted balances from the ledger")

    def handle(self, *args, fix: bool = False, **options) -> None:
        drifted = actions.balance_drift()
        for budget, ledger in drifted:
            self.stdout.write(f"{budget.project_id}: balance reserved {budget.reserved} spent {budget.spent}, "
                              f"ledger reserved {ledger.reserved} spent {ledger.spent} ({budget.balance_period})")
            if fix:
                with transaction.atomic():
                    actions.rebalance(locks.budget(budget.pk))
        if drifted and not fix:
            raise CommandError(f"{len(drifted)} budget(s) whose balance differs from the ledger")
        self.stdout.write("balances match the ledger" if not drifted else f"fixed {len(drifted)} budget(s)")
