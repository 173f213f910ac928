"""The money path's checker in CI: randomized trials (tests/jepsen) against the session's
dev server, two real worker processes and ``issue_refund`` on ``tower.effects`` — on the
tools' SQLite file and on a real PostgreSQL — concurrent refunds on shared invoices, racing
approvals, a locked database, SIGKILLed workers, operator retries and forks, and workers
killed at every point of an effect: not one violation (0 doubles, 0 overdraws), not one run
stuck with nothing pending, not one harness error. The default suite runs a few trials on
SQLite with the kills at an effect too; the soak tier (`pytest -m soak`) 5 and 50 trials on
PostgreSQL, 50 on SQLite and 50 kills at an effect; ``python -m tests.jepsen --trials 500`` is
the long soak (docs/reliability.md)."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path

import pytest
from jepsen.approver import send_decision
from jepsen.kills import POINTS
from jepsen.runner import run_trials, summary, workers
from jepsen.store import refund_count
from jepsen.world import Notes, Outcome, World
from temporalio.client import Client

pytestmark = pytest.mark.long

PARALLEL = int(os.environ.get("JEPSEN_PARALLEL", "25"))
# Fewer in flight when workers die at every effect: two workers restarting all the time
# serve 25 trials too slowly for a run to settle in its budget on a busy machine.
KILLS_PARALLEL = min(PARALLEL, 10)


async def trials_on(client: Client, workdir: Path, trials: int, seed: int, *, pg: str = "",
                    kills: Path | None = None, parallel: int = PARALLEL
                    ) -> tuple[list[Outcome], str, int]:
    """The outcomes, their summary, the refunds made."""
    seed = int(os.environ.get("JEPSEN_SEED", seed))
    address = client.service_client.config.target_host
    async with workers(address, workdir, pg=pg, kills=kills) as (task_queue, db_path, procs):
        world = World(client, db_path, task_queue, procs, evidence=workdir / "evidence",
                      pg=pg, kills=kills)
        outcomes = await run_trials(world, trials, seed, parallel, report=False)
        unhandled = [line for proc in procs for line in proc.unhandled()]
    report = summary(outcomes)
    print(report)
    assert len(outcomes) == trials
    assert not any(o.problems for o in outcomes), report  # no double, no overdraw, ...
    assert not any(o.stuck for o in outcomes), report  # ... no run left with nothing pending
    assert not any(o.harness for o in outcomes), report
    assert unhandled == [], unhandled[:3]
    # Every refusal says why in a code the client reads (tower.contract.failures.Code)
    assert not [c for o in outcomes for c in o.refused if c.startswith("NO CODE")], report
    return outcomes, report, refund_count(world)


# Every step of a trial is bounded (tests/jepsen/bounds.py) and a trial past its budget is
# reported: this timeout is only the last resort.
@pytest.mark.timeout(1500)
# (Seeds whose trials meet every kind of fault and operator action, with room to spare.)
# The default tier's random trials are the kills test's, below, on SQLite: the same faults and
# operators, with workers killed at the effect on top. PostgreSQL's effects are checked there
# by test_tools_postgres.py; its random trials, stress, are the soak tier's.
@pytest.mark.parametrize(("store", "trials", "seed"), [
    pytest.param("postgres", 5, 1, marks=pytest.mark.soak),
    pytest.param("sqlite", 50, 13, marks=pytest.mark.soak),
    pytest.param("postgres", 50, 13, marks=pytest.mark.soak)])
async def test_random_trials_keep_every_invariant(client: Client, tmp_path: Path, store: str,
                                                  trials: int, seed: int,
                                                  request: pytest.FixtureRequest) -> None:
    # A database of its own on the test process's PostgreSQL (tests/storekit.py).
    pg = request.getfixturevalue("pg_server").database("jepsen") if store == "postgres" else ""
    outcomes, report, paid = await trials_on(client, tmp_path, trials, seed, pg=pg)
    met_trouble(outcomes, report, paid)


def met_trouble(outcomes: list[Outcome], report: str, paid: int) -> None:
    """The trials did meet trouble: every kind of fault and operator action, and runs paid."""
    kinds = {f.split(" ")[0] for o in outcomes for f in o.faults}
    # An operator's retry needs a run that FAILED (a lock held past the payment's give-up),
    # which timing decides: the default tier's few trials meet one most times, 50 (the soak
    # tier) always.
    met = {"db", "worker", "retry", "fork"} if len(outcomes) >= 50 else {"db", "worker", "fork"}
    assert met <= kinds and paid > len(outcomes) // 2, report


@pytest.mark.timeout(1500)
@pytest.mark.parametrize(("trials", "seed", "kills"), [
    (6, 3, 6), pytest.param(40, 21, 50, marks=pytest.mark.soak)])
async def test_workers_killed_at_every_point_of_an_effect_leave_no_run_stuck(
        client: Client, tmp_path: Path, trials: int, seed: int, kills: int) -> None:
    """Workers SIGKILLed at each point of ``issue_refund``'s effect (tests/jepsen/kills.py:
    before the claim, holding the lock, after the write, before the commit, before Temporal
    records the result), on top of the trials' other faults (on SQLite: the default tier's
    random trials there)."""
    outcomes, report, paid = await trials_on(client, tmp_path, trials, seed,
                                             kills=tmp_path / "kills", parallel=KILLS_PARALLEL)
    fired = [f.split(" ")[-1] for o in outcomes for f in o.faults if f.startswith("effect-kill")]
    assert len(fired) >= kills and set(fired) == set(POINTS), (fired, report)
    met_trouble(outcomes, report, paid)


async def test_a_cancelled_approver_stops_while_its_decision_waits(client: Client) -> None:
    """The hang the checker once had: temporalio turns the CancelledError of a task waiting
    in an update into WorkflowUpdateRPCTimeoutOrCancelledError, which the approver took for
    "no answer yet, look again" — so a trial's end waited forever for its approvers."""
    handle = await client.start_workflow("refund", id=f"deaf-{uuid.uuid4().hex[:8]}",
                                         task_queue=f"nobody-{uuid.uuid4().hex[:8]}")
    try:
        waiting = asyncio.create_task(send_decision(handle, {"token": "x"}, Notes()))
        done, _ = await asyncio.wait({waiting}, timeout=1.0)
        assert not done  # no worker: the update waits for an answer
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(waiting, timeout=10)
    finally:
        await handle.terminate("test over")
