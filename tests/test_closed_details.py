"""A closed run keeps its story for Temporal's own tools: `temporal workflow describe`
shows the summary and details it started with, and the Web UI's metadata query (answered
by a worker replaying the closed run) its Current Details at the end: final node and
status, each decision (who, verdict, when), the reply. The real `temporal` CLI reads them.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from conftest import WorkerFactory
from gatekit import decide, new_id, refund_request, wait_pending
from temporalio.client import Client, WorkflowFailureError
from temporalio.testing import WorkflowEnvironment
from test_details import HOSTILE, _structure

from tower.cli.devserver import temporal_binary
from tower.client import start_run
from tower.contract.decisions import Verdict
from workflows.order import OrderAgent, OrderRequest
from workflows.refund import RefundAgent


async def temporal(env: WorkflowEnvironment, *args: str) -> Any:
    """The real `temporal` CLI's JSON answer."""
    proc = await asyncio.create_subprocess_exec(
        temporal_binary(), *args, "--address", env.client.service_client.config.target_host,
        "--output", "json", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    return json.loads(out)


async def closed_story(env: WorkflowEnvironment, run: str) -> tuple[dict[str, str], str]:
    """(the run's user metadata as `temporal workflow describe` shows it, its Current
    Details as `temporal workflow query` gets them from a worker)."""
    described = await temporal(env, "workflow", "describe", "-w", run)
    assert described["workflowExecutionInfo"]["status"] != "WORKFLOW_EXECUTION_STATUS_RUNNING"
    queried = await temporal(env, "workflow", "query", "-w", run,
                             "--name", "__temporal_workflow_metadata")
    return described["executionConfig"]["userMetadata"], queried["queryResult"][0][
        "currentDetails"]


async def test_closed_runs_keep_summary_and_details(
    env: WorkflowEnvironment, client: Client, task_queue: str, scripted_worker: WorkerFactory
) -> None:
    approved, rejected, failed = new_id("refund-ok"), new_id("refund-no"), new_id("order-ko")
    async with scripted_worker():
        ok = await start_run(client, RefundAgent, refund_request(client, approved), id=approved,
                             task_queue=task_queue)
        no = await start_run(client, RefundAgent, refund_request(client, rejected), id=rejected,
                             task_queue=task_queue)
        ko = await start_run(client, OrderAgent,
                             OrderRequest(text="4 x GIZMO-3 to 9 High St, Leeds, GB"), id=failed,
                             task_queue=task_queue)
        await decide(client, ok, (await wait_pending(ok))["pending"], approver="alice")
        await decide(client, no, (await wait_pending(no))["pending"], approver="bob",
                     verdict=Verdict.REJECT, note=HOSTILE)
        assert (await ok.result())["node"] == (await no.result())["node"] == "DONE"
        try:
            await ko.result()
        except WorkflowFailureError:
            pass
        else:
            raise AssertionError("the order should have failed")
        stories = {run: await closed_story(env, run) for run in (approved, rejected, failed)}

    # The summary and details it started with (start_run): the server keeps them.
    meta, details = stories[approved]
    assert meta["summary"].startswith("Tower agent refund: ")
    assert "gate `refund_review` before `issue_refund`: role **manager** decides" in \
        meta["details"]
    assert f"` tower state {approved} ` where it is" in meta["details"]
    # Current Details at the end: the final node and status, who decided what and when,
    # the reply.
    assert details.startswith("**refund** · ended at `DONE` · DONE · step ")
    assert "- gate `refund_review` (before `issue_refund`): **approved** by ` alice ` " \
           "(role ` manager `, signed) at step " in details
    assert "reply:\n```text\nYour refund of $1,200.00 has been issued (refund id " in details

    _, details = stories[rejected]
    assert "**rejected** by ` bob ` (role ` manager `, signed) at step " in details
    # The hostile note, in the rejection and in the reply that quotes it: escaped, inert.
    assert "\\x1b[31mred⟨U+202E⟩evil" in details
    assert "\x1b" not in details and "\u202e" not in details
    assert "reply:\n````text\nYour refund request was not approved: [pay here](" in details
    assert not _structure(details) & {"link_open", "image", "heading_open", "html_inline",
                                      "html_block"}

    meta, details = stories[failed]
    assert meta["summary"].startswith("Tower agent order: ")
    assert details.startswith("**order** · ended at `FAILED` · FAILED · step ")
    assert "last error: ` out of stock: GIZMO-3 (asked 4, 0 left) `" in details
