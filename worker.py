"""`python worker.py`: one worker hosting every agent and every activity.

Connection settings come from temporalio.envconfig (TEMPORAL_ADDRESS, ...);
models from OPENAI_API_KEY / OPENAI_BASE_URL / TOWER_MODELS (none: the offline
scripted model); the tools' SQLite database from TOWER_DB.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from temporalio import workflow
from temporalio.client import Client
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from activities.messages import MessageStore
from activities.model import ModelActivities, ModelSettings
from activities.notify import Notifier
from activities.prices import PriceError
from activities.tools import ToolBox
from activities.trust import TrustLoader
from starter.connection import TASK_QUEUE, ServerUnreachable, UnknownTenant, connect, use_tenant
from starter.telemetry import TracingConfigError
from tower import TowerError
from workflows.registry import AGENTS

DEFAULT_DB = Path(".tower") / "tools.sqlite"
# How long a stopping worker lets its running activities finish before cancelling them.
# Keep it under the container's stop grace period (Dockerfile, docker-compose.yml).
DEFAULT_GRACE_SECONDS = 20.0


_VALIDATED: set[type] = set()  # workflow classes already checked in a sandbox, this process


@dataclass(frozen=True)
class _ValidateOnce(SandboxedWorkflowRunner):
    """The SDK's sandbox, checking each workflow class once per process.

    Every Worker and Replayer checks its workflows by building a throwaway sandbox for
    each (the agent module imported afresh, its pydantic models rebuilt): about a second
    for Tower's agents, paid again for every replayed batch and every test's worker. The
    check's answer cannot change while the process runs the same code. Runs themselves
    still each get a fresh sandbox with every restriction.
    """

    def prepare_workflow(self, defn: workflow._Definition) -> None:
        if defn.cls not in _VALIDATED:
            super().prepare_workflow(defn)
            _VALIDATED.add(defn.cls)


def sandbox_runner() -> SandboxedWorkflowRunner:
    """The sandbox every worker and replayer uses (a replayer must match the worker)."""
    # The engine and the tool schemas are deterministic and stateless: load them
    # once instead of once per run inside the sandbox. joserfc (and the cryptography it
    # uses) verifies signed decisions: pure functions, loaded once outside the sandbox.
    return _ValidateOnce(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(
            "tower", "activities", "joserfc", "cryptography"))


# A domain error fails the run instead of retrying the workflow task forever; so does an
# input that does not fit the agent's input model (pydantic's ValidationError, raised
# while decoding the start): a malformed start ends FAILED at once, with the reason.
# Shared with the Replayer (starter/histories.py), like the sandbox.
WORKFLOW_FAILURE_TYPES: list[type[BaseException]] = [TowerError, ValidationError]


def build_worker(
    client: Client, *, task_queue: str = TASK_QUEUE, db_path: str | Path | None = None,
    models: ModelSettings | None = None, max_concurrent_activities: int = 50,
    messages_path: str | Path | None = None, workflows: Sequence[type] = (),
    trust_dir: str | Path | None = None,
    **worker_options: Any,  # passed on to Worker (e.g. max_cached_workflows=0 in tests)
) -> Worker:
    tools = ToolBox(db_path or os.environ.get("TOWER_DB") or DEFAULT_DB)
    # Conversation content lives beside the tools' database, never in the history.
    store = MessageStore(messages_path or os.environ.get("TOWER_MESSAGES")
                         or tools.db_path.with_name("messages.sqlite"))
    model = ModelActivities(models or ModelSettings.from_env(), store)
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[*AGENTS.values(), *workflows],
        # The tenant's roster and policy: TOWER_TRUST_DIR (default .tower/trust).
        activities=[model.call_model, *tools.activities(), Notifier().notify_gate,
                    TrustLoader(trust_dir).load_trust],
        # Tools are plain blocking SQLite code: run them on threads, off the event loop.
        activity_executor=ThreadPoolExecutor(max_concurrent_activities),
        max_concurrent_activities=max_concurrent_activities,
        workflow_runner=sandbox_runner(),
        workflow_failure_exception_types=WORKFLOW_FAILURE_TYPES,
        **worker_options,
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
    grace = float(os.environ.get("TOWER_SHUTDOWN_GRACE", DEFAULT_GRACE_SECONDS))
    logging.info("worker on task queue %r; model: %s", args.task_queue, settings.describe())
    stop = asyncio.Event()
    # `docker stop` and Kubernetes send SIGTERM, a terminal SIGINT: both drain the same way
    # (stop polling, let running activities finish within the grace period, exit 0).
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    async with build_worker(client, task_queue=args.task_queue, models=settings,
                            graceful_shutdown_timeout=timedelta(seconds=grace)):
        await stop.wait()
        logging.info("stopping: draining running activities (up to %.0f s)", grace)
    logging.info("worker stopped")


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):  # a second Ctrl-C while draining
        asyncio.run(main())
