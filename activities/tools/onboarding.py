"""Onboarding tools: check an e-mail and a company, create the account, send the welcome.

The checks read the tools' database (who is registered, which companies are blocked);
the two provisioning tools are side effects, done at most once per idempotency key.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, Field

from .spec import Db, EffectCall, EffectRefused, tool

EMAIL = re.compile(r"^[^@\s]+@([^@\s]+\.[^@\s.]+)$")
# Top-level domains that can never receive mail (RFC 2606 / 6761).
RESERVED_TLDS = frozenset({"invalid", "test", "localhost", "local", "example"})
DISPOSABLE_DOMAINS = frozenset({"mailinator.com", "tempmail.com", "10minutemail.com"})


class ValidateEmail(BaseModel):
    email: str = Field(min_length=3, max_length=254)


class CheckCompany(BaseModel):
    company: str = Field(min_length=1, max_length=200)


class CreateAccount(BaseModel):
    name: str = Field(min_length=1, max_length=200)
    email: str = Field(pattern=r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
    company: str = Field(min_length=1, max_length=200)


class SendWelcomeEmail(BaseModel):
    account_id: str = Field(pattern=r"^ACC-\d{4}$")
    email: str = Field(pattern=r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
    name: str = Field(min_length=1, max_length=200)


@tool(
      description='Check that an e-mail address can receive mail and is not yet registered.')
def validate_email(db: Db, args: ValidateEmail) -> dict[str, Any]:
    email = args.email.strip().lower()
    match = EMAIL.match(email)
    if match is None:
        return {"email": args.email, "valid": False, "reason": "not an e-mail address"}
    domain = match.group(1)
    if domain.rsplit(".", 1)[-1] in RESERVED_TLDS:
        return {"email": args.email, "valid": False, "reason": f"{domain} cannot receive mail"}
    if domain in DISPOSABLE_DOMAINS:
        return {"email": args.email, "valid": False, "reason": f"{domain} is a disposable domain"}
    taken = db.execute("SELECT id FROM accounts WHERE lower(email)=?", (email,)).fetchone()
    if taken is not None:
        return {"email": args.email, "valid": False, "reason": f"already registered ({taken[0]})"}
    return {"email": args.email, "valid": True, "reason": "ok"}


@tool(description="Check that a company name is acceptable for a new account.")
def check_company(db: Db, args: CheckCompany) -> dict[str, Any]:
    name = " ".join(args.company.split())
    if len(name) < 2 or not any(c.isalpha() for c in name):
        return {"company": args.company, "valid": False, "reason": "not a company name"}
    blocked = db.execute("SELECT reason FROM blocked_companies WHERE lower(name)=?",
                         (name.lower(),)).fetchone()
    if blocked is not None:
        return {"company": args.company, "valid": False, "reason": f"blocked: {blocked[0]}"}
    return {"company": args.company, "valid": True, "reason": "ok"}


def one_account_per_email(db: Db, args: CreateAccount, authority: Any) -> None:
    """Registers once: ``validate_email`` looked earlier, outside this transaction; two
    sign-ups racing with one address both passed it. This check is under the write lock."""
    taken = db.execute("SELECT id FROM accounts WHERE lower(email)=?",
                       (args.email.lower(),)).fetchone()
    if taken is not None:
        raise EffectRefused("already_registered", f"{args.email} is already registered "
                          f"({taken[0]}); no second account")


@tool(side_effect=True, description="Create the customer's account (once).")
def create_account(db: Db, args: CreateAccount, call: EffectCall) -> dict[str, Any]:
    one_account_per_email(db, args, call.authority)
    last = db.execute("SELECT MAX(CAST(substr(id, 5) AS INTEGER)) FROM accounts").fetchone()[0]
    account_id = f"ACC-{(last or 1000) + 1:04d}"
    db.execute("INSERT INTO accounts VALUES (?,?,?,?,?,?)",
               (account_id, args.name, args.email, "free", "active", 0))
    db.execute("INSERT INTO signups VALUES (?,?,?)", (account_id, args.company, call.key))
    return {"account_id": account_id, "plan": "free"}


@tool(side_effect=True, description="Send the welcome e-mail for a new account (once).")
def send_welcome_email(db: Db, args: SendWelcomeEmail, call: EffectCall) -> dict[str, Any]:
    body = (f"Hello {args.name}, welcome to Tower! Your account {args.account_id} is ready.")
    row = db.execute(
        "INSERT INTO outbox (to_addr, subject, body, idempotency_key) VALUES (?,?,?,?) "
        "RETURNING id", (args.email, "Welcome to Tower", body, call.key)).fetchall()[0]
    return {"message_id": f"MSG-{row[0]}", "to": args.email}


TOOLS = [validate_email, check_company, create_account, send_welcome_email]
