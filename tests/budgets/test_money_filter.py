from decimal import Decimal

import pytest

from portal.budgets.templatetags.money import money


@pytest.mark.parametrize(("value", "shown"), [
    (Decimal("0"), "0.00"), (Decimal("1234.5"), "1,234.50"), (Decimal("0.0008"), "0.0008"),
    (Decimal("0.0050"), "0.005"), (None, ""), ("abc", "abc"),
])
def test_costs_are_shown_with_two_decimals_unless_small(value, shown):
    assert money(value) == shown
