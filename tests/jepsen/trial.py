"""One randomized trial, and the world the trials share (server, workers, database)."""

from __future__ import annotations

import asyncio
import contextlib
import random
import sqlite3
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gatekit import decision, refund_request
from procs import WorkerProcess
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import ResetReapplyExcludeType
from temporalio.api.workflowservice.v1 import ResetWorkflowExecutionRequest
from temporalio.client import (
    Client,
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.service import RPCError

from starter.cmd_operator import send_abort, send_retry
from tower.contract import search
from tower.contract.decisions import Verdict
from tower.testing.replay_report import task_completed_after
from workflows.refund import RefundAgent

from .check import SETTLED, RunView, check, view

SETTLE_SECONDS = 240  # a run not DONE or FAILED by then is stuck (generous: CI machines are busy)
RPC_SECONDS = 30  # one operator call (retry, fork); past it the call counts as not made


@dataclass
class World:
    client: Client
    db_path: Path
    task_queue: str
    workers: list[WorkerProcess]


@dataclass
class Outcome:
    trial: int
    invoice: str
    runs: int
    faults: list[str]
    problems: list[str]


async def trial(world: World, number: int, rng: random.Random) -> Outcome:
    invoice, total = f"INV-{3000 + number:04d}", rng.randint(5, 40) * 10_000
    with sqlite3.connect(world.db_path, timeout=30) as db:
        db.execute("INSERT INTO invoices VALUES (?, 'ACC-1001', ?, 'paid', '2026-11-20')",
                   (invoice, total))
    faults: list[str] = []
    count = rng.randint(2, 4)
    handles = [await start(world, invoice, rng.randint(100, total // 100), rng)
               for _ in range(count)]
    chaos = [asyncio.create_task(approver(world.client, h, random.Random(rng.random())))
             for h in handles]
    chaos += [asyncio.create_task(fault(world, rng.choice(FAULTS), random.Random(rng.random()),
                                        faults)) for _ in range(rng.randint(0, 2))]
    try:
        await settle(handles)
        for handle in handles:  # operators: retry what FAILED, fork some of what is DONE
            with contextlib.suppress(TimeoutError, RPCError):
                async with asyncio.timeout(RPC_SECONDS):
                    await operate(world.client, handle, rng, faults)
        await settle(handles)
        async with asyncio.timeout(RPC_SECONDS * len(handles)):
            views = [await view(world.client, h.id) for h in handles]
    except TimeoutError:
        views = [RunView(h.id, await state_of(h)) for h in handles]
    finally:
        for task in chaos:
            task.cancel()
        await asyncio.gather(*chaos, return_exceptions=True)
    problems = check(world.db_path, invoice, total, views)
    for handle, run in zip(handles, views, strict=True):  # close what an operator left FAILED
        if run.state.get("status") == "FAILED":
            with contextlib.suppress(Exception):
                await send_abort(world.client, handle.id, "checker", "trial over")
    return Outcome(number, invoice, count, faults, problems)


async def start(world: World, invoice: str, dollars: int, rng: random.Random
                ) -> WorkflowHandle[Any, Any]:
    run = f"jepsen-{uuid.uuid4().hex[:10]}"
    request = refund_request(world.client, run, limit_cents=rng.choice([50_000, 200_000]),
                             message=f"Please refund ${dollars:,} on invoice {invoice}")
    return await world.client.start_workflow(RefundAgent.run, request, id=run,
                                             task_queue=world.task_queue)


async def state_of(handle: WorkflowHandle[Any, Any]) -> dict[str, Any]:
    try:
        async with asyncio.timeout(RPC_SECONDS):
            state: dict[str, Any] = await handle.query("state", result_type=dict)
        return state
    except (RPCError, TimeoutError):  # no worker answered in time: the run counts as stuck
        return {"status": "UNKNOWN", "node": "?"}


async def status_of(handle: WorkflowHandle[Any, Any]) -> str | None:
    """The run's status from its search attributes: the server answers, no worker needed
    (a query per poll would keep busy workflows busier)."""
    described = await handle.describe()
    return described.typed_search_attributes.get(search.AGENT_STATUS)


async def settle(handles: list[WorkflowHandle[Any, Any]]) -> None:
    async with asyncio.timeout(SETTLE_SECONDS):
        for handle in handles:
            while await status_of(handle) not in SETTLED:
                await asyncio.sleep(1.0)


async def approver(client: Client, handle: WorkflowHandle[Any, Any], rng: random.Random) -> None:
    """Answers every request the run makes, after a random delay: mostly approve, sometimes
    with a lower amount, sometimes reject."""
    answered: set[int] = set()
    while True:
        await asyncio.sleep(rng.uniform(0.5, 1.5))
        with contextlib.suppress(RPCError):
            if await status_of(handle) != "AWAITING_APPROVAL":
                continue
            info: dict[str, Any] = await handle.query("approvals", result_type=dict)
            pending = info["pending"]
            if not pending or pending["step"] in answered:
                continue
            roll, amount = rng.random(), int(pending["proposal"]["amount_cents"])
            kw: dict[str, Any] = {}
            if roll < 0.15:
                kw["verdict"] = Verdict.REJECT
            elif roll < 0.3 and amount > 1:
                kw["edits"] = {"amount_cents": rng.randint(1, amount)}
            try:
                await handle.execute_update("decide", decision(client, handle.id, pending, **kw),
                                            result_type=dict)
            except WorkflowUpdateRPCTimeoutOrCancelledError:
                continue  # no answer in time (a worker was killed): look again
            except WorkflowUpdateFailedError:
                pass  # refused (the gate moved on, or another answer is in flight)
            answered.add(pending["step"])


async def lock_database(world: World, rng: random.Random, faults: list[str]) -> None:
    span = rng.uniform(0.5, 6.0)  # around the checker worker's 2 s timeout and its give-up
    await asyncio.sleep(rng.uniform(0, 2))
    holder = sqlite3.connect(world.db_path, timeout=30, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        faults.append(f"db locked {span:.1f}s")
        await asyncio.sleep(span)
        holder.execute("ROLLBACK")
    finally:
        holder.close()


async def kill_worker(world: World, rng: random.Random, faults: list[str]) -> None:
    await asyncio.sleep(rng.uniform(0, 3))
    victim = rng.choice(world.workers)
    victim.kill9()
    faults.append("worker SIGKILL")
    try:
        await asyncio.sleep(rng.uniform(0, 1))
    finally:  # even when the trial ends meanwhile: never leave a worker dead
        victim.start()


FAULTS = (lock_database, kill_worker)


async def fault(world: World, kind: Any, rng: random.Random, faults: list[str]) -> None:
    await kind(world, rng, faults)


async def operate(client: Client, handle: WorkflowHandle[Any, Any], rng: random.Random,
                  faults: list[str]) -> None:
    state = await state_of(handle)
    if state.get("status") == "FAILED" and rng.random() < 0.8:
        node = "issue_refund" if state.get("invoice_id") else "reason"
        with contextlib.suppress(Exception):
            await send_retry(client, handle.id, node, "checker")
            why = (state.get("errors") or ["?"])[-1][:90]
            faults.append(f"retry {handle.id} from {node} (failed: {why})")
    elif (state.get("status") == "DONE" and state.get("refund_id") and rng.random() < 0.3
          and await fork_at_payment(client, handle)):
            faults.append(f"fork {handle.id} at issue_refund")


async def fork_at_payment(client: Client, handle: WorkflowHandle[Any, Any]) -> bool:
    """Reset the run to just before it paid: the fork repeats the same approved action."""
    log: list[dict[str, Any]] = await handle.query("transitions", result_type=list)
    entering = [t for t in log if t["target"] == "issue_refund"]
    if not entering:
        return False
    history = await handle.fetch_history()
    completed = task_completed_after(history, entering[-1]["event_id"])
    if completed is None:
        return False
    run_id = (await handle.describe()).run_id
    await client.workflow_service.reset_workflow_execution(ResetWorkflowExecutionRequest(
        namespace=client.namespace,
        workflow_execution=WorkflowExecution(workflow_id=handle.id, run_id=run_id),
        reason="checker: fork at issue_refund", request_id=str(uuid.uuid4()),
        workflow_task_finish_event_id=completed.event_id,
        reset_reapply_exclude_types=[ResetReapplyExcludeType.RESET_REAPPLY_EXCLUDE_TYPE_SIGNAL,
                                     ResetReapplyExcludeType.RESET_REAPPLY_EXCLUDE_TYPE_UPDATE]))
    return True
