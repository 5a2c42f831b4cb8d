"""{{ amount|money }}: portal.budgets.display.amount_text, the one rule for showing money everywhere."""

from django import template

from portal.budgets.display import amount_text

register = template.Library()


@register.filter
def money(value) -> str:
    return amount_text(value)
