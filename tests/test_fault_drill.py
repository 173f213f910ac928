"""The fault drill: 20 order runs (50 in the soak tier) on a real worker process under 30 %
injected model faults (errors, rate limits, malformed and slow answers from the loopback
model). Every run ends DONE or FAILED with a reason, the business outcomes are exact, and
every side effect happened exactly once (rows counted in the tools' SQLite).

Its own module so that pytest-xdist can run it beside the kill tests of
test_faults_process.py: each takes about a minute, mostly waiting."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest
from procs import WorkerProcess
from temporalio.testing import WorkflowEnvironment
from test_faults_process import TEXT, address_of, count, start_order
from workerkit import final_state

from tower.cli.agents import scripted_reply
from tower.testing.model_server import LoopbackModelServer
from workflows.order import OrderRequest, OrderState

pytestmark = pytest.mark.long


# 20 runs by default; the figure, 50, in the soak tier.
@pytest.mark.parametrize("runs", [20, pytest.param(50, marks=pytest.mark.soak)])
async def test_runs_under_thirty_percent_model_faults(
    env: WorkflowEnvironment, task_queue: str, db_path: Path, tmp_path: Path, runs: int,
) -> None:
    requests = []
    for i in range(runs):
        if i % 10 == 3:
            requests.append(OrderRequest(text=TEXT, card="tok_declined"))
        elif i % 10 == 7:
            requests.append(OrderRequest(text="1 x GIZMO-3 to 2 Elm Rd, Austin, US"))
        else:
            requests.append(OrderRequest(text=TEXT))
    with LoopbackModelServer(replies=scripted_reply, fault_rate=0.3, seed=4,
                             slow_seconds=4) as model_server:
        worker = WorkerProcess(address_of(env), task_queue, db_path, model_server.base_url,
                               tmp_path / "worker.log", timeout=2).start()
        try:
            handles = [await start_order(env.client, task_queue, r) for r in requests]
            results = await asyncio.wait_for(
                asyncio.gather(*[final_state(h, OrderState) for h in handles]), timeout=300)
        finally:
            worker.stop()
        outcomes = Counter(model_server.outcomes())
    statuses = Counter(r.status.value for r in results)
    failed = [r for r in results if r.status == "FAILED"]
    served = sum(outcomes.values())
    faults = served - outcomes["ok"]
    print(f"\nfault drill: {len(results)} runs, {served} model requests, {faults} faults "
          f"injected ({faults / served:.0%}: {dict(outcomes)}), {statuses['DONE']} DONE, "
          f"{len(failed)} FAILED with a reason: {Counter(r.errors[-1] for r in failed)}")
    assert set(statuses) <= {"DONE", "FAILED"} and len(results) == runs
    assert 0.2 <= faults / served <= 0.4
    assert all(r.errors for r in failed)
    # The business outcomes are exact despite the faults: a tenth declined, a tenth out of
    # stock, the rest shipped.
    tenth = runs // 10
    assert Counter(r.outcome for r in failed) == {"payment_declined": tenth,
                                                   "out_of_stock": tenth}
    shipped = statuses["DONE"]
    assert shipped == runs - 2 * tenth
    # Exactly once: one row per run for each effect, no key twice.
    assert count(db_path, "SELECT COUNT(*) FROM shipments") == shipped
    assert count(db_path, "SELECT COUNT(*) FROM charges WHERE status='paid'") == shipped
    assert count(db_path, "SELECT COUNT(*) FROM charges WHERE status='declined'") == tenth
    assert count(db_path, "SELECT COUNT(*) FROM reservations") == shipped + tenth
    assert count(db_path, "SELECT stock FROM products WHERE sku='WIDGET-1'") == 5000 - 2 * shipped
    assert worker.unhandled() == []
