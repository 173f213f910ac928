"""Amounts in currency: what the approver reads and types, never cents. Pure.

A gate's amounts travel in integer cents (``amount_cents``, ``limit_cents``): exact, and what
the run checks. The inbox shows every ``*_cents`` value as currency ($1,200.00) and reads an
edit typed in currency back to cents exactly (Decimal, never float), refusing what is not
plainly an amount (a third decimal, a sign, an exponent, a misplaced comma).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal

from tower.contract.failures import Code, TowerError

SYMBOL = "$"
SUFFIX = "_cents"
# 1200 · 1,200 · 1200.5 · 1,200.50 · $1,200.00 · .50 — nothing else.
AMOUNT = re.compile(r"\$?[ ]?(?P<whole>[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)?(?:\.(?P<frac>[0-9]*))?")


class AmountError(TowerError, ValueError):  # a ValueError: the form reads it with the rest
    """Typed text that is not an amount in currency; the message says why."""

    CODE = Code.BAD_INPUT


def is_money(name: str) -> bool:
    return name.endswith(SUFFIX)


def label(name: str) -> str:
    """What a cents field is called on the page: ``amount_cents`` is the amount."""
    return name[: -len(SUFFIX)] if is_money(name) else name


def text(cents: int | float | None) -> str:
    """``120000`` as ``$1,200.00``; ``None`` (no bound) as ``any``."""
    if cents is None:
        return "any"
    whole = Decimal(int(cents))
    sign = "-" if whole < 0 else ""
    return f"{sign}{SYMBOL}{abs(whole) / 100:,.2f}"


def plain(cents: int) -> str:
    """``120000`` as ``1200.00``: what an input field holds (no symbol, no commas)."""
    return f"{Decimal(cents) / 100:.2f}"


def cents_of(raw: str) -> int:
    """Cents of an amount typed in currency: ``"1,200.5"`` is 120050."""
    typed = raw.strip()
    found = AMOUNT.fullmatch(typed)
    if not typed or found is None or (found["whole"] is None and not found["frac"]):
        raise AmountError(f"{raw!r} is not an amount in dollars, such as 1,200.00")
    frac = found["frac"] or ""
    if len(frac) > 2:
        raise AmountError(f"{raw!r} has more than two decimals: amounts are whole cents")
    whole = (found["whole"] or "0").replace(",", "")
    return int(whole) * 100 + int(frac.ljust(2, "0"))


def cents_value(value: object) -> int | None:
    """A proposal's ``*_cents`` value (text in the memo) as an int, or None if it is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"-?[0-9]{1,18}", value.strip()):
        return int(value)
    return None


def headline(proposal: Mapping[str, str]) -> tuple[str, str] | None:
    """(amount, limit) in currency when the proposal has an amount, else None; the limit
    is ``any`` when the proposal names none."""
    amount = cents_value(proposal.get("amount_cents"))
    if amount is None:
        return None
    limit = cents_value(proposal.get("limit_cents"))
    return text(amount), (text(limit) if limit is not None else proposal.get("limit", "any"))
