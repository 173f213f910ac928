"""The sandbox every Tower worker and replayer uses: the SDK's, through its public API.

Workflow code runs only inside the sandbox, with every restriction of the SDK's
(tests/unit/test_sandbox.py shows a forbidden call caught). What Tower changes is what
is loaded once outside it (``sandbox_runner``) and how often a workflow class is checked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

__all__ = ["PASSED_THROUGH", "sandbox_runner"]

# The engine is deterministic and stateless; joserfc (and the cryptography it uses)
# verifies signed decisions: pure functions, loaded once outside the sandbox.
PASSED_THROUGH = ("tower", "joserfc", "cryptography")

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

    def prepare_workflow(self, defn: Any) -> None:
        if defn.cls not in _VALIDATED:
            super().prepare_workflow(defn)
            _VALIDATED.add(defn.cls)


def sandbox_runner(*passthrough: str) -> SandboxedWorkflowRunner:
    """The sandbox every worker and replayer uses (a replayer must match the worker): the
    engine and the modules named in ``passthrough`` (e.g. tool schemas) loaded once."""
    return _ValidateOnce(restrictions=SandboxRestrictions.default.with_passthrough_modules(
        *PASSED_THROUGH, *passthrough))

