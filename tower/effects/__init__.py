"""Exactly-once side effects on your own database, the way ``@DBOS.transaction()`` does it.

A side-effecting tool is your business function: its invariant and its write. Tower adds,
in the SAME transaction, the claim of the action's key, the epoch fence (an attempt
Temporal gave up on cannot commit later) and the record of the result: a repeat of the
action returns the first result and acts on nothing::

    from tower import EffectRefused, tool
    from tower.effects import EffectCall, SQLite

    @tool(side_effect=True)  # the function's docstring is the tool's description
    def send_payment(db, payment: Payment, call: EffectCall) -> dict[str, Any]:
        if payment.amount_cents > LIMIT and call.approved("amount_cents") is None:
            raise EffectRefused("over_limit", "over the limit and not approved")
        db.execute("INSERT INTO payments VALUES (?, ?, ?)",
                   ("pay_" + call.id, payment.payee, payment.amount_cents))
        return {"payment_id": "pay_" + call.id}

    worker = build_worker(client, ..., bind={"db": SQLite("payments.sqlite")})

``Postgres(dsn)`` is the same on PostgreSQL; ``run_tool`` runs a tool as its activity
would, for a test. The key is the run's logical action (tower/core/keys.py): every
re-approval of one request, with or without edits, returns the first effect. Reconciling
is the tool's own activity called with ``reconcile=True``; ``TowerPlugin`` refuses it to
any other activity (_tool.py).
"""

from tower.contract.wire import Authority, ToolCall
from tower.effects._db import Postgres, SQLite
from tower.effects._tool import EffectCall, NoEffect, reconcile, run_tool

__all__ = ["Authority", "EffectCall", "NoEffect", "Postgres", "SQLite", "ToolCall", "reconcile",
           "run_tool"]
