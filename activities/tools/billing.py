"""Billing tools: read an invoice, issue a refund (at most once per idempotency key)."""

from __future__ import annotations

import hashlib
import sqlite3
from typing import Any

from pydantic import BaseModel, Field

from .spec import Tool


class LookupInvoice(BaseModel):
    invoice_id: str = Field(pattern=r"^INV-\d{4}$", description="e.g. INV-2001")


class InvoiceBalance(BaseModel):
    invoice_id: str = Field(pattern=r"^INV-\d{4}$", description="e.g. INV-2004")


class IssueRefund(BaseModel):
    invoice_id: str = Field(pattern=r"^INV-\d{4}$")
    amount_cents: int = Field(gt=0, le=10_000_000)
    reason: str = Field(min_length=1, max_length=500)


def lookup_invoice(db: sqlite3.Connection, args: LookupInvoice, key: str) -> dict[str, Any]:
    row = db.execute("SELECT * FROM invoices WHERE id=?", (args.invoice_id,)).fetchone()
    return {"invoice": dict(row)} if row else {"error": f"no invoice {args.invoice_id}"}


def invoice_balance(db: sqlite3.Connection, args: InvoiceBalance, key: str) -> dict[str, Any]:
    row = db.execute("SELECT * FROM invoices WHERE id=?", (args.invoice_id,)).fetchone()
    if row is None:
        return {"error": f"no invoice {args.invoice_id}"}
    refunded = db.execute("SELECT COALESCE(SUM(amount_cents), 0) FROM refunds WHERE invoice_id=?",
                          (args.invoice_id,)).fetchone()[0]
    return {"invoice": dict(row), "refunded_cents": refunded,
            "refundable_cents": max(0, row["amount_cents"] - refunded)}


def issue_refund(db: sqlite3.Connection, args: IssueRefund, key: str) -> dict[str, Any]:
    refund_id = "rf_" + hashlib.sha256(key.encode()).hexdigest()[:12]
    db.execute("INSERT INTO refunds VALUES (?,?,?,?,?)",
               (refund_id, args.invoice_id, args.amount_cents, args.reason, key))
    return {"refund_id": refund_id, "amount_cents": args.amount_cents}


TOOLS = [
    Tool("lookup_invoice", "Read an invoice by id.", LookupInvoice, lookup_invoice),
    Tool("invoice_balance", "Read an invoice with what is already refunded and what is left.",
         InvoiceBalance, invoice_balance),
    Tool("issue_refund", "Refund part or all of an invoice.", IssueRefund, issue_refund,
         side_effect=True),
]
