"""The approver of a trial's run: signed decisions, as a manager sends them, racing the
trial's faults."""

from __future__ import annotations

import asyncio
import random
from datetime import timedelta
from typing import Any

from gatekit import decision
from temporalio.client import (
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.service import RPCError

from tower.contract.decisions import Verdict
from tower.contract.failures import DecisionRefused, rebuilt

from .bounds import RPC_SECONDS
from .check import status_of
from .store import database_locked
from .world import Notes, World

APPROVER_DELAY = (0.2, 0.8)  # between an approver's looks at its run
LOCKED_APPROVALS = 0.3  # how often an approval comes with the database locked ...
LOCKED_SPAN = (4.5, 7.0)  # ... for longer than the payment's two attempts (worker.py)
RPC_TIMEOUT = timedelta(seconds=RPC_SECONDS)
Handle = WorkflowHandle[Any, Any]


async def approver(world: World, handle: Handle, rng: random.Random, notes: Notes) -> None:
    """Answers every request the run makes, after a random delay: mostly approve, sometimes
    with a lower amount, sometimes reject; now and then with the tools' database locked
    from just before the approval until past the payment's give-up (the run FAILs, and an
    operator retries it)."""
    answered: set[int] = set()
    while True:
        await asyncio.sleep(rng.uniform(*APPROVER_DELAY))
        if await status_of(handle) != "AWAITING_APPROVAL":
            continue
        try:
            info: dict[str, Any] = await handle.query("approvals", result_type=dict,
                                                      rpc_timeout=RPC_TIMEOUT)
        except RPCError:
            continue  # no worker answered in time (one was killed): look again
        pending = info["pending"]
        if not pending or pending["step"] in answered:
            continue
        roll, amount = rng.random(), int(pending["proposal"]["amount_cents"])
        kw: dict[str, Any] = {}
        if roll < 0.15:
            kw["verdict"] = Verdict.REJECT
        elif roll < 0.3 and amount > 1:
            kw["edits"] = {"amount_cents": rng.randint(1, amount)}
        payload = decision(world.client, handle.id, pending, **kw)
        if rng.random() < LOCKED_APPROVALS:
            span = rng.uniform(*LOCKED_SPAN)
            async with database_locked(world) as held:
                if held:
                    notes.faults.append(f"db locked {span:.1f}s from {handle.id}'s approval")
                sent = await send_decision(handle, payload, notes)
                if sent:
                    answered.add(pending["step"])
                if held and sent:  # past the payment's give-up (not when nothing was decided)
                    await asyncio.sleep(span)
        elif await send_decision(handle, payload, notes):
            answered.add(pending["step"])


async def send_decision(handle: Handle, payload: dict[str, Any], notes: Notes) -> bool:
    """True once the run accepted it; False when it refused it (its code noted) or no answer
    came in time (a worker was killed): look again."""
    try:
        await handle.execute_update("decide", payload, result_type=dict,
                                    rpc_timeout=RPC_TIMEOUT)
    except WorkflowUpdateRPCTimeoutOrCancelledError:
        # temporalio raises this for a cancelled task too: stop when asked to (bounds.py)
        if (task := asyncio.current_task()) is not None and task.cancelling():
            raise asyncio.CancelledError from None
        return False
    except WorkflowUpdateFailedError as refused:
        # Refused (already decided, a request that moved on, a flood not judged): look again,
        # as an approver would; a request that still waits is answered anew, never left.
        found = rebuilt(refused)
        code = found.code if isinstance(found, DecisionRefused) else None
        notes.refused.append(code.value if code else f"NO CODE: {refused.cause}"[:200])
        return False
    except RPCError:
        return False
    return True
