"""A worker process for the MCP tests: Tower's worker with the notes agents and the
tenant's MCP tools (TOWER_MCP_CONFIG), so a test can SIGKILL it mid-call."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).parents[1])]

from mcp_notes.agent import NotesCleanupAgent, NotesPurgeAgent  # noqa: E402
from tower.activities.mcp import load_sources  # noqa: E402
from tower.client.connection import connect  # noqa: E402
from worker import build_worker  # noqa: E402


async def main() -> None:
    client = await connect()
    mcp = await load_sources(client.namespace)
    async with build_worker(client, task_queue=os.environ["TOWER_TASK_QUEUE"],
                            workflows=[NotesCleanupAgent, NotesPurgeAgent], mcp=mcp):
        print("worker ready", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main())
