"""The proposal digest computed outside Python, by docs/approvals.md's own recipe: its node
program, run on the `temporal` CLI's own query output (Go's JSON, which prints 1.0 as 1 and
an empty array as null), at the refund gate and at the migration gate (nothing editable:
``"editable": null``). It equals the run's, and a decision naming it is accepted."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from gatekit import decide, make_shop, new_id, refund_request, wait_pending
from temporalio.client import Client

from tower.activities.model import ModelSettings
from tower.cli.devserver import temporal_binary
from tower.contract.decisions import GateRecord, Verdict, proposal_digest
from worker import build_worker
from workflows.migration import MigrationAgent, MigrationRequest
from workflows.refund import RefundAgent

NODE = shutil.which("node")
DOC = Path(__file__).parents[1] / "docs" / "approvals.md"
needs_node = pytest.mark.skipif(NODE is None, reason="node is not installed: the digest "
                                "cannot be computed in another language here")


def recipe() -> str:
    """The node program docs/approvals.md gives (its ``digest-recipe: node`` block)."""
    block = DOC.read_text().split("<!-- digest-recipe: node -->", 1)[1].split("```", 2)[1]
    return block.split("node -e '", 1)[1].rsplit("'", 1)[0]


async def cli_query(client: Client, run: str) -> str:
    """The run's ``approvals`` query as the `temporal` CLI prints it (JSON). In a thread:
    the worker answering it runs on this process's event loop."""
    out = await asyncio.to_thread(
        subprocess.run,
        [str(temporal_binary()), "workflow", "query", "--workflow-id", run,
         "--name", "approvals", "--address", client.service_client.config.target_host,
         "--namespace", client.namespace, "--output", "json"],
        capture_output=True, text=True, timeout=60, check=True)
    return out.stdout


def node_digest(cli_output: str) -> str:
    assert NODE is not None
    out = subprocess.run([NODE, "-e", recipe()], input=cli_output, capture_output=True,
                         text=True, timeout=60, check=True)
    return out.stdout.strip()


async def digest_by_the_recipe(client: Client, handle: Any, **decided: Any) -> str:
    """The digest docs/approvals.md's recipe computes from the CLI's output, checked equal
    to the run's; then a decision naming it, which the run accepts."""
    approvals = await wait_pending(handle)
    pending = GateRecord.model_validate(approvals["pending"])
    printed = await cli_query(client, handle.id)
    computed = node_digest(printed)
    assert computed == proposal_digest(pending) == approvals["proposal_digest"], printed
    out = await decide(client, handle, approvals["pending"], proposal=computed, **decided)
    assert out["result"] == "approved", out
    return printed


@needs_node
async def test_the_refund_digest_from_the_temporal_cli_and_node_equals_the_runs(
    client: Client, task_queue: str, db_path: Path
) -> None:
    run = new_id("refund")
    async with build_worker(client, task_queue=task_queue, db_path=db_path,
                            models=ModelSettings()):
        handle = await client.start_workflow(RefundAgent.run, refund_request(client, run),
                                             id=run, task_queue=task_queue)
        printed = await digest_by_the_recipe(client, handle)
        state = await handle.result()
    # The float the run holds (the edit limit's 1.0) was printed as 1 by the CLI.
    assert '"min": 1,' in printed or '"min":1,' in printed, printed
    assert state.approvals[-1].decision is not None
    assert state.approvals[-1].decision.proposal == proposal_digest(state.approvals[-1])


@needs_node
async def test_the_migration_digest_with_nothing_editable_equals_the_runs(
    client: Client, task_queue: str, db_path: Path
) -> None:
    make_shop(db_path)
    run = new_id("migration")
    async with build_worker(client, task_queue=task_queue, db_path=db_path,
                            models=ModelSettings()):
        handle = await client.start_workflow(
            MigrationAgent.run, MigrationRequest(database="shop", script=(
                "ALTER TABLE customers DROP COLUMN fax;\nDROP TABLE legacy_notes;")),
            id=run, task_queue=task_queue)
        printed = await digest_by_the_recipe(client, handle, verdict=Verdict.APPROVE,
                                             approver="dana", role="dba")
        state = await handle.result()
    # The CLI printed the gate's empty editable list as null, as issue 37 found it.
    assert '"editable": null' in printed, printed
    assert state.applied
