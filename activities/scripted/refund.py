"""Scripts for the refund agent: read the invoice, propose a refund, confirm it."""

from __future__ import annotations

import re

from activities.scripted import find_id, first_user_text, last_message, tool_results
from tower import ToolCallRequest
from tower.testing import ModelRequest, Script


def requested_cents(text: str) -> int | None:
    match = re.search(r"\$\s?([\d,]+(?:\.\d{1,2})?)", text)
    return round(float(match.group(1).replace(",", "")) * 100) if match else None


def reason(request: ModelRequest) -> str | ToolCallRequest:
    text = first_user_text(request)
    invoice_id, amount = find_id(text, "INV"), requested_cents(text)
    if invoice_id is None or not amount:
        return "Please tell me the invoice number (INV-####) and the amount to refund."
    last = last_message(request)
    if last is None or last.role != "tool" or last.name != "invoice_balance":
        return ToolCallRequest(name="invoice_balance", arguments={"invoice_id": invoice_id})
    balance = tool_results(request, "invoice_balance")[-1]
    if "error" in balance:
        return f"I could not find invoice {invoice_id}."
    refundable = int(balance["refundable_cents"])
    if refundable <= 0:
        return f"Invoice {invoice_id} has already been refunded in full."
    return ToolCallRequest(name="issue_refund", arguments={
        "invoice_id": invoice_id, "amount_cents": min(amount, refundable),
        "reason": f"customer request: {text[:200]}"})


def confirm(request: ModelRequest) -> str:
    refunds = tool_results(request, "issue_refund")
    if not refunds:
        return "Your refund is being processed."
    r = refunds[-1]
    return (f"Your refund of ${r['amount_cents'] / 100:,.2f} has been issued "
            f"(refund id {r['refund_id']}). It reaches your account in 3-5 business days.")


# node -> script; the agent's file names the agent (@agent(GRAPH, scripts=SCRIPTS)).
SCRIPTS: dict[str, Script] = {"reason": reason, "confirm": confirm}
