"""Build a Temporal worker for a project's agents: the sandbox, the failure types and the
checks every Tower worker (and replayer) needs, in one call a user's project can make.

    from tower.temporal.worker import build_worker
    worker = build_worker(client, task_queue="my-agents", agents=[MyAgent],
                          activities=[my_model.call_model, *my_tools])

The engine never imports a project's packages: the agents and activities come in here.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from temporalio import workflow
from temporalio.client import Client
from temporalio.worker import Worker, WorkflowInstance, WorkflowInstanceDetails
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from tower.core.errors import InvalidGraph, TowerError
from tower.core.tools import ToolSpec, register_external
from tower.temporal.converter import pydantic_converter
from tower.temporal.gating import current_run_id
from tower.temporal.sandbox import RunSandbox
from tower.temporal.unopenable import guarded

# The converter Tower's clients, workers and replayers share (tower.temporal.converter).
__all__ = ["WORKFLOW_FAILURE_TYPES", "build_worker", "check_external_tools",
           "pydantic_converter", "sandbox_runner"]

# A domain error fails the run instead of retrying the workflow task forever; so does an
# input that does not fit the agent's input model (pydantic's ValidationError, raised
# while decoding the start): a malformed start ends FAILED at once, with the reason.
# Shared with the replayer (tower.testing), like the sandbox.
WORKFLOW_FAILURE_TYPES: list[type[BaseException]] = [TowerError, ValidationError]


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

    # Each run's sandbox: the SDK's, cheaper per payload (tower.temporal.sandbox).
    instance_class = RunSandbox

    def prepare_workflow(self, defn: workflow._Definition) -> None:
        if defn.cls not in _VALIDATED:
            super().prepare_workflow(defn)
            _VALIDATED.add(defn.cls)

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        return self.instance_class(det, self.runner_class, self.restrictions)


def sandbox_runner(*passthrough: str) -> SandboxedWorkflowRunner:
    """The sandbox every worker and replayer uses (a replayer must match the worker).

    The engine is deterministic and stateless: it is loaded once instead of once per run
    inside the sandbox, like the modules named in ``passthrough`` (e.g. tool schemas).
    joserfc (and the cryptography it uses) verifies signed decisions: pure functions,
    loaded once outside the sandbox too.
    """
    return _ValidateOnce(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(
            "tower", "joserfc", "cryptography", *passthrough))


def check_external_tools(agents: Iterable[Any], available: Collection[str]) -> None:
    """Every ``server.tool`` an agent names must be served by this worker (``available``);
    InvalidGraph naming the agent, node and tool otherwise. Names without a dot were
    checked against the catalogue when the agent's graph compiled."""
    for cls in agents:
        machine = getattr(cls, "machine", None)
        if machine is None:  # a plain Temporal workflow hosted beside the agents
            continue
        for node in machine.nodes.values():
            for tool in node.tools:
                if "." in tool and tool not in available:
                    raise InvalidGraph(machine.name, f"node {node.name!r} names tool {tool!r}, "
                                                     "which no server on this worker provides")


def build_worker(
    client: Client, *, task_queue: str, agents: Sequence[type],
    activities: Sequence[Callable[..., Any]] = (),
    external_tools: Mapping[str, ToolSpec] | None = None,
    passthrough: Sequence[str] = (), max_concurrent_activities: int = 50,
    **worker_options: Any,  # passed on to Worker (e.g. max_cached_workflows=0 in tests)
) -> Worker:
    """A worker hosting ``agents`` (``@agent`` classes; plain workflows may ride along)
    and ``activities``."""
    if not agents:
        raise ValueError("build_worker needs at least one agent")
    # ``server.tool`` specs (an MCP server's, listed at start): every one an agent names
    # must be here; registered for the runs' contexts (schemas shown to the model,
    # arguments checked, timeouts), while the calls run as ``activities``.
    check_external_tools(agents, set(external_tools or {}))
    register_external(external_tools or {})
    converter = guarded(client.data_converter)
    if converter is not client.data_converter:
        # An input from outside that this worker cannot open is refused, not a stalled run.
        config = client.config()  # as first given: its plugins (tracing) apply again
        config["data_converter"] = converter
        client = Client(**config)
    worker_options.setdefault(
        # Tools are often plain blocking code (SQLite): run them on threads.
        "activity_executor", ThreadPoolExecutor(max_concurrent_activities))
    return Worker(
        client, task_queue=task_queue, workflows=list(agents),
        activities=[*activities, current_run_id],  # gates record the run id they open in
        max_concurrent_activities=max_concurrent_activities,
        workflow_runner=sandbox_runner(*passthrough),
        workflow_failure_exception_types=WORKFLOW_FAILURE_TYPES, **worker_options,
    )
