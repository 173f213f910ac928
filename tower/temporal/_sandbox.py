"""A run's sandbox that costs less per activation, with every restriction of the SDK's.

Profiled on a 300-turn chat's replay (cProfile, activations inline; docs/benchmarks.md):
about a third of the time was the SDK asking the run, for every payload it encodes or
decodes (several passes per activation), which serialization context applies. The
sandbox answers by compiling a snippet and running it inside the sandbox, with its import
and builtin restrictions applied and removed around it, each time. The answer is the SDK's
own data (namespace, workflow id, the pending activity a payload belongs to) computed by
the SDK's own code, never the workflow's: ``RunSandbox`` asks for it directly. The
snippets the sandbox does run (start, activate) are compiled once per process instead of
at every call. Workflow code still runs only inside the sandbox, restricted as before
(tests/unit/test_sandbox.py shows a forbidden call caught).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import CodeType
from typing import Any

from temporalio import workflow
from temporalio.worker import WorkflowInstance, WorkflowInstanceDetails
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions, _runner

_COMPILED: dict[str, CodeType] = {}


def _compiled(code: str) -> CodeType:
    compiled = _COMPILED.get(code)
    if compiled is None:
        compiled = _COMPILED[code] = compile(code, "<temporal sandbox>", "exec")
    return compiled


class RunSandbox(_runner._Instance):
    """One run's sandbox (the SDK's, private to temporalio 1.x): see the module's doc."""

    def _run_code(self, code: Any, **extra_globals: Any) -> None:
        # exec() takes the compiled code as it takes the text.
        compiled = _compiled(code) if isinstance(code, str) else code
        super()._run_code(compiled, **extra_globals)  # type: ignore[arg-type]

    def _in_sandbox(self) -> Any:
        # The SDK's object that runs the workflow inside the sandbox, once it is built.
        return self.globals_and_locals.get("__temporal_in_sandbox")

    def get_serialization_context(self, command_info: Any) -> Any:
        inner = self._in_sandbox()
        if inner is None:
            return super().get_serialization_context(command_info)
        return inner.get_serialization_context(command_info)

    def get_external_store_context(self, command_info: Any) -> Any:
        inner = self._in_sandbox()
        if inner is None:
            return super().get_external_store_context(command_info)
        return inner.get_external_store_context(command_info)


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

    # Each run's sandbox: the SDK's, cheaper per payload (RunSandbox above).
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
