"""The money path's checker in CI: randomized trials (tests/jepsen) against the session's
dev server, two real worker processes and one real SQLite store — concurrent refunds on
shared invoices, racing approvals, a locked database, SIGKILLed workers, operator retries
and forks — and not one violation, not one harness error. 12 trials in the default suite,
50 in the soak tier (`pytest -m soak`); ``python -m tests.jepsen --trials 500`` is the long
soak (docs/reliability.md)."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import uuid
from pathlib import Path

import pytest
from jepsen.approver import send_decision
from jepsen.runner import run_trials, summary, workers
from jepsen.world import World
from temporalio.client import Client

pytestmark = pytest.mark.long

PARALLEL = int(os.environ.get("JEPSEN_PARALLEL", "25"))


# Every step of a trial is bounded (tests/jepsen/bounds.py) and a trial past its budget is
# reported: this timeout is only the last resort.
@pytest.mark.timeout(1500)
# (Seeds whose trials meet every kind of fault and operator action, with room to spare.)
@pytest.mark.parametrize(("trials", "seed"),
                         [(12, 1), pytest.param(50, 13, marks=pytest.mark.soak)])
async def test_random_trials_keep_every_invariant(client: Client, tmp_path: Path,
                                                  trials: int, seed: int) -> None:
    seed = int(os.environ.get("JEPSEN_SEED", seed))
    address = client.service_client.config.target_host
    async with workers(address, tmp_path) as (task_queue, db_path, procs):
        world = World(client, db_path, task_queue, procs, evidence=tmp_path / "evidence")
        outcomes = await run_trials(world, trials, seed, PARALLEL, report=False)
        unhandled = [line for proc in procs for line in proc.unhandled()]
    with sqlite3.connect(db_path) as db:
        paid = db.execute("SELECT COUNT(*) FROM refunds").fetchone()[0]
    report = summary(outcomes)
    print(report)
    assert len(outcomes) == trials
    assert not any(o.problems for o in outcomes), report
    assert not any(o.harness for o in outcomes), report
    # The trials did meet trouble: every kind of fault and operator action, and runs paid.
    kinds = {f.split(" ")[0] for o in outcomes for f in o.faults}
    assert {"db", "worker", "retry", "fork"} <= kinds and paid > trials // 2, report
    assert unhandled == [], unhandled[:3]


async def test_a_cancelled_approver_stops_while_its_decision_waits(client: Client) -> None:
    """The hang the checker once had: temporalio turns the CancelledError of a task waiting
    in an update into WorkflowUpdateRPCTimeoutOrCancelledError, which the approver took for
    "no answer yet, look again" — so a trial's end waited forever for its approvers."""
    handle = await client.start_workflow("refund", id=f"deaf-{uuid.uuid4().hex[:8]}",
                                         task_queue=f"nobody-{uuid.uuid4().hex[:8]}")
    try:
        waiting = asyncio.create_task(send_decision(handle, {"token": "x"}))
        done, _ = await asyncio.wait({waiting}, timeout=1.0)
        assert not done  # no worker: the update waits for an answer
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(waiting, timeout=10)
    finally:
        await handle.terminate("test over")
