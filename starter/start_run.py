"""Start a refund run with the plain Temporal client, as your own code would.

    python starter/start_run.py refund-1 "Please refund $1,200 on invoice INV-2004"

The run is named by its workflow id; `tower watch refund-1` follows it, a worker
(`python worker.py`) runs it. The search attributes of the run's first move are set at the
start, so `tower pending` and the Web UI list it by agent and status at once.
"""

from __future__ import annotations

import asyncio
import os
import sys

from temporalio.client import Client

from tower.client import start_attributes
from tower.temporal import TowerPlugin
from workflows.refund import RefundAgent, RefundRequest


async def main(run_id: str, message: str) -> None:
    client = await Client.connect(os.environ.get("TEMPORAL_ADDRESS", "localhost:7233"),
                                  plugins=[TowerPlugin()])
    handle = await client.start_workflow(
        RefundAgent.run, RefundRequest(message=message), id=run_id, task_queue="tower",
        search_attributes=start_attributes(RefundAgent.machine))
    print(f"started {handle.id} (run {handle.result_run_id})")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    asyncio.run(main(sys.argv[1], sys.argv[2]))
