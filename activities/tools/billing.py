"""Billing tools: read an invoice, issue a refund (at most once per idempotency key).

``issue_refund``'s invariants are checked in the refund's own transaction (``refund_guard``),
so two approved refunds racing on one invoice cannot together refund more than it is worth.
"""

from __future__ import annotations

import hashlib
from typing import Any

from pydantic import BaseModel, Field

from tower.effects import Authority

from .spec import Db, EffectCall, EffectRefused, tool

# The limit a refund is held to when the run has no policy (a desk without a gate).
DEFAULT_LIMIT_CENTS = 50_000


class LookupInvoice(BaseModel):
    invoice_id: str = Field(pattern=r"^INV-\d{4}$", description="e.g. INV-2001")


class InvoiceBalance(BaseModel):
    invoice_id: str = Field(pattern=r"^INV-\d{4}$", description="e.g. INV-2004")


class IssueRefund(BaseModel):
    invoice_id: str = Field(pattern=r"^INV-\d{4}$")
    amount_cents: int = Field(gt=0, le=10_000_000)
    reason: str = Field(min_length=1, max_length=500)


@tool(description="Read an invoice by id.")
def lookup_invoice(db: Db, args: LookupInvoice) -> dict[str, Any]:
    row = db.execute("SELECT * FROM invoices WHERE id=?", (args.invoice_id,)).fetchone()
    return {"invoice": dict(row)} if row else {"error": f"no invoice {args.invoice_id}"}


@tool(description="Read an invoice with what is already refunded and what is left.")
def invoice_balance(db: Db, args: InvoiceBalance) -> dict[str, Any]:
    row = db.execute("SELECT * FROM invoices WHERE id=?", (args.invoice_id,)).fetchone()
    if row is None:
        return {"error": f"no invoice {args.invoice_id}"}
    refunded = db.execute("SELECT COALESCE(SUM(amount_cents), 0) FROM refunds WHERE invoice_id=?",
                          (args.invoice_id,)).fetchone()[0]
    return {"invoice": dict(row), "refunded_cents": refunded,
            "refundable_cents": max(0, row["amount_cents"] - refunded)}


def refundable_cents(db: Db, invoice_id: str) -> int | None:
    row = db.execute("SELECT amount_cents FROM invoices WHERE id=?", (invoice_id,)).fetchone()
    if row is None:
        return None
    refunded = db.execute("SELECT COALESCE(SUM(amount_cents), 0) FROM refunds "
                          "WHERE invoice_id=?", (invoice_id,)).fetchone()[0]
    return max(0, int(row[0]) - int(refunded))


def refund_guard(db: Db, args: IssueRefund, authority: Authority) -> None:
    """Positive, within what is refundable now, within the limit unless approved."""
    amount = args.amount_cents
    if amount <= 0:
        raise EffectRefused("not_positive", f"a refund must be positive (asked {amount} cents)")
    left = refundable_cents(db, args.invoice_id)
    if left is None:
        raise EffectRefused("no_invoice", f"no invoice {args.invoice_id}")
    if amount > left:
        raise EffectRefused("over_refundable", f"invoice {args.invoice_id} has {_usd(left)} "
                          f"refundable now; refusing to refund {_usd(amount)}")
    limit = int(authority.limits.get("limit_cents", DEFAULT_LIMIT_CENTS))
    approved = authority.approved.get("amount_cents")
    if amount > limit and not (authority.decision_id and isinstance(approved, int)
                               and amount <= approved):
        raise EffectRefused("over_limit", f"{_usd(amount)} is over the {_usd(limit)} limit and "
                          "no approval for that amount was recorded")


def _usd(cents: int) -> str:
    return f"${cents / 100:,.2f}"


@tool(side_effect=True, description="Refund part or all of an invoice.")
def issue_refund(db: Db, args: IssueRefund, call: EffectCall) -> dict[str, Any]:
    refund_guard(db, args, call.authority)
    refund_id = "rf_" + hashlib.sha256(call.key.encode()).hexdigest()[:12]
    db.execute("INSERT INTO refunds VALUES (?,?,?,?,?)",
               (refund_id, args.invoice_id, args.amount_cents, args.reason, call.key))
    return {"refund_id": refund_id, "amount_cents": args.amount_cents}


TOOLS = [lookup_invoice, invoice_balance, issue_refund]
