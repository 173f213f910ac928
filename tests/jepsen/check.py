"""What must hold after every trial, read from each run's history, its state and the DB."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError

from tower.contract import search

from .bounds import HarnessStuck, bounded
from .store import refund_rows

SETTLED = ("DONE", "FAILED")
RPC_TIMEOUT = timedelta(seconds=30)


@dataclass
class RunView:
    """One run as the checker sees it: its final state and what its history reports paid."""

    workflow_id: str
    state: dict[str, Any] | None  # None: the harness could not read it (a harness error)
    reported: list[str] = field(default_factory=list)  # refund ids in completed activities
    why_stuck: str = ""  # a run not settled: what the server says it waits for (stuck.py)
    idle: bool = False  # a run not settled with nothing pending: no task, activity or timer


async def view(client: Client, workflow_id: str) -> RunView:
    handle = client.get_workflow_handle(workflow_id)
    state: dict[str, Any] = await handle.query("state", result_type=dict,
                                               rpc_timeout=RPC_TIMEOUT)
    history = await handle.fetch_history(rpc_timeout=RPC_TIMEOUT)
    scheduled: dict[int, str] = {}
    reported: list[str] = []
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = event.activity_task_scheduled_event_attributes
            scheduled[event.event_id] = attrs.activity_type.name
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            attrs2 = event.activity_task_completed_event_attributes
            if scheduled.get(attrs2.scheduled_event_id) == "issue_refund":
                payloads = list(attrs2.result.payloads)
                values = await client.data_converter.decode(payloads, [dict]) if payloads else []
                if values and isinstance(values[0], dict) and values[0].get("refund_id"):
                    reported.append(str(values[0]["refund_id"]))
    return RunView(workflow_id, state, reported)


async def status_of(handle: WorkflowHandle[Any, Any]) -> str | None:
    """The run's status from its search attributes: the server answers, no worker needed
    (a query per poll would keep busy workflows busier). None when it cannot tell."""
    try:
        described = await bounded(f"describing {handle.id}", RPC_TIMEOUT.total_seconds(),
                                  handle.describe(rpc_timeout=RPC_TIMEOUT))
    except (RPCError, HarnessStuck):
        return None
    return described.typed_search_attributes.get(search.AGENT_STATUS)


def check(db_path: Path | str, invoice: str, total_cents: int, runs: list[RunView]) -> list[str]:
    """Violations (empty when the trial kept every rule); ``db_path``: where the refunds are
    (the SQLite file, or a PostgreSQL DSN: store.py)."""
    rows = refund_rows(db_path, invoice)
    problems: list[str] = []
    paid = sum(r[1] for r in rows)
    if paid > total_cents:
        problems.append(f"{invoice}: refunded {paid} cents of {total_cents}")
    by_id = {r[0]: r for r in rows}
    for run in runs:
        wid, state = run.workflow_id, run.state
        mine = [r for r in rows if r[2].startswith(f"{wid}/")]
        if len(mine) > 1:
            problems.append(f"{wid}: paid {len(mine)} times: {[r[0] for r in mine]}")
        if state is None:
            continue
        if state.get("status") not in SETTLED:
            why = f": {run.why_stuck}" if run.why_stuck else ""
            idle = ", nothing pending" if run.idle else ""
            problems.append(f"{wid}: stuck at {state.get('node')} ({state.get('status')})"
                            f"{idle}{why}")
            continue
        refund_id = state.get("refund_id", "")
        if refund_id and refund_id not in by_id:
            problems.append(f"{wid}: state says {refund_id} but the database has no such refund")
        if refund_id and refund_id in by_id and by_id[refund_id][1] != state["amount_cents"]:
            problems.append(f"{wid}: state says {state['amount_cents']} cents, database "
                            f"{by_id[refund_id][1]}")
        if not refund_id and mine:
            problems.append(f"{wid}: {state['status']} with no refund_id while {mine[0][0]} "
                            "exists")
        for reported in run.reported:
            if reported not in by_id:
                problems.append(f"{wid}: history reports {reported}, the database has none")
    return problems
