"""`python worker.py` (or `tower worker`): one worker hosting every agent and every activity.

Connection settings come from temporalio.envconfig (TEMPORAL_ADDRESS, ...);
models from OPENAI_API_KEY / OPENAI_BASE_URL / TOWER_MODELS (none: the offline
scripted model); the tools' database from TOWER_DB: a SQLite file (default
.tower/tools.sqlite, one host's) or a postgresql:// URL (what several hosts share).
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.worker import Worker

from activities.tools import ToolsDb
from activities.tools.db import is_postgres
from tower.client import TowerError, connect, shared_server, use_tenant
from tower.temporal import (
    McpSources,
    ModelSettings,
    WorkerSettings,
    load_sources,
    run_main,
    stop_on_signals,
)
from tower.temporal import (
    build_worker as tower_worker,
)
from workflows.registry import AGENTS

TASK_QUEUE = "tower"  # what `tower` starts runs on, unless TOWER_TASK_QUEUE says otherwise
DEFAULT_DB = Path(".tower") / "tools.sqlite"
# How long a stopping worker lets its running activities finish before cancelling them.
# Keep it under the container's stop grace period (Dockerfile, docker-compose.yml).
DEFAULT_GRACE_SECONDS = 20.0

__all__ = ["bindings", "build_worker", "main"]


def tools_db_path(db_path: str | Path | None = None) -> str | Path:
    """The tools' database: ``db_path``, else TOWER_DB, else the default SQLite file."""
    return db_path or os.environ.get("TOWER_DB") or DEFAULT_DB


def bindings(db_path: str | Path | None = None) -> dict[str, Any]:
    """What this project's tools are bound to: ``db``, the tools' database (TOWER_DB)."""
    tools_db = ToolsDb(tools_db_path(db_path))
    logging.getLogger("tower.stores").info("tools' database: %s", tools_db.describe())
    return {"db": tools_db}


def build_worker(
    client: Client, *, task_queue: str = TASK_QUEUE, workflows: Sequence[type] = (),
    db_path: str | Path | None = None, models: ModelSettings | None = None,
    messages_path: str | Path | None = None, trust_dir: str | Path | None = None,
    mcp: McpSources | None = None, **worker_options: Any,  # e.g. max_cached_workflows=0
) -> Worker:
    """This project's worker on ``client`` (``workflows`` ride along with its agents), with
    Tower's activities on these settings (stores beside ``db_path``): the tests' worker."""
    agents = [*AGENTS.values(), *workflows]
    # Local stores beside a SQLite tools' database; with the tools on PostgreSQL, in .tower.
    data_dir = None if db_path is None or is_postgres(str(db_path)) else Path(db_path).parent
    settings = WorkerSettings(models=models, trust_dir=trust_dir, messages=messages_path,
                              data_dir=data_dir)
    return tower_worker(client, task_queue=task_queue, agents=agents, bind=bindings(db_path),
                        activities=mcp.activities_for(agents) if mcp else (),
                        settings=settings, **worker_options)


async def warn_of_local_tools(client: Client) -> None:
    """On a Temporal server several hosts share, a SQLite tools' database is this host's
    own: what its tools wrote, another host's run cannot see. Say so at start-up."""
    db = tools_db_path()
    if not is_postgres(str(db)) and await shared_server(client):
        logging.warning("the tools' database %s is a file of this host's own, but the "
                        "Temporal server is shared: another host's tools will not see what "
                        "these wrote (a refund paid here is unknown there). Set "
                        "TOWER_DB=postgresql://... on every worker (docs/production.md)", db)


async def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task-queue", default=os.environ.get("TOWER_TASK_QUEUE", TASK_QUEUE))
    parser.add_argument("--tenant", metavar="NAME",
                        help="serve this tenant's namespace (default TEMPORAL_NAMESPACE)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    # `docker stop` and Kubernetes send SIGTERM, a terminal SIGINT: both drain the same way
    # (stop polling, let running activities finish within the grace period, exit 0). Taken
    # over first: a signal from now on, even during start-up, is a clean stop.
    stop = stop_on_signals()
    try:
        if args.tenant:
            use_tenant(args.tenant)
        client = await connect()  # with TowerPlugin: a plain Worker is a Tower worker
        await warn_of_local_tools(client)
        mcp = await load_sources(client.namespace)
        grace = float(os.environ.get("TOWER_SHUTDOWN_GRACE", DEFAULT_GRACE_SECONDS))
        worker = build_worker(client, task_queue=args.task_queue, mcp=mcp,
                              graceful_shutdown_timeout=timedelta(seconds=grace))
    except (TowerError, ValueError) as exc:  # a server, a tenant, a setting: said in one line
        raise SystemExit(f"error: {exc}") from None
    async with worker:  # (TowerPlugin freezes the heap it loaded: tower/temporal/_process.py)
        logging.info("worker ready on task queue %r; model: %s; MCP tools: %s",
                     args.task_queue, ModelSettings.from_env().describe(),
                     ", ".join(mcp.tools) or "none")
        await stop.wait()
        logging.info("stopping: draining running activities (up to %.0f s)", grace)
    logging.info("worker stopped")


if __name__ == "__main__":
    run_main(main())  # exits once the worker has drained (tower/temporal/_process.py)
