"""Changing an agent safely (docs/versioning.md: ``workflow.patched``, then
``workflow.deprecate_patch``, then the call removed) and catching a non-deterministic one."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from replay_variants import (
    PATCH,
    AccountV2,
    AccountV2Deprecated,
    AccountV2Final,
    AccountV2Unpatched,
    SetOrderAgent,
)
from replaykit import replay
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker
from test_cli import TOWER, address_of, cli_env
from workerkit import activities

from tower.activities.messages import MessageStore
from tower.activities.model import ModelActivities, ModelSettings
from tower.temporal import TowerPlugin
from tower.temporal._start import scripts_of
from tower.temporal.replay import load
from tower.testing import assert_replays
from workflows.account import AccountRequest
from workflows.registry import AGENTS

HISTORIES = Path(__file__).parent / "histories"
REACHES_ANSWER = HISTORIES / "account-1.json"  # v1 run: reason -> lookup -> reason -> DONE
BUDGET_FAILS = HISTORIES / "account-2.json"  # v1 run that never reaches the answer


def variant_worker(client: Client, task_queue: str, db_path: Path, workflows: list[type]
                   ) -> Worker:
    """Like worker.build_worker, hosting ``workflows`` in place of the registered agents."""
    model = ModelActivities(ModelSettings(), MessageStore(db_path.with_name("messages.sqlite")),
                            scripts=scripts_of(AGENTS.values()))
    return Worker(client, task_queue=task_queue, workflows=workflows,
                  activities=[model.call_model, *activities(workflows, db_path=db_path)],
                  activity_executor=ThreadPoolExecutor(8), plugins=[TowerPlugin()])


async def test_old_histories_replay_with_the_patch_and_fail_without_it() -> None:
    await assert_replays(REACHES_ANSWER, BUDGET_FAILS, workflows=[AccountV2])
    unpatched = {r.workflow_id: r for r in
                 await replay(load([REACHES_ANSWER, BUDGET_FAILS]), workflows=[AccountV2Unpatched])}
    broken = unpatched["account-1"]
    assert broken.failure == (  # the user's change, in the agent's terms
        "replay of run account-1 diverged at step 4 (node verify): the code now schedules an "
        "activity where the history has the move to node DONE (step 4), event 24")
    # A run that never reaches the changed part of the graph is not affected.
    assert unpatched["account-2"].ok, unpatched["account-2"]
    with pytest.raises(AssertionError) as failed:  # the test helper says it as tower replay
        await assert_replays(REACHES_ANSWER, BUDGET_FAILS, workflows=[AccountV2Unpatched])
    assert f"(id account-1): 4 steps, at verify\n      {broken.failure}" in str(failed.value)
    assert "account-2" not in str(failed.value)


async def test_new_runs_take_the_new_graph_and_cannot_be_rolled_back(
    client: Client, task_queue: str, db_path: Path,
) -> None:
    async with variant_worker(client, task_queue, db_path, [AccountV2]):
        handle = await client.start_workflow(
            AccountV2.run, AccountRequest(question="Check my account ACC-1001"),
            id=f"account-{uuid.uuid4().hex[:8]}", task_queue=task_queue)
        state = await handle.result()
    assert state.status == "DONE" and "verified: ACC-1001 is active" in state.messages[-1].content
    history = await handle.fetch_history()
    markers = [e for e in history.events if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED]
    assert len(markers) == 1 and PATCH.encode() in markers[0].SerializeToString()
    (new,) = await assert_replays_history(history, [AccountV2])
    assert [t.target for t in new.log][-2:] == ["verify", "DONE"]
    # Rolling back to v1 (the registered account agent) breaks the runs v2 started.
    (rolled_back,) = await replay([("v2 run", history)])
    assert rolled_back.failure is not None


async def test_a_patch_is_deprecated_then_removed_as_the_runs_that_need_it_close(
    client: Client, task_queue: str, db_path: Path,
) -> None:
    """Each step of a change replays exactly the runs that may be open when it deploys:
    ``deprecate_patch`` the runs recorded under ``patched`` (not v1 runs: it waits until
    none is open); the call removed, the runs recorded under ``deprecate_patch`` (not those
    recorded under ``patched``, whose marker is not deprecated: it waits for them too)."""
    recorded = {}
    for code in (AccountV2, AccountV2Deprecated):
        async with variant_worker(client, task_queue, db_path, [code]):
            handle = await client.start_workflow(
                code.run, AccountRequest(question="Check my account ACC-1001"),
                id=f"account-{uuid.uuid4().hex[:8]}", task_queue=task_queue)
            state = await handle.result()
        assert "verified: ACC-1001 is active" in state.messages[-1].content  # v2 either way
        recorded[code] = await handle.fetch_history()
    patched, deprecated = recorded[AccountV2], recorded[AccountV2Deprecated]

    async def replays(history: Any, code: type) -> str | None:
        (result,) = await replay([("run", history)], workflows=[code])
        return result.failure

    # Step two: the runs step one started replay, and its own; a v1 run would not.
    assert await replays(patched, AccountV2Deprecated) is None
    assert await replays(deprecated, AccountV2Deprecated) is None
    (v1,) = await replay(load([REACHES_ANSWER]), workflows=[AccountV2Deprecated])
    assert v1.failure and "diverged at step 4 (node verify)" in v1.failure
    # Step three: the runs step two started replay; one step one started would not.
    assert await replays(deprecated, AccountV2Final) is None
    broken = await replays(patched, AccountV2Final)
    assert broken and "Non-deprecated patch marker" in broken and PATCH in broken, broken
    # Rolling step two back to step one is safe: its runs took the v2 path too.
    assert await replays(deprecated, AccountV2) is None


async def assert_replays_history(history, workflows):
    results = await replay([("v2 run", history)], workflows=workflows)
    assert all(r.ok for r in results), results
    return results


def set_order(seed: int) -> str:
    out = subprocess.run(
        [sys.executable, "-c", "print(list({'lookup_account', 'lookup_invoice'}))"],
        env={**os.environ, "PYTHONHASHSEED": str(seed)}, capture_output=True, text=True)
    return out.stdout.strip()


async def test_replay_in_another_process_catches_set_iteration_order(
    env: WorkflowEnvironment, client: Client, task_queue: str, db_path: Path, tmp_path: Path,
) -> None:
    run = f"set-order-{uuid.uuid4().hex[:6]}"
    async with variant_worker(client, task_queue, db_path, [SetOrderAgent]):
        handle = await client.start_workflow(
            SetOrderAgent.run, AccountRequest(question="both"), id=run, task_queue=task_queue)
        await handle.result()
    file = tmp_path / f"{run}.json"
    file.write_text((await handle.fetch_history()).to_json())
    here = str(list({"lookup_account", "lookup_invoice"}))
    same = next(s for s in range(100) if set_order(s) == here)
    other = next(s for s in range(100) if set_order(s) != here)

    async def tower_replay(seed: int) -> tuple[int, str]:
        env_vars = {**cli_env(address_of(env)), "PYTHONHASHSEED": str(seed),
                    "PYTHONPATH": str(Path(__file__).parent)}
        proc = await asyncio.create_subprocess_exec(
            TOWER, "replay", "--workflows", "replay_variants:SetOrderAgent", str(file),
            env=env_vars, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        out, _ = await asyncio.wait_for(proc.communicate(), 120)
        return proc.returncode or 0, out.decode()

    code, out = await tower_replay(same)
    assert code == 0 and "1 ok, 0 failed" in out, out
    code, out = await tower_replay(other)
    assert code == 1, out
    assert f"FAIL  {file}  workflow set-order (id {run})" in out
    assert "diverged at step 1 (node lookup): the code now calls activity lookup_" in out, out
    assert "where the history has activity lookup_" in out and "TMPRL" not in out, out
    assert "1 ok" not in out and "0 ok, 1 failed" in out
