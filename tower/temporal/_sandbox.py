"""The sandbox every Tower worker and replayer uses: the SDK's, through its public API.

Workflow code runs only inside the sandbox, with every restriction of the SDK's
(tests/unit/test_sandbox.py shows a forbidden call caught). What Tower changes is what
is loaded once outside it (``sandbox_runner``), how often a workflow class is checked,
and that the SDK's own bookkeeping between activations does not enter it (``_Instance``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from temporalio.converter import SerializationContext, StorageDriverStoreContext
from temporalio.worker import WorkflowInstance, WorkflowInstanceDetails
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions
from temporalio.worker.workflow_sandbox._runner import _Instance as _SdkInstance

__all__ = ["PASSED_THROUGH", "sandbox_runner"]

# The engine is deterministic and stateless; joserfc (and the cryptography it uses)
# verifies signed decisions: pure functions, loaded once outside the sandbox.
PASSED_THROUGH = ("tower", "joserfc", "cryptography")

_VALIDATED: set[type] = set()  # workflow classes already checked in a sandbox, this process


class _Instance(_SdkInstance):
    """The SDK's sandboxed run; the payload passes ask its serialization contexts directly.

    Around every activation the SDK walks the activation's and the completion's payloads
    (decode and encode, three passes each) and, for each payload, asks the run which
    serialization context applies (the run's own, or the activity's a command schedules).
    The SDK answers each question by entering the sandbox — compiling a line of code, and
    swapping ``sys.modules``, ``__import__`` and the restricted builtins in and out — to
    call its own bookkeeping (``_WorkflowInstanceImpl.get_serialization_context``: a
    lookup in its pending commands; no workflow code runs). Seven entries per activation
    were half the worker's Python-thread CPU in a replayed 300-turn chat
    (docs/benchmarks.md). The answer is the same object asked outside: the SDK's code
    and its dataclasses are passed through (the same modules inside and out).
    """

    def get_serialization_context(self, command_info: Any) -> SerializationContext | None:
        return self._run.get_serialization_context(command_info)

    def get_external_store_context(self, command_info: Any) -> StorageDriverStoreContext:
        return self._run.get_external_store_context(command_info)

    @property
    def _run(self) -> Any:
        # The sandbox's InSandbox, which the SDK made when it created the run; it forwards
        # to the run's workflow instance (the same calls the SDK makes inside).
        return self.globals_and_locals["__temporal_in_sandbox"]


@dataclass(frozen=True)
class _ValidateOnce(SandboxedWorkflowRunner):
    """The SDK's sandbox, checking each workflow class once per process.

    Every Worker and Replayer checks its workflows by building a throwaway sandbox for
    each (the agent module imported afresh, its pydantic models rebuilt): about a second
    for Tower's agents, paid again for every replayed batch and every test's worker. The
    check's answer cannot change while the process runs the same code. Runs themselves
    still each get a fresh sandbox with every restriction.
    """

    def prepare_workflow(self, defn: Any) -> None:
        if defn.cls not in _VALIDATED:
            super().prepare_workflow(defn)
            _VALIDATED.add(defn.cls)

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        return _Instance(det, self.runner_class, self.restrictions)


def sandbox_runner(*passthrough: str) -> SandboxedWorkflowRunner:
    """The sandbox every worker and replayer uses (a replayer must match the worker): the
    engine and the modules named in ``passthrough`` (e.g. tool schemas) loaded once."""
    return _ValidateOnce(restrictions=SandboxRestrictions.default.with_passthrough_modules(
        *PASSED_THROUGH, *passthrough))
