"""The one rule for showing an amount of money, on every page, in the API's `text` and so in the CLI.

Two decimals, and more when two would hide the amount: a non-zero amount keeps at least two significant digits
(0.0042, never 0.00), so a cost beside its estimate never reads as an overspend or as free. Stored amounts have
four decimals; CSV files and the API's `amount` carry them exactly, for sums that match the ledger."""

from __future__ import annotations

from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation


def amount_text(value: Decimal | int | float | str | None) -> str:
    """"1,234.50", "0.11", "0.0042", "0.00"; "" for None; what it was given if it is not a number."""
    if value is None or value == "":
        return ""
    try:
        amount = Decimal(str(value))
    except (InvalidOperation, TypeError, ValueError):
        return str(value)
    if not amount.is_finite():
        return str(value)
    if amount == 0:
        return "0.00"
    places = max(2, 1 - amount.adjusted())  # adjusted(): the power of ten of the first significant digit
    rounded = amount.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_EVEN)
    text = f"{rounded:,.{places}f}"
    if places > 2:
        whole, _, decimals = text.partition(".")
        text = f"{whole}.{decimals.rstrip('0').ljust(2, '0')}"
    return text
