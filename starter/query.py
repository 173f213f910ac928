"""Read a run's state and transition log with the plain Temporal client (queries).

    python starter/query.py refund-1
"""

from __future__ import annotations

import asyncio
import os
import sys

from temporalio.client import Client

from tower.temporal import TowerPlugin


async def main(run_id: str) -> None:
    client = await Client.connect(os.environ.get("TEMPORAL_ADDRESS", "localhost:7233"),
                                  plugins=[TowerPlugin()])
    handle = client.get_workflow_handle(run_id)
    state = await handle.query("state", result_type=dict)
    print(f"{run_id}: {state['status']} at {state['node']} (step {state['step']})")
    for move in await handle.query("transitions", result_type=list):
        print(f"  step {move['step']:>3}  {move['source']} -> {move['target']}  {move['reason']}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    asyncio.run(main(sys.argv[1]))
