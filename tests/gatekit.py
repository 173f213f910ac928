"""What the gate tests share: a test secret, signed decisions, waiting for a gate."""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from temporalio.client import Client, WorkflowHandle

from tower.contract.decisions import Decision, Verdict
from tower.core.approval import ApprovalSettings, run_key, sign
from workflows.refund import RefundRequest

SECRET = b"tenant-secret-for-tests"
BIG_REFUND = "Please refund $1,200 on invoice INV-2004"


def settings(client: Client, run: str, secret: bytes = SECRET) -> ApprovalSettings:
    return ApprovalSettings(key=run_key(secret, client.namespace, run), tenant=client.namespace)


def refund_request(client: Client, run: str, **kw: Any) -> RefundRequest:
    return RefundRequest(message=kw.pop("message", BIG_REFUND), approvals=settings(client, run),
                         **kw)


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def decision(
    client: Client, run: str, pending: dict[str, Any] | None, *,
    verdict: Verdict = Verdict.APPROVE, approver: str = "alice", role: str = "manager",
    gate: str | None = None, edits: dict[str, Any] | None = None, decision_id: str | None = None,
    secret: bytes | None = SECRET, tenant: str | None = None, expires_at: datetime | None = None,
    note: str = "",
) -> dict[str, Any]:
    """A decision as the wire carries it, signed for ``tenant`` (default: the client's)."""
    tenant = tenant or client.namespace
    d = Decision(
        decision_id=decision_id or new_id("d"), tenant=tenant, run=run,
        gate=gate or (pending["gate"] if pending else "refund_review"), decision=verdict,
        approver=approver, role=role,
        expires_at=expires_at or (datetime.fromisoformat(pending["expires_at"]) if pending
                                  else datetime(2030, 1, 1, tzinfo=UTC)),
        edits=edits or {}, note=note)
    if secret is not None:
        d = sign(run_key(secret, tenant, run), d)
    return d.model_dump(mode="json")


async def decide(client: Client, handle: WorkflowHandle[Any, Any],
                 pending: dict[str, Any] | None, **kw: Any) -> dict[str, Any]:
    """Answer the run's gate with a signed decision (see ``decision``): the update's reply."""
    reply: dict[str, Any] = await handle.execute_update(
        "decide", decision(client, handle.id, pending, **kw), result_type=dict)
    return reply


async def wait_pending(handle: WorkflowHandle[Any, Any], timeout: float = 30) -> dict[str, Any]:
    """The run's approvals once a request is pending."""
    async with asyncio.timeout(timeout):
        while True:
            info: dict[str, Any] = await handle.query("approvals", result_type=dict)
            if info["pending"]:
                return info
            await asyncio.sleep(0.1)


async def snapshot(handle: WorkflowHandle[Any, Any]) -> dict[str, Any]:
    state: dict[str, Any] = await handle.query("state", result_type=dict)
    return state


def refunds(db_path: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db_path) as db:
        return db.execute("SELECT invoice_id, amount_cents FROM refunds").fetchall()


SHOP_SCHEMA = """
CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, fax TEXT);
CREATE TABLE legacy_notes (id INTEGER PRIMARY KEY, body TEXT);
INSERT INTO customers (name, fax) VALUES ('Ada', '555-0100'), ('Grace', NULL);
INSERT INTO legacy_notes (body) VALUES ('keep me?');
"""


def make_shop(tools_db: Path) -> Path:
    """A real application database for migrations, beside the tools' database."""
    path = tools_db.parent / "databases" / "shop.sqlite"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)  # a new tools database made the example one: start afresh
    with sqlite3.connect(path) as db:
        db.executescript(SHOP_SCHEMA)
    return path


def schema(path: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE "
                          "'sqlite_%' AND name != '_tower_migrations' ORDER BY name").fetchall()
