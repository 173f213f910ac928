"""`tower run`, `tower pending`, `tower approve` and `tower reject` as a user runs them."""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path

from conftest import WorkerFactory
from gatekit import make_shop, refunds, schema, wait_pending
from temporalio.testing import WorkflowEnvironment
from towercli import tower_cli

SECRET = "cli-test-secret"


async def tower(env: WorkflowEnvironment, cwd: Path, *args: str,
                **extra: str) -> tuple[int, str, str]:
    environ = {k: v for k, v in os.environ.items()
               if not k.startswith(("OPENAI_", "TEMPORAL_", "TOWER_"))}
    environ.update({"TEMPORAL_ADDRESS": env.client.service_client.config.target_host,
                    "TOWER_APPROVAL_SECRET": SECRET, **extra})
    return await tower_cli(list(args), env=environ, cwd=cwd, timeout=90)


async def test_refund_paused_listed_refused_then_approved_from_the_cli(
    env: WorkflowEnvironment, task_queue: str, db_path: Path, tmp_path: Path,
    scripted_worker: WorkerFactory,
) -> None:
    run = f"refund-cli-{task_queue}"
    request = '{"message": "Please refund $1,200 on invoice INV-2004"}'
    async with scripted_worker():
        code, out, err = await tower(env, tmp_path, "run", "refund", "--input", request,
                                     "--id", run, "--task-queue", task_queue)
        assert code == 0, err
        assert "status: AWAITING_APPROVAL" in out
        assert "waiting at gate refund_review (before issue_refund) for role manager" in out
        assert f"decide with: tower approve {run} --by NAME --role manager" in out

        code, out, _ = await tower(env, tmp_path, "pending")
        row = next(line for line in out.splitlines() if line.startswith(run))
        assert code == 0 and "refund_review (before issue_refund)" in row and "manager" in row
        assert "amount=$1,200.00" in row and " amount_cents " in row

        # A clerk may not approve; the run says why and nothing changes.
        code, out, _ = await tower(env, tmp_path, "approve", run, "--by", "carol", "--role",
                                   "clerk")
        assert code == 1
        assert "refused: role 'clerk' may not decide gate 'refund_review'" in out
        # A wrong secret cannot sign for this tenant.
        code, out, _ = await tower(env, tmp_path, "approve", run, "--by", "eve", "--role",
                                   "manager", TOWER_APPROVAL_SECRET="guess")
        assert code == 1 and "refused: invalid signature" in out

        code, out, err = await tower(env, tmp_path, "approve", run, "--by", "alice", "--role",
                                     "manager", "--set", "amount_cents=100000",
                                     "--note", "partial refund", "--decision-id", "d-cli-1")
        assert code == 0, err
        assert "signed with TOWER_APPROVAL_SECRET" in out
        assert "outcome: gate refund_review approved" in out
        assert re.search(r"issue_refund → confirm", out) and "status: DONE" in out
        assert "Your refund of $1,000.00 has been issued" in out

        code, out, err = await tower(env, tmp_path, "approve", run, "--by", "alice", "--role",
                                     "manager", "--decision-id", "d-cli-1")
        assert code == 2 and "is closed (COMPLETED)" in err, (out, err)
        assert "gate refund_review, was approved by alice" in err
    assert refunds(db_path) == [("INV-2004", 100000)]


async def test_migration_rejected_from_the_cli_changes_nothing(
    env: WorkflowEnvironment, task_queue: str, db_path: Path, tmp_path: Path,
    scripted_worker: WorkerFactory,
) -> None:
    shop = make_shop(db_path)
    before = schema(shop)
    run = f"migration-cli-{task_queue}"
    request = '{"database": "shop", "script": "DROP TABLE legacy_notes;"}'
    async with scripted_worker():
        code, out, err = await tower(env, tmp_path, "run", "migration", "--input", request,
                                     "--id", run, "--task-queue", task_queue)
        assert code == 0 and "gate dba_review" in out, err
        # Without a role the command says which one the gate needs.
        code, _, err = await tower(env, tmp_path, "reject", run, "--by", "dana")
        assert code == 2 and "gate 'dba_review' needs role 'dba'" in err
        # A signal from the wrong role is refused by the run and kept in its audit trail.
        code, out, err = await tower(env, tmp_path, "approve", run, "--by", "eve", "--role",
                                     "intern", "--signal")
        assert code == 0 and "sent as a signal" in out, err
        handle = env.client.get_workflow_handle(run)
        async with asyncio.timeout(30):
            while not (await handle.query("approvals", result_type=dict))["refused"]:
                await asyncio.sleep(0.1)
        code, out, err = await tower(env, tmp_path, "reject", run, "--by", "dana", "--role",
                                     "dba", "--note", "notes are still read by billing")
        assert code == 0, err
        assert "outcome: gate dba_review rejected" in out and "status: DONE" in out
    assert schema(shop) == before


async def test_unsigned_only_when_the_deployment_allows_it(
    env: WorkflowEnvironment, task_queue: str, db_path: Path, tmp_path: Path,
    scripted_worker: WorkerFactory,
) -> None:
    run = f"refund-unsigned-{task_queue}"
    request = '{"message": "Please refund $900 on invoice INV-2004"}'
    code, _, err = await tower(env, tmp_path, "run", "refund", "--input", request, "--id", run,
                               "--task-queue", task_queue, "--no-follow",
                               TOWER_APPROVAL_SECRET="")
    assert code == 2 and "no approval secret for tenant 'default'" in err
    async with scripted_worker():
        code, out, err = await tower(env, tmp_path, "run", "refund", "--input", request,
                                     "--id", run, "--task-queue", task_queue,
                                     TOWER_APPROVAL_SECRET="", TOWER_ALLOW_UNSIGNED="1")
        assert code == 0 and "AWAITING_APPROVAL" in out, err
        await wait_pending(env.client.get_workflow_handle(run))
        code, out, err = await tower(env, tmp_path, "approve", run, "--by", "dev", "--role",
                                     "manager", TOWER_APPROVAL_SECRET="",
                                     TOWER_ALLOW_UNSIGNED="1")
        assert code == 0, err
        assert "UNSIGNED (TOWER_ALLOW_UNSIGNED=1" in out and "status: DONE" in out
        assert "UNSIGNED" in out.split("outcome:")[0]
    assert refunds(db_path) == [("INV-2004", 90000)]
