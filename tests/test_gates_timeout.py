"""A gate's 48-hour timeout, on a dev server that skips time (offline: no download)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from gatekit import new_id, refund_request, refunds, wait_pending
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from tower.activities.model import ModelSettings
from tower.cli.devserver import temporal_binary
from tower.cli.trust_files import dev_trust
from tower.contract import search
from tower.core.engine import Transition
from worker import build_worker
from workflows.refund import RefundAgent

# The tenant of this test: its policy reloads the roster daily, not hourly (the default),
# so skipping 48 hours is 2 refreshes, not 48 timers a second each.
TENANT = "long-wait"


@pytest.fixture(scope="module")
async def skipping_env(trust: Path) -> AsyncIterator[WorkflowEnvironment]:
    dev_trust(trust, TENANT, config=trust.parent / "approvers", roster_refresh_seconds=86400)
    env = await WorkflowEnvironment.start_time_skipping_v2(
        dev_server_existing_path=temporal_binary(),
        dev_server_extra_args=["--dynamic-config-value",
                               "frontend.WorkflowTimeSkippingEnabled=true",
                               "--namespace", TENANT],
        data_converter=pydantic_data_converter, search_attributes=search.ALL,
        dev_server_log_level="error")
    try:
        yield env
    finally:
        await env.shutdown()


async def test_no_decision_in_48_hours_auto_rejects(
    skipping_env: WorkflowEnvironment, task_queue: str, db_path: Path
) -> None:
    # The environment's client, time skipping included, for the tenant's namespace.
    config = skipping_env.client.config()
    config["namespace"] = TENANT
    client = Client(**config)
    async with build_worker(client, task_queue=task_queue, db_path=db_path,
                            models=ModelSettings()):
        run = new_id("refund")
        handle = await client.start_workflow(RefundAgent.run, refund_request(client, run),
                                             id=run, task_queue=task_queue)
        state = await handle.result()
        log = await handle.query("transitions", result_type=list[Transition])
        with pytest.raises(TimeoutError):
            await wait_pending(handle, timeout=1)  # nothing is pending any more
    record = state.approvals[-1]
    assert record.status == "expired" and "no decision by" in record.reason
    assert (record.expires_at - record.requested_at).total_seconds() == 48 * 3600
    expiry = next(t for t in log if "expired" in t.reason)
    assert (expiry.source, expiry.target) == ("issue_refund", "decline")
    assert (expiry.at - record.requested_at).total_seconds() >= 48 * 3600  # virtual time
    assert state.status == "DONE" and "could not be reviewed in time" in state.reply
    assert refunds(db_path) == []
