"""What the admin may do with rows that other code writes: mixins for a ModelAdmin (put them first)."""

from __future__ import annotations


class ShowOnly:
    """Rows the admin shows but never adds or edits: they change only through the portal's own code (a job's
    transitions, the health beat, the uploader)."""

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


class Permanent(ShowOnly):
    """A record that is never rewritten nor removed (the audit trail, the budget ledger): shown only."""

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
