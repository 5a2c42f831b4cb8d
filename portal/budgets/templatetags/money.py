"""{{ amount|money }}: two decimals, but a small non-zero cost is not shown as 0.00 (seconds of a cheap node)."""

from decimal import Decimal, InvalidOperation

from django import template

register = template.Library()


@register.filter
def money(value) -> str:
    if value is None or value == "":
        return ""
    try:
        amount = Decimal(value)
    except (InvalidOperation, TypeError, ValueError):
        return str(value)
    if amount != 0 and abs(amount) < Decimal("0.01"):
        return f"{amount:.4f}".rstrip("0")
    return f"{amount:,.2f}"
