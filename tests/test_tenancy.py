"""Tenants are namespaces: the CLI and the client helpers act within one tenant, and
nothing done as tenant A can read, signal or approve a run of tenant B."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import TENANTS
from gatekit import refunds
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment
from towercli import example_project, tower_cli

from tower.activities.model import ModelSettings
from tower.client.connection import UnknownTenant, connect, use_tenant
from tower.temporal.payloads import tower_data_converter
from worker import build_worker

A, B = TENANTS


async def tower(env: WorkflowEnvironment, cwd: Path, *args: str) -> tuple[int, str, str]:
    environ = {k: v for k, v in os.environ.items()
               if not k.startswith(("OPENAI_", "TEMPORAL_", "TOWER_"))}
    environ.update({"TEMPORAL_ADDRESS": env.client.service_client.config.target_host,
                    "TOWER_CONFIG_DIR": os.environ["TOWER_CONFIG_DIR"],
                    "TOWER_TRUST_DIR": os.environ["TOWER_TRUST_DIR"],
                    "TOWER_TASK_QUEUES": os.environ.get("TOWER_TASK_QUEUES", "")})
    return await tower_cli(list(args), env=environ, cwd=example_project(cwd), timeout=90)


def tenant_client(env: WorkflowEnvironment, tenant: str) -> Client:
    return Client(env.client.service_client, namespace=tenant,
                  data_converter=tower_data_converter())


async def test_another_tenant_cannot_read_signal_or_approve(
    env: WorkflowEnvironment, task_queue: str, db_path: Path, tmp_path: Path
) -> None:
    run = f"refund-{task_queue}"
    request = '{"message": "Please refund $1,200 on invoice INV-2004"}'
    b_client = tenant_client(env, B)
    async with build_worker(b_client, task_queue=task_queue, db_path=db_path,
                            models=ModelSettings()):
        code, out, err = await tower(env, tmp_path, "--tenant", B, "run", "refund", "--input",
                                     request, "--id", run, "--task-queue", task_queue)
        assert code == 0 and "status: AWAITING_APPROVAL" in out, err
        assert f"/namespaces/{B}/workflows/{run}" in out

        # Tenant A, through the CLI: the run does not exist for it.
        code, _, err = await tower(env, tmp_path, "--tenant", A, "state", run)
        assert code == 2 and f"run {run!r} not found" in err
        code, out, err = await tower(env, tmp_path, "approve", "--yes", run, "--by", "alice",
                                     "--tenant", A)
        assert code != 0 and "not found" in err, (out, err)
        code, out, _ = await tower(env, tmp_path, "--tenant", A, "pending")
        assert code == 0 and run not in out
        # Tenant A, through the client API: no read, no signal, no update, no listing.
        a_handle = tenant_client(env, A).get_workflow_handle(run)
        for attempt in (a_handle.describe(), a_handle.query("state"),
                        a_handle.signal("decision", {"decision": "approve"}),
                        a_handle.fetch_history()):
            with pytest.raises(RPCError) as caught:
                await attempt
            assert caught.value.status == RPCStatusCode.NOT_FOUND
        listed = [w.id async for w in tenant_client(env, A).list_workflows(f"WorkflowId='{run}'")]
        assert listed == []

        # Nothing changed for tenant B, who can see and approve its own run.
        state = await b_client.get_workflow_handle(run).query("state", result_type=dict)
        assert state["status"] == "AWAITING_APPROVAL"
        code, out, _ = await tower(env, tmp_path, "--tenant", B, "pending")
        assert code == 0 and run in out
        code, out, err = await tower(env, tmp_path, "approve", "--yes", run, "--by", "alice",
                                     "--tenant", B)
        assert code == 0 and "status: DONE" in out, (out, err)
    assert refunds(db_path) == [("INV-2004", 120000)]


async def test_unknown_or_malformed_tenant_is_a_clear_error(
    env: WorkflowEnvironment, tmp_path: Path
) -> None:
    code, _, err = await tower(env, tmp_path, "--tenant", "nobody", "list")
    assert code == 2 and "tenant (namespace) 'nobody' does not exist" in err
    assert "tower setup --tenant nobody" in err and "tower dev --tenant nobody" in err
    code, _, err = await tower(env, tmp_path, "--tenant", "bad name!", "list")
    assert code == 2 and "invalid tenant name 'bad name!'" in err


async def test_client_helper_acts_within_the_chosen_tenant(
    env: WorkflowEnvironment, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEMPORAL_ADDRESS", env.client.service_client.config.target_host)
    monkeypatch.delenv("TEMPORAL_NAMESPACE", raising=False)
    try:
        use_tenant(A)
        assert (await connect()).namespace == A
        use_tenant("nobody")
        with pytest.raises(UnknownTenant):
            await connect()
    finally:
        use_tenant(None)
    assert (await connect()).namespace == "default"
    monkeypatch.setenv("TEMPORAL_NAMESPACE", B)
    assert (await connect()).namespace == B
