"""The example's tools on PostgreSQL (TOWER_DB=postgresql://...), the deployment's system of
record rather than one host's file: real `python worker.py` hosts (tests/storekit.py: own
folder, HOME and data) on the real dev server, the tools in a real PostgreSQL
(tests/pgserver.py; skipped, saying why, where PostgreSQL's binaries are not installed).

- A refund parked at its gate on host A, A killed -9, approved, paid by host B: one refund
  in PostgreSQL; then an order (stock, card, shipment) on B: each effect once.
- Workers starting at once on an empty database seed it once.
- The migration tools, whose targets are example SQLite files, migrate the worker's own.
"""

from __future__ import annotations

import multiprocessing
import signal
import sqlite3
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from gatekit import decision, refund_request, wait_pending
from pgserver import Postgres
from storekit import Host
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from activities.tools import TOOLS, ToolsDb
from activities.tools.db import SEED_ACCOUNTS, SEED_SOURCES, open_postgres
from activities.tools.orders import SEED_PRODUCTS
from tower.contract.wire import ToolCall
from workflows.order import OrderAgent, OrderRequest
from workflows.refund import RefundAgent

pytestmark = pytest.mark.long

ORDER = "2 x WIDGET-1 to 7 Quay St, Dublin, US"


def rows(url: str, sql: str) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(url) as db:
        return [tuple(r) for r in db.execute(sql).fetchall()]


async def identities(handle: WorkflowHandle[Any, Any]) -> dict[str, str]:
    """Each activity's name -> the worker identity that ran its first attempt."""
    scheduled: dict[int, str] = {}
    by: dict[str, str] = {}
    async for e in handle.fetch_history_events():
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            scheduled[e.event_id] = e.activity_task_scheduled_event_attributes.activity_type.name
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            started = e.activity_task_started_event_attributes
            by.setdefault(scheduled[started.scheduled_event_id], started.identity)
    return by


def identity(host: Host) -> str:
    assert host.proc is not None
    return f"{host.proc.pid}@"


async def test_a_refund_parked_on_one_host_is_paid_once_in_postgresql_by_another(
    env: WorkflowEnvironment, task_queue: str, tmp_path: Path, pg_server: Postgres,
) -> None:
    client, tools = env.client, pg_server.database("tools")
    address = client.service_client.config.target_host
    a, b = (Host(name, tmp_path, address, task_queue, TOWER_DB=tools) for name in "ab")
    try:
        await a.start()
        run = f"refund-{uuid.uuid4().hex[:8]}"
        handle = await client.start_workflow(RefundAgent.run, refund_request(client, run),
                                             id=run, task_queue=task_queue)
        pending = (await wait_pending(handle, timeout=60))["pending"]
        parked_by = identity(a)
        a.stop(signal.SIGKILL)  # host A, and everything on its disk, is gone
        await b.start()
        out = await handle.execute_update("decide", decision(client, run, pending),
                                          result_type=dict)
        assert out["result"] == "approved"
        state = await handle.result()
        assert state.status == "DONE" and state.refund_id.startswith("rf_")
        by = await identities(handle)
        assert by["invoice_balance"].startswith(parked_by), by  # a read, on A (before the gate)
        assert by["issue_refund"].startswith(identity(b)), by  # the effect, on B
        # Once, in the deployment's database: the refund, and Tower's record of it.
        assert rows(tools, "SELECT id, invoice_id, amount_cents FROM refunds") == [
            (state.refund_id, "INV-2004", 120000)]
        assert rows(tools, "SELECT tool FROM tower_effects WHERE result IS NOT NULL") == [
            ("issue_refund",)]
        # An order on B: stock, card and shipment, each once, in PostgreSQL.
        order = await client.execute_workflow(
            OrderAgent.run, OrderRequest(text=ORDER), id=f"order-{uuid.uuid4().hex[:8]}",
            task_queue=task_queue)
        assert order.status == "DONE" and order.shipment_id, order
        assert rows(tools, "SELECT stock FROM products WHERE sku='WIDGET-1'") == [
            (SEED_PRODUCTS[0][3] - 2,)]
        assert rows(tools, "SELECT id, amount, status FROM charges") == [
            (order.charge_id, str(order.total), "paid")]
        assert order.subtotal == Decimal("39.98") and order.total > order.subtotal  # with tax
        assert rows(tools, "SELECT id FROM shipments") == [(order.shipment_id,)]
        for host in (a, b):  # each says where the tools' database is, its password hidden
            assert "tools' database: PostgreSQL postgresql://temporal:***@127.0.0.1" \
                in host.text(), host.text()[-2000:]
            assert tools.split(":")[2].split("@")[0] not in host.text()
            # The migration tools' example databases: each host's own (docs/production.md).
            assert (host.project / ".tower" / "databases" / "shop.sqlite").is_file()
            assert not (host.dir / "tools.sqlite").exists()  # no SQLite tools' file at all
    finally:
        a.stop()
        b.stop()


