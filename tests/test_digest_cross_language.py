"""The proposal digest computed outside Python, as docs/approvals.md's three steps say: from
the `temporal` CLI's own query output (Go's JSON, which prints 1.0 as 1), with node's
JSON.stringify and sha256. It equals Tower's, and a decision naming it is accepted."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from gatekit import decide, new_id, refund_request, wait_pending
from temporalio.client import Client

from tower.activities.model import ModelSettings
from tower.cli.devserver import temporal_binary
from tower.contract.decisions import GateRecord, proposal_digest
from worker import build_worker
from workflows.refund import RefundAgent

NODE = shutil.which("node")

# RFC 8785 in JavaScript: JSON.stringify already writes numbers and strings as JCS wants;
# keys sorted by UTF-16 code units is Array.prototype.sort's default order.
DIGEST_JS = r"""
const crypto = require("crypto");
const jcs = (v) => v === null || typeof v !== "object" ? JSON.stringify(v)
  : Array.isArray(v) ? "[" + v.map(jcs).join(",") + "]"
  : "{" + Object.keys(v).sort().map((k) => JSON.stringify(k) + ":" + jcs(v[k])).join(",") + "}";
let input = "";
process.stdin.on("data", (c) => { input += c; });
process.stdin.on("end", () => {
  const out = JSON.parse(input);
  const p = (out.queryResult || out.result || out)[0].pending;
  const shown = {v: 1, gate: p.gate, node: p.node, when: p.when, proposal: p.proposal,
                 editable: [...p.editable].sort(), limits: p.limits};
  const bytes = Buffer.from(jcs(shown), "utf8");
  process.stdout.write(JSON.stringify({canonical: bytes.toString("utf8"),
    digest: "sha256:" + crypto.createHash("sha256").update(bytes).digest("hex")}));
});
"""


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


def node_digest(cli_output: str) -> dict[str, Any]:
    assert NODE is not None
    out = subprocess.run([NODE, "-e", DIGEST_JS], input=cli_output, capture_output=True,
                         text=True, timeout=60, check=True)
    result: dict[str, Any] = json.loads(out.stdout)
    return result


@pytest.mark.skipif(NODE is None, reason="node is not installed: the digest cannot be "
                    "computed in another language here")
async def test_the_digest_from_the_temporal_cli_and_node_equals_towers(
    client: Client, task_queue: str, db_path: Path
) -> None:
    run = new_id("refund")
    async with build_worker(client, task_queue=task_queue, db_path=db_path,
                            models=ModelSettings()):
        handle = await client.start_workflow(RefundAgent.run, refund_request(client, run),
                                             id=run, task_queue=task_queue)
        approvals = await wait_pending(handle)
        pending = GateRecord.model_validate(approvals["pending"])
        printed = await cli_query(client, run)
        # The float the run holds (the edit limit's 1.0) is printed as 1 by the CLI.
        assert pending.limits["amount_cents"].min == 1.0
        assert '"min": 1,' in printed or '"min":1,' in printed, printed
        computed = node_digest(printed)
        assert computed["digest"] == proposal_digest(pending) == approvals["proposal_digest"]
        # A decision naming the digest node computed is one for this very proposal.
        out = await decide(client, handle, approvals["pending"], proposal=computed["digest"])
        assert out["result"] == "approved"
        state = await handle.result()
    decided = state.approvals[-1].decision
    assert decided is not None and decided.proposal == computed["digest"]
