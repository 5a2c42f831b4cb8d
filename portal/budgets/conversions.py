"""Whether the site's unit conversions agree with each other. Two ways from one unit to another (a conversion and
its inverse, or a conversion and a path through a third unit) must give the same factor, or a cost shown in one
unit and charged in another would differ with the way taken (1 point = 10 JPY set, yet 65.55 points shown as
9,831.78 JPY through USD). The admin refuses a conversion that disagrees, and lists any that already do."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal

TOLERANCE = Decimal("0.005")  # half a percent: rounding in factors typed by hand is not a disagreement


@dataclass(frozen=True)
class Rate:
    from_unit: str
    to_unit: str
    factor: Decimal


def _ways(rates: Iterable[Rate]) -> dict[tuple[str, str], list[tuple[Decimal, str]]]:
    """Every factor from one unit to another the rates give, directly, inverted, or through one other unit,
    each with how it was reached."""
    direct: dict[tuple[str, str], list[tuple[Decimal, str]]] = {}
    for rate in rates:
        if rate.factor <= 0:
            continue
        said = f"1 {rate.from_unit} = {rate.factor.normalize():f} {rate.to_unit}"
        direct.setdefault((rate.from_unit, rate.to_unit), []).append((rate.factor, said))
        direct.setdefault((rate.to_unit, rate.from_unit), []).append((1 / rate.factor, said))
    ways = {pair: list(found) for pair, found in direct.items()}
    for (a, b), first in direct.items():
        for (c, d), second in direct.items():
            if c != b or d == a:
                continue
            for f1, s1 in first:
                for f2, s2 in second:
                    if s1 != s2:
                        ways.setdefault((a, d), []).append((f1 * f2, f"{s1} and {s2}"))
    return ways


def disagreements(rates: Iterable[Rate]) -> list[str]:
    """Each pair of units whose ways disagree, in words an admin acts on."""
    found = []
    for (a, b), ways in sorted(_ways(list(rates)).items()):
        if a > b:
            continue  # each pair once
        low = min(ways, key=lambda w: w[0])
        high = max(ways, key=lambda w: w[0])
        if high[0] > low[0] * (1 + TOLERANCE):
            found.append(f"1 {a} is {_num(low[0])} {b} by {low[1]}, but {_num(high[0])} {b} by {high[1]}")
    return found


def _num(value: Decimal) -> str:
    return f"{value:.6g}"


def site_rates(exclude_pk: int | None = None) -> list[Rate]:
    from portal.budgets.models import UnitConversion

    rows = UnitConversion.objects.all()
    if exclude_pk is not None:
        rows = rows.exclude(pk=exclude_pk)
    return [Rate(r.from_unit, r.to_unit, r.factor) for r in rows]
