"""Exactly-once side effects on your own database, the way ``@DBOS.transaction()`` does it.

A side-effecting tool is your business function: its invariant and its write. Tower adds,
in the SAME transaction on your database, the claim of the action's key, the epoch fence
(an attempt Temporal gave up on cannot commit later) and the record of the result: a
repeat of the action returns the first result and acts on nothing::

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

``run_tool(send_payment, db, call)`` runs it as its activity would, for a test.

``Postgres(dsn)`` is the same on PostgreSQL (psycopg 3; ``?`` placeholders work on both).

The key is the run's logical action (tower/core/keys.py). A call a gate approved acts for
the approved request — the run, the gate, the visit it was opened for and the digest of the
proposal the approver signed — never for the decision or its edits: every re-approval of
that request (after ``tower fork``, ``tower retry --from``, a reset, a replayed token; with
or without edits) returns the first effect's result. A re-planned proposal is a new
request. A call no gate approved acts for its node visit and its arguments: a retry or a
fork repeating it finds it; other arguments are another action.

Reconciling is the tool's own activity called with ``reconcile=True``, so every tool of a
worker reconciles itself — and only such a tool: ``TowerPlugin`` refuses a reconcile call
to any other activity (_guard.py).
"""

from tower.contract.wire import Authority, ToolCall
from tower.effects._activity import run_tool
from tower.effects._postgres import Postgres
from tower.effects._sqlite import SQLite
from tower.effects._tool import EffectCall, NoEffect, reconcile

__all__ = ["Authority", "EffectCall", "NoEffect", "Postgres", "SQLite", "ToolCall", "reconcile",
           "run_tool"]