def _open(urls: list[str], folder: str, start: Any) -> None:
    for url in urls:
        start.wait(timeout=60)  # every process at the new database at the same moment
        open_postgres(url, Path(folder) / url.rsplit("/", 1)[1])


# The race is a matter of timing: several rounds of it. Each process is a Python start-up
# (the tools, psycopg): 3 processes, 2 rounds by default; 6 processes, 4 rounds in soak.
@pytest.mark.parametrize(("rounds", "processes"), [
    (2, 3), pytest.param(4, 6, marks=pytest.mark.soak)])
def test_workers_starting_together_seed_an_empty_postgresql_once(
    tmp_path: Path, pg_server: Postgres, rounds: int, processes: int,
) -> None:
    urls = [pg_server.database("tools") for _ in range(rounds)]
    spawn = multiprocessing.get_context("spawn")
    start = spawn.Barrier(processes)
    workers = [spawn.Process(target=_open, args=(urls, str(tmp_path / str(i)), start))
               for i in range(processes)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=180)
    assert [w.exitcode for w in workers] == [0] * processes
    for url in urls:
        assert rows(url, "SELECT COUNT(*) FROM accounts") == [(len(SEED_ACCOUNTS),)]
        assert rows(url, "SELECT COUNT(*) FROM sources") == [(len(SEED_SOURCES),)]
        assert rows(url, "SELECT COUNT(*) FROM products") == [(len(SEED_PRODUCTS),)]
        name = url.rsplit("/", 1)[1]
        for i in range(processes):  # each worker's own example database for migrations
            assert (tmp_path / str(i) / name / "shop.sqlite").is_file()


def test_the_migration_tools_migrate_the_workers_own_example_database(
    tmp_path: Path, pg_server: Postgres,
) -> None:
    """With the tools on PostgreSQL the migration targets are files in the worker's own
    folder: a migration applies there, once (Tower's record is in PostgreSQL); an unknown
    database is the same clear answer as on SQLite."""
    tools = pg_server.database("tools")
    box = ToolsDb(tools, local_dir=tmp_path / "host")
    shop = tmp_path / "host" / "databases" / "shop.sqlite"

    def call(name: str, **args: Any) -> dict[str, Any]:
        return box.call(TOOLS[name], ToolCall(tool=name, arguments=args,
                                              idempotency_key=f"run/{name}"))

    before = call("schema_fingerprint", database="shop")["fingerprint"]
    script = "ALTER TABLE customers ADD COLUMN vip INTEGER;"
    found = call("inspect_migration", database="shop", script=script)
    assert found["ok"] and not found["destructive"] and found["fingerprint"] == before
    applied = call("apply_migration", database="shop", script=script,
                   expected_fingerprint=before)
    assert applied["applied"] and applied["fingerprint"] != before
    again = call("apply_migration", database="shop", script=script, expected_fingerprint=before)
    assert again == applied  # the first result, from PostgreSQL: not applied twice
    with sqlite3.connect(shop) as db:
        assert "vip" in [r[1] for r in db.execute("PRAGMA table_info(customers)")]
    assert rows(tools, "SELECT tool FROM tower_effects WHERE result IS NOT NULL") == [
        ("apply_migration",)]
    assert call("schema_fingerprint", database="nope") == {"error": "no database named 'nope'"}
