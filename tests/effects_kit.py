"""A user's side-effecting tool on tower.effects, as a team writes one (the whole tool is
the 20 lines below), and the two databases it runs on: SQLite, and a real PostgreSQL."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from tower import EffectRefused, tool
from tower.effects import EffectCall

SCHEMA = """CREATE TABLE IF NOT EXISTS accounts (id TEXT PRIMARY KEY, balance INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS transfers (id TEXT PRIMARY KEY, account TEXT NOT NULL,
    amount INTEGER NOT NULL)"""


class Withdraw(BaseModel):
    account: str = Field(min_length=1)
    amount: int = Field(gt=0)


@tool(side_effect=True)
def withdraw(db: Any, args: Withdraw, call: EffectCall) -> dict[str, Any]:
    """Never more than the balance (the invariant), once per action (Tower)."""
    row = db.execute("SELECT balance FROM accounts WHERE id = ?", (args.account,)).fetchone()
    if row is None or row[0] < args.amount:
        raise EffectRefused("insufficient", f"{args.account} cannot pay {args.amount}")
    db.execute("UPDATE accounts SET balance = balance - ? WHERE id = ?",
               (args.amount, args.account))
    db.execute("INSERT INTO transfers VALUES (?, ?, ?)", (call.id, args.account, args.amount))
    return {"transfer": call.id, "amount": args.amount}
