"""One randomized trial: refund runs racing on one invoice, approvers, faults, operators.

Every wait is bounded (bounds.py): what the harness cannot finish in time is a harness
error on the trial's outcome, and the database-only rules (never more refunded than the
invoice, each request paid at most once) are checked even then.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from gatekit import refund_request
from temporalio.client import Client, WorkflowHandle

from tower.cli.common import CliError
from workflows.refund import RefundAgent

from . import kills, operators
from .approver import approver
from .bounds import DB_SECONDS, RPC_SECONDS, HarnessStuck, persist, stop_all
from .check import SETTLED, RunView, check, status_of, view
from .faults import fault
from .histories import replay_problems
from .store import insert_invoice
from .stuck import nothing_pending, why_stuck
from .world import Notes, Outcome, World

SETTLE_SECONDS = 240.0  # a run not DONE or FAILED by then is stuck (CI machines are busy)
# Between looks at whether the runs settled (each look describes every run of the trial: with
# the approvers' looks, most of what the trials cost the server).
POLL_SECONDS = 1.0
# Asking again while workers restart (a workflow task times out in 10 s) and while two busy
# workers replay closed runs to answer queries (a CI machine at load 12 took over a minute).
QUERY_SECONDS = 180.0
REPLAY_SECONDS = 300.0  # fetching and replaying every history of a trial's runs
RPC_TIMEOUT = timedelta(seconds=RPC_SECONDS)
LIMITS = (50_000, 200_000)  # a run's own refund limit: the tenant's cap, or lower
Handle = WorkflowHandle[Any, Any]


async def trial(world: World, number: int, rng: random.Random, notes: Notes) -> Outcome:
    invoice, total = f"INV-{3000 + number:04d}", rng.randint(5, 40) * 10_000
    count, handles, chaos = rng.randint(2, 4), list[Handle](), list[asyncio.Task[None]]()
    views: list[RunView] = []
    try:
        await notes.step("inserting the invoice", DB_SECONDS,
                         insert_invoice(world, invoice, total))
        for _ in range(count):
            dollars = rng.randint(100, total // 100)
            handles.append(await notes.step("starting a refund run", RPC_SECONDS,
                                            start(world, invoice, dollars, rng)))
            notes.runs.append(handles[-1].id)
        chaos = [asyncio.create_task(approver(world, h, random.Random(rng.random()), notes),
                                     name=f"approver of {h.id}") for h in handles]
        chaos += [asyncio.create_task(fault(world, random.Random(rng.random()), notes),
                                      name=f"fault {n}") for n in range(rng.randint(0, 2))]
        if world.kills is not None:  # (its own draws: the other trials' seeds stay as they are)
            points = kills.arm(world, number, invoice, random.Random(rng.random()))
            chaos.append(asyncio.create_task(kills.restart_killed(world, invoice, points, notes),
                                             name="kills at the effect"))
        views = await play(world, handles, rng, notes, must_fork=number % 2 == 0)
    except HarnessStuck as stuck:
        notes.harness.append(str(stuck))
    except Exception as exc:  # the harness's own failure: named, never a pass
        notes.harness.append(f"{notes.doing}: {type(exc).__name__}: {exc}")
    finally:
        notes.harness += await stop_all("trial task", chaos)
    seen = {v.workflow_id for v in views}
    views += [RunView(h.id, None) for h in handles if h.id not in seen]
    problems = await notes.step("reading the refunds", DB_SECONDS,
                                asyncio.to_thread(check, world.pg or world.db_path, invoice,
                                                  total, views))
    try:  # every history the runs wrote replays against the code (cached or not)
        unreplayable, lost = await notes.step(
            "replaying the runs' histories", REPLAY_SECONDS,
            replay_problems(world.client, [h.id for h in handles]))
        problems += unreplayable
        notes.harness += lost
    except HarnessStuck as stuck:
        notes.harness.append(str(stuck))
    return Outcome(number, invoice, count, notes.faults, problems, notes.harness,
                   stuck=[v.workflow_id for v in views if v.idle], refused=notes.refused)


async def play(world: World, handles: list[Handle], rng: random.Random, notes: Notes,
               must_fork: bool) -> list[RunView]:
    """Settle the runs, let operators act, settle again, read what every run says. Every
    other trial forks at least one DONE run: chance alone left a few trials with none."""
    client = world.client
    if await settle(handles, notes):
        forked = False
        for handle in handles:
            fork_chance = 1.0 if must_fork and not forked else 0.3
            forked = await operate(client, handle, rng, notes, fork_chance) or forked
        await settle(handles, notes)
    logs = [w.log_path for w in world.workers]
    return [await read(client, handle, notes, logs) for handle in handles]


async def read(client: Client, handle: Handle, notes: Notes, logs: list[Path]) -> RunView:
    if await status_of(handle) not in SETTLED:  # stuck: the checker reports what it says
        notes.doing = f"describing {handle.id}, which did not settle"
        return RunView(handle.id, await state_of(handle),
                       why_stuck=await why_stuck(client, handle.id, logs),
                       idle=await nothing_pending(client, handle.id))
    notes.doing = f"reading {handle.id}'s state and history"
    return await persist(notes.doing, QUERY_SECONDS, lambda: view(client, handle.id))


async def start(world: World, invoice: str, dollars: int, rng: random.Random) -> Handle:
    run = f"jepsen-{uuid.uuid4().hex[:10]}"
    request = refund_request(world.client, run, limit_cents=rng.choice(LIMITS),
                             message=f"Please refund ${dollars:,} on invoice {invoice}")
    return await world.client.start_workflow(RefundAgent.run, request, id=run,
                                             task_queue=world.task_queue,
                                             rpc_timeout=RPC_TIMEOUT)


async def query_state(handle: Handle) -> dict[str, Any]:
    state: dict[str, Any] = await handle.query("state", result_type=dict,
                                               rpc_timeout=RPC_TIMEOUT)
    return state


async def state_of(handle: Handle) -> dict[str, Any]:
    try:
        return await persist(f"querying {handle.id}", QUERY_SECONDS,
                             lambda: query_state(handle))
    except HarnessStuck:  # no worker answered in time: the run counts as stuck
        return {"status": "UNKNOWN", "node": "?"}


async def if_failed(handle: Handle, action: Callable[[], Awaitable[None]]) -> None:
    """An operator's action on a FAILED run, safe to repeat: an action whose answer was
    lost (its worker was killed) may have taken effect — then the run is FAILED no more."""
    if (await query_state(handle)).get("status") != "FAILED":
        return
    try:
        await action()
    except CliError:  # refused: fine if an earlier attempt took the run out of FAILED
        if (await query_state(handle)).get("status") == "FAILED":
            raise


async def settle(handles: list[Handle], notes: Notes) -> bool:
    """True once every run is DONE or FAILED; False when one is not by SETTLE_SECONDS."""
    async def all_settled() -> None:
        while not all(s in SETTLED for s in await asyncio.gather(*map(status_of, handles))):
            await asyncio.sleep(POLL_SECONDS)
    try:
        await notes.step("waiting for the runs to settle", SETTLE_SECONDS, all_settled())
    except HarnessStuck:
        return False
    return True


async def operate(client: Client, handle: Handle, rng: random.Random, notes: Notes,
                  fork_chance: float) -> bool:
    """An operator retries most FAILED runs and forks some DONE ones back to the payment;
    True if it forked."""
    status = await status_of(handle)  # the server answers: no query for runs left alone
    if not (status == "FAILED" and rng.random() < 0.8
            or status == "DONE" and rng.random() < fork_chance):
        return False
    notes.doing = f"querying {handle.id}"
    state = await persist(notes.doing, QUERY_SECONDS, lambda: query_state(handle))
    if state.get("status") == "FAILED":
        node = operators.retry_node(state)
        notes.doing = f"retrying {handle.id} from {node}"
        await persist(notes.doing, QUERY_SECONDS,
                      lambda: if_failed(handle, lambda: operators.retry(client, handle.id, node)))
        why = (state.get("errors") or ["?"])[-1][:90]
        notes.faults.append(f"retry {handle.id} from {node} (failed: {why})")
    elif state.get("status") == "DONE" and state.get("refund_id"):
        notes.doing = f"forking {handle.id} at issue_refund"
        request_id = str(uuid.uuid4())  # the same on a repeat: the server makes one fork
        if await persist(notes.doing, QUERY_SECONDS,
                         lambda: operators.fork_at_payment(client, handle, request_id)):
            notes.faults.append(f"fork {handle.id} at issue_refund")
            return True
    return False

