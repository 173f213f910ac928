"""Account tools: read an account, change its plan or e-mail."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from .spec import Db, tool


class LookupAccount(BaseModel):
    account_id: str = Field(pattern=r"^ACC-\d{4}$", description="e.g. ACC-1001")


class UpdateAccount(BaseModel):
    account_id: str = Field(pattern=r"^ACC-\d{4}$")
    plan: Literal["free", "pro", "team"] | None = None
    email: str | None = Field(default=None, pattern=r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


def account_row(db: Db, account_id: str) -> dict[str, Any] | None:
    row = db.execute("SELECT * FROM accounts WHERE id=?", (account_id,)).fetchone()
    return dict(row) if row else None


@tool(description="Read an account's status, plan and balance.")
def lookup_account(db: Db, args: LookupAccount) -> dict[str, Any]:
    row = account_row(db, args.account_id)
    return {"account": row} if row else {"error": f"no account {args.account_id}"}


@tool(side_effect=True, description="Change an account's plan or e-mail.")
def update_account(db: Db, args: UpdateAccount) -> dict[str, Any]:
    if account_row(db, args.account_id) is None:
        return {"error": f"no account {args.account_id}"}
    changes = args.model_dump(exclude={"account_id"}, exclude_none=True)
    for column, value in changes.items():  # columns come from the model, never from input
        db.execute(f"UPDATE accounts SET {column}=? WHERE id=?", (value, args.account_id))
    return {"updated": changes, "account": account_row(db, args.account_id)}


TOOLS = [lookup_account, update_account]
