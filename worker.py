"""`python worker.py` (or `tower worker`): one worker hosting every agent and every activity.

Connection settings come from temporalio.envconfig (TEMPORAL_ADDRESS, ...);
models from OPENAI_API_KEY / OPENAI_BASE_URL / TOWER_MODELS (none: the offline
scripted model); the tools' SQLite database from TOWER_DB.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.worker import Worker

from activities.tools import ToolBox
from tower.activities.attest import Attester
from tower.activities.cleanup import StoreCleanup, retention_from_env
from tower.activities.mcp import (
    McpConfigError,
    McpDiscoveryError,
    McpPolicyError,
    McpSources,
    load_sources,
)
from tower.activities.messages import open_messages
from tower.activities.model import ModelActivities, ModelSettings
from tower.activities.notify import Notifier
from tower.activities.prices import PriceError
from tower.activities.stores import StoreSettings, announce
from tower.activities.streams import StreamStore
from tower.activities.trust import TrustLoader
from tower.client import TASK_QUEUE, ServerUnreachable, UnknownTenant, connect, use_tenant
from tower.temporal import (
    TowerPlugin,
    has_tower_plugin,
    publish_steps,
    run_main,
    scripts_of,
)
from tower.temporal.cleanup import TowerStoreCleanup, ensure_cleanup
from tower.temporal.payloads import driver_for
from tower.temporal.telemetry import TracingConfigError
from workflows.registry import AGENTS

DEFAULT_DB = Path(".tower") / "tools.sqlite"
# How long a stopping worker lets its running activities finish before cancelling them.
# Keep it under the container's stop grace period (Dockerfile, docker-compose.yml).
DEFAULT_GRACE_SECONDS = 20.0

__all__ = ["activities", "build_worker", "main"]


def activities(
    agents: Sequence[type], *, db_path: str | Path | None = None,
    models: ModelSettings | None = None, messages_path: str | Path | None = None,
    trust_dir: str | Path | None = None,
    mcp: McpSources | None = None,  # the tenant's MCP tools, listed by load_sources()
    streams: StreamStore | None = None,  # the runs' live streams (docs/streaming.md)
) -> list[Callable[..., Any]]:
    """What this project's worker runs for ``agents``: the tools, the model, the trust
    loader, gate notifier and request attester (TOWER_TRUST_DIR), and the tenant's MCP tools."""
    tools = ToolBox(db_path or os.environ.get("TOWER_DB") or DEFAULT_DB)
    # Conversation content lives in the message store (TOWER_STORE_URL, else beside the
    # tools' database), never in the history.
    store = open_messages(messages_path
                          or StoreSettings.from_env(data_dir=tools.db_path.parent).messages)
    # The scripted model answers from the scripts each agent's file attaches to it.
    model = ModelActivities(models or ModelSettings.from_env(), store,
                            scripts=scripts_of(a for a in agents if hasattr(a, "machine")),
                            streams=streams)
    # Retention: what closed runs left in the stores goes (tower/temporal/cleanup.py).
    cleanup = StoreCleanup({"message store": store, "stream store": streams,
                            "payload store": driver_for(StoreSettings.from_env().payloads)},
                           retention_from_env())
    found: list[Callable[..., Any]] = [
        model.call_model, *tools.activities(), TrustLoader(trust_dir).load_trust,
        Notifier(trust_dir).notify_gate, Attester(trust_dir).attest, cleanup.cleanup]
    if mcp is not None:  # checked before any run: named tools exist, destructive ones gated
        found += mcp.activities_for(agents)
    return found


def build_worker(
    client: Client, *, task_queue: str = TASK_QUEUE, workflows: Sequence[type] = (),
    db_path: str | Path | None = None, models: ModelSettings | None = None,
    messages_path: str | Path | None = None, trust_dir: str | Path | None = None,
    mcp: McpSources | None = None, **worker_options: Any,  # e.g. max_cached_workflows=0
) -> Worker:
    """This project's worker on ``client`` (``workflows`` ride along with its agents). A
    client connected without ``TowerPlugin`` (a test's) gets it for this worker."""
    agents = [*AGENTS.values(), *workflows]
    streams = streams_for(client, task_queue, db_path)
    return Worker(
        client, task_queue=task_queue, workflows=[*agents, TowerStoreCleanup],
        activities=activities(agents, db_path=db_path, models=models, mcp=mcp,
                              messages_path=messages_path, trust_dir=trust_dir,
                              streams=streams),
        plugins=[] if has_tower_plugin(client) else [TowerPlugin()], **worker_options)


def streams_for(client: Client, task_queue: str, db_path: str | Path | None = None,
                ) -> StreamStore:
    """The runs' live streams (TOWER_STREAMS, else beside the tools' database): the model
    activity publishes its text there, and the runs of ``task_queue`` their steps."""
    store = StoreSettings.from_env(data_dir=Path(db_path).parent if db_path else None
                                   ).open_streams()
    publish_steps(client.namespace, task_queue, store)
    return store


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
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    try:
        if args.tenant:
            use_tenant(args.tenant)
        settings = ModelSettings.from_env()
        client = await connect()  # with TowerPlugin: a plain Worker is a Tower worker
        mcp = await load_sources(client.namespace)
        grace = float(os.environ.get("TOWER_SHUTDOWN_GRACE", DEFAULT_GRACE_SECONDS))
        streams = streams_for(client, args.task_queue)
        worker = Worker(
            client, task_queue=args.task_queue,
            workflows=[*AGENTS.values(), TowerStoreCleanup],
            activities=activities(list(AGENTS.values()), models=settings, mcp=mcp,
                                  streams=streams),
            graceful_shutdown_timeout=timedelta(seconds=grace))
    except (ServerUnreachable, UnknownTenant, TracingConfigError, ValueError, PriceError,
            McpConfigError, McpDiscoveryError, McpPolicyError) as exc:
        raise SystemExit(f"error: {exc}") from None
    async with worker:  # (TowerPlugin freezes the heap it loaded: tower/temporal/_heap.py)
        await announce(StoreSettings.from_env(), client)  # which store each is
        await ensure_cleanup(client, args.task_queue)  # the stores' retention, hourly
        logging.info("worker ready on task queue %r; model: %s; MCP tools: %s",
                     args.task_queue, settings.describe(), ", ".join(mcp.tools) or "none")
        await stop.wait()
        logging.info("stopping: draining running activities (up to %.0f s)", grace)
    logging.info("worker stopped")


if __name__ == "__main__":
    run_main(main())  # exits once the worker has drained (tower/temporal/_process.py)
