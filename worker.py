"""`python worker.py`: one worker hosting every agent and every activity.

Connection settings come from temporalio.envconfig (TEMPORAL_ADDRESS, ...);
models from OPENAI_API_KEY / OPENAI_BASE_URL / TOWER_MODELS (none: the offline
scripted model); the tools' SQLite database from TOWER_DB.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import os
import signal
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from activities.tools import ToolBox
from tower import scripts_of
from tower.activities.mcp import (
    McpConfigError,
    McpDiscoveryError,
    McpPolicyError,
    McpSources,
    check_agents,
    load_sources,
)
from tower.activities.messages import MessageStore
from tower.activities.model import ModelActivities, ModelSettings
from tower.activities.notify import Notifier
from tower.activities.prices import PriceError
from tower.activities.trust import TrustLoader
from tower.cli.connection import TASK_QUEUE, ServerUnreachable, UnknownTenant, connect, use_tenant
from tower.cli.telemetry import TracingConfigError
from tower.temporal.worker import WORKFLOW_FAILURE_TYPES
from tower.temporal.worker import build_worker as tower_worker
from tower.temporal.worker import sandbox_runner as tower_sandbox
from workflows.registry import AGENTS

DEFAULT_DB = Path(".tower") / "tools.sqlite"
# How long a stopping worker lets its running activities finish before cancelling them.
# Keep it under the container's stop grace period (Dockerfile, docker-compose.yml).
DEFAULT_GRACE_SECONDS = 20.0


# The tool schemas are data, like the engine: load them once, not once per run.
PASSTHROUGH = ("activities",)
__all__ = ["WORKFLOW_FAILURE_TYPES", "build_worker", "sandbox_runner"]


def sandbox_runner() -> SandboxedWorkflowRunner:
    """This project's sandbox: what its worker and every replayer of its histories use."""
    return tower_sandbox(*PASSTHROUGH)


def build_worker(
    client: Client, *, task_queue: str = TASK_QUEUE, db_path: str | Path | None = None,
    models: ModelSettings | None = None, max_concurrent_activities: int = 50,
    messages_path: str | Path | None = None, workflows: Sequence[type] = (),
    trust_dir: str | Path | None = None,
    mcp: McpSources | None = None,  # the tenant's MCP tools, listed by load_sources()
    **worker_options: Any,  # passed on to Worker (e.g. max_cached_workflows=0 in tests)
) -> Worker:
    tools = ToolBox(db_path or os.environ.get("TOWER_DB") or DEFAULT_DB)
    # Conversation content lives beside the tools' database, never in the history.
    store = MessageStore(messages_path or os.environ.get("TOWER_MESSAGES")
                         or tools.db_path.with_name("messages.sqlite"))
    agents = [*AGENTS.values(), *workflows]
    # The scripted model answers from the scripts each agent's file attaches to it.
    model = ModelActivities(models or ModelSettings.from_env(), store,
                            scripts=scripts_of(a for a in agents if hasattr(a, "machine")))
    activities = [model.call_model, *tools.activities()]
    if mcp is not None:
        # Before any run: every server.tool named exists, destructive ones are gated.
        check_agents((a.machine for a in agents if hasattr(a, "machine")), mcp.tools)
        if mcp.tools:  # the MCP SDK is imported only here, for a tenant that lists tools
            activities += mcp.toolbox().activities()
    return tower_worker(
        client, task_queue=task_queue, agents=agents,
        # The tenant's roster and policy: TOWER_TRUST_DIR (default .tower/trust).
        activities=[*activities, TrustLoader(trust_dir).load_trust,
                    Notifier(trust_dir).notify_gate],
        external_tools=mcp.tools if mcp else None,
        max_concurrent_activities=max_concurrent_activities,
        passthrough=PASSTHROUGH, **worker_options,
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task-queue", default=os.environ.get("TOWER_TASK_QUEUE", TASK_QUEUE))
    parser.add_argument("--tenant", metavar="NAME",
                        help="serve this tenant's namespace (default TEMPORAL_NAMESPACE)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        use_tenant(args.tenant)
        client = await connect()
    except (ServerUnreachable, UnknownTenant, TracingConfigError, ValueError) as exc:
        raise SystemExit(f"error: {exc}") from None
    try:
        settings = ModelSettings.from_env()
    except PriceError as exc:
        raise SystemExit(f"error: {exc}") from None
    try:
        mcp = await load_sources(client.namespace)
    except (McpConfigError, McpDiscoveryError) as exc:
        raise SystemExit(f"error: {exc}") from None
    grace = float(os.environ.get("TOWER_SHUTDOWN_GRACE", DEFAULT_GRACE_SECONDS))
    logging.info("worker on task queue %r; model: %s; MCP tools: %s", args.task_queue,
                 settings.describe(), ", ".join(mcp.tools) or "none")
    try:
        worker = build_worker(client, task_queue=args.task_queue, models=settings, mcp=mcp,
                              graceful_shutdown_timeout=timedelta(seconds=grace))
    except McpPolicyError as exc:
        raise SystemExit(f"error: {exc}") from None
    stop = asyncio.Event()
    # `docker stop` and Kubernetes send SIGTERM, a terminal SIGINT: both drain the same way
    # (stop polling, let running activities finish within the grace period, exit 0).
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    async with worker:
        # What start-up loaded stays for good: frozen, the collector's full passes skip it.
        # A workflow task holding thousands of signals triggers several, within the SDK's
        # 2 s deadlock budget (docs/approvals.md, "What a refusal costs").
        gc.collect()
        gc.freeze()
        await stop.wait()
        logging.info("stopping: draining running activities (up to %.0f s)", grace)
    logging.info("worker stopped")


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):  # a second Ctrl-C while draining
        asyncio.run(main())
