"""A run waiting at a gate carries the role it needs as a search attribute, so an
approver's inbox finds the runs their roles may decide with one visibility query —
with no worker answering queries — and the run leaves that list once decided."""

from __future__ import annotations

import asyncio
from pathlib import Path

from gatekit import decide, new_id, refund_request, wait_pending
from temporalio.client import Client

from tower.activities.model import ModelSettings
from tower.contract import search
from worker import build_worker
from workflows.refund import RefundAgent


async def _waiting(client: Client, role: str) -> list[str]:
    query = (f"{search.AGENT_GATE_ROLE.name} = '{role}' AND ExecutionStatus = 'Running'")
    return [wf.id async for wf in client.list_workflows(query)]


async def _until(client: Client, role: str, run: str, present: bool) -> None:
    async with asyncio.timeout(30):  # visibility is eventually consistent
        while (run in await _waiting(client, role)) != present:
            await asyncio.sleep(0.2)


async def test_a_waiting_run_is_found_by_the_role_its_gate_needs(
    client: Client, task_queue: str, db_path: Path
) -> None:
    run = new_id("refund-role")
    async with build_worker(client, task_queue=task_queue, db_path=db_path,
                            models=ModelSettings()):
        handle = await client.start_workflow(RefundAgent.run, refund_request(client, run),
                                             id=run, task_queue=task_queue)
        await wait_pending(handle)
    # No worker now: visibility alone finds the run for managers, not for DBAs.
    await _until(client, "manager", run, present=True)
    assert run not in await _waiting(client, "dba")
    async with build_worker(client, task_queue=task_queue, db_path=db_path,
                            models=ModelSettings()):
        info = await wait_pending(handle)
        await decide(client, handle, info["pending"])
        await handle.result()
    await _until(client, "manager", run, present=False)
    described = await handle.describe()
    assert described.typed_search_attributes.get(search.AGENT_GATE_ROLE) == ""
