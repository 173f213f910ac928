"""Scripts for the onboarding agent: a regex "model" that reads details and calls tools.

collect_info never reuses an e-mail or company the conversation says was rejected, so
a message offering a second address shows the validate → collect_info cycle.
"""

from __future__ import annotations

import json
import re

from activities.scripted import first_user_text, tool_results
from tower import ToolCallRequest
from tower.testing import ModelRequest, Script

EMAILS = re.compile(r"[^@\s,;()<>]+@[^@\s,;()<>]+[A-Za-z]")
NAME = re.compile(r"(?:I'm|I am|[Nn]ame is|[Nn]ame:)\s+([A-Z][\w'-]+(?: [A-Z][\w'-]+)*)")
COMPANY = re.compile(r"(?:\bfrom|\bat|[Cc]ompany is|[Cc]ompany:|work for)\s+"
                     r"([A-Z][\w&'-]*(?: [A-Z&][\w&'-]*)*)")
FIELD = re.compile(r"(name|email|company): ([^;]+)")


def collect_info(request: ModelRequest) -> str:
    text = first_user_text(request)
    later = " ".join(m.content for m in request.messages[1:] if m.role == "user")
    rejected = set(EMAILS.findall(later)) if "Rejected" in later else set()
    emails = [e for e in EMAILS.findall(text) if e not in rejected]
    name, company = NAME.search(text), COMPANY.search(text)
    company_name = company.group(1) if company else None
    if company_name and f"({company_name})" in later:
        company_name = None
    return json.dumps({"name": name.group(1) if name else None,
                       "email": emails[0] if emails else None, "company": company_name})


def validate(request: ModelRequest) -> str | ToolCallRequest:
    fields = dict(FIELD.findall(first_user_text(request)))
    done = {name: tool_results(request, name) for name in ("validate_email", "check_company")}
    if not done["validate_email"]:
        return ToolCallRequest(name="validate_email", arguments={"email": fields["email"]})
    if not done["check_company"]:
        return ToolCallRequest(name="check_company", arguments={"company": fields["company"]})
    verdicts = [f"{name}: {r[-1]['reason']}" for name, r in done.items()]
    return "Checked — " + "; ".join(verdicts) + "."


def provision(request: ModelRequest) -> str | ToolCallRequest:
    fields = dict(FIELD.findall(first_user_text(request)))
    created = tool_results(request, "create_account")
    if not created:
        return ToolCallRequest(name="create_account", arguments=fields)
    account_id = created[-1]["account_id"]
    if not tool_results(request, "send_welcome_email"):
        return ToolCallRequest(name="send_welcome_email", arguments={
            "account_id": account_id, "email": fields["email"], "name": fields["name"]})
    return f"Welcome aboard, {fields['name']}: account {account_id} is ready and the " \
           f"welcome e-mail is on its way to {fields['email']}."


# node -> script; the agent's file names the agent (@agent(GRAPH, scripts=SCRIPTS)).
SCRIPTS: dict[str, Script] = {
    "collect_info": collect_info,
    "validate": validate,
    "provision": provision,
}
