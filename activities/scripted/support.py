"""Scripts for the support agent: keyword classification, one tool, then a reply."""

from __future__ import annotations

import json

from activities.scripted import find_id, first_user_text, tool_results
from tower import ToolCallRequest
from tower.testing import ModelRequest, Script

KEYWORDS = {
    "BILLING": ("invoice", "refund", "charge", "bill", "payment"),
    "TECHNICAL": ("error", "crash", "bug", "login", "broken", "fails"),
}


def classify(request: ModelRequest) -> str:
    text = first_user_text(request).lower()
    category = next((c for c, words in KEYWORDS.items() if any(w in text for w in words)),
                    "ACCOUNT")
    return json.dumps({"category": category})


def billing(request: ModelRequest) -> str | ToolCallRequest:
    invoice_id = find_id(first_user_text(request), "INV")
    results = tool_results(request, "lookup_invoice")
    if invoice_id and not results:
        return ToolCallRequest(name="lookup_invoice", arguments={"invoice_id": invoice_id})
    if results and "invoice" in results[-1]:
        inv = results[-1]["invoice"]
        return (f"Invoice {inv['id']} for ${inv['amount_cents'] / 100:,.2f} is {inv['status']} "
                f"(issued {inv['issued_on']}). I have passed your request to the billing team.")
    return "Please send the invoice number (INV-####) so I can look it up."


def technical(request: ModelRequest) -> str | ToolCallRequest:
    results = tool_results(request, "search_docs")
    if not results:
        return ToolCallRequest(name="search_docs",
                               arguments={"query": first_user_text(request)[:200]})
    hits = results[-1].get("results", [])
    if hits:
        return f"This should help: \"{hits[0]['title']}\" — {hits[0]['body']}"
    return "I could not find this in the docs; an engineer will look into it."


def account_help(request: ModelRequest) -> str | ToolCallRequest:
    account_id = find_id(first_user_text(request), "ACC")
    results = tool_results(request, "lookup_account")
    if account_id and not results:
        return ToolCallRequest(name="lookup_account", arguments={"account_id": account_id})
    if results and "account" in results[-1]:
        acc = results[-1]["account"]
        return f"Your account {acc['id']} is {acc['status']} on the {acc['plan']} plan."
    return "Please tell me your account id (ACC-####)."


# node -> script; the agent's file names the agent (@agent(GRAPH, scripts=SCRIPTS)).
SCRIPTS: dict[str, Script] = {
    "classify": classify,
    "billing": billing,
    "technical": technical,
    "account_help": account_help,
}
