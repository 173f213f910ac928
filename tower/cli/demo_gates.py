"""The approval part of `tower demo`: a refund paused at a gate and approved, a destructive
migration paused and rejected. Decisions go through the same code as `tower approve`."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from temporalio.client import Client

from tower.activities.trust import trust_dir
from tower.cli import project
from tower.cli.agents import agents
from tower.cli.approvals import print_waiting
from tower.cli.cmd_approve import print_outcome, send_decision
from tower.cli.cmd_run import print_outcome as print_run_outcome
from tower.cli.common import start_run
from tower.cli.live import follow
from tower.cli.trust_files import dev_trust
from tower.client.keys import config_dir
from tower.contract import names
from tower.contract.decisions import Verdict


def demo_shop(tools: Path) -> Path:
    """The demo's application database, beside its tools' database (created once)."""
    project.module("activities.tools.migrations").create_example_databases(tools)
    return tools.parent / "databases" / "shop.sqlite"


def prepare_trust(tenant: str) -> None:
    """Approver keys for alice and dana (made once, in their config dir) and the tenant's
    roster and policy in the trust dir, unless they are there already."""
    roster = dev_trust(trust_dir(), tenant, approvers={"alice": ["manager"], "dana": ["dba"]})
    kids = ", ".join(f"{m.name} ({'/'.join(m.roles)}): {m.keys[-1].kid}"
                     for m in roster.members if m.name in ("alice", "dana"))
    print(f"\napprovers sign with their own keys in {config_dir() / 'keys'}; the tenant's "
          f"roster ({trust_dir() / tenant / 'roster.json'}) lists {kids}")


async def gated_runs(client: Client, task_queue: str, tools: Path) -> list[tuple[str, str]]:
    prepare_trust(client.namespace)
    demo_shop(tools)
    refund = await _gated(
        client, task_queue, "refund", dict(
            message="Please refund $1,200 on invoice INV-2004"),
        "a human review gate: over the $500 limit the run waits for a manager",
        Verdict.APPROVE, approver="alice", role="manager", note="partial refund agreed",
        edits={"amount_cents": 100000})
    # It drops customers under another table's name: the findings name customers.
    migration = await _gated(
        client, task_queue, "migration", dict(
            database="shop", script="DROP TABLE legacy_notes;\n"
                                    "ALTER TABLE customers RENAME TO legacy_notes;\n"
                                    "DROP TABLE legacy_notes;"),
        "a destructive migration waits for a DBA; rejected, nothing changes",
        Verdict.REJECT, approver="dana", role="dba", note="that drops customers")
    return [("refund", refund), ("migration", migration)]


async def _gated(client: Client, task_queue: str, agent: str, request: Any, what: str,
                 verdict: Verdict, *, approver: str, role: str, note: str,
                 edits: dict[str, Any] | None = None) -> str:
    request = agents()[agent].Input.model_validate(request)
    run_id = f"demo-{agent}-{uuid.uuid4().hex[:6]}"
    shown = request.model_dump(mode="json", exclude_none=True)
    print(f"\n== {agent}: {what}\n   input: {shown}\n   run: {run_id}")
    handle = await start_run(client, agent, request, id=run_id, task_queue=task_queue)
    status = await follow(handle)
    print_run_outcome(status, await handle.query(names.STATE.name, result_type=dict))
    if status != "AWAITING_APPROVAL":
        return run_id
    print_waiting(await handle.query(names.APPROVALS.name, result_type=dict))
    sets = "".join(f" --set {k}={v}" for k, v in (edits or {}).items())
    print(f"\n$ tower {'approve' if verdict == Verdict.APPROVE else 'reject'} {run_id} "
          f"--by {approver}{sets} --note '{note}'")
    out = await send_decision(client, run_id, verdict, approver=approver, role=role,
                              note=note, edits=edits, say=print)
    assert out is not None
    print_outcome(out)
    status = await follow(handle, skip=out.requested_step)
    print_run_outcome(status, await handle.query(names.STATE.name, result_type=dict))
    return run_id
