"""The sandbox every Tower worker and replayer uses: the SDK's, through its public API,
with every restriction (tests/unit/test_sandbox.py shows a forbidden call caught). Tower
changes what is loaded once outside it, how often a workflow class is checked, and how
often the SDK's own bookkeeping between activations enters it."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import CommandType
from temporalio.bridge.proto.workflow_activation import WorkflowActivation
from temporalio.bridge.proto.workflow_completion import WorkflowActivationCompletion
from temporalio.converter import SerializationContext, StorageDriverStoreContext
from temporalio.worker import WorkflowInstance, WorkflowInstanceDetails
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions
from temporalio.workflow import Info

__all__ = ["PASSED_THROUGH", "project_packages", "sandbox_runner"]

# The engine is deterministic and stateless; joserfc (and the cryptography it uses)
# verifies signed decisions: pure functions, loaded once outside the sandbox.
PASSED_THROUGH = ("tower", "joserfc", "cryptography")

_ACTIVITY = CommandType.COMMAND_TYPE_SCHEDULE_ACTIVITY_TASK  # local ones too
_VALIDATED: set[type] = set()  # workflow classes already checked in a sandbox, this process


class _Answers(WorkflowInstance):
    """A run's sandbox (the SDK's), its answers to the payload passes kept between
    activations.

    Around every activation the SDK asks the run, per payload sequence, which serialization
    context applies and where an externally stored payload belongs; its sandbox answers
    each by entering the sandbox (compiling a line, swapping ``sys.modules`` and builtins):
    half the worker's Python-thread CPU in a replayed 300-turn chat (docs/benchmarks.md).
    The answers change only when the run is activated, so each is asked once between two
    activations (the run's own identity, once per run). tests/unit/test_sandbox.py checks
    every kept answer against the SDK's.
    """

    def __init__(self, run: WorkflowInstance) -> None:
        self._run = run
        self._contexts: dict[Any, SerializationContext | None] = {}
        self._stores: dict[Any, StorageDriverStoreContext] = {}

    def activate(self, act: WorkflowActivation) -> WorkflowActivationCompletion:
        # The run's commands change here, and only here; its identity (None) never does.
        for answers in (self._contexts, self._stores):
            for key in [k for k in answers if k is not None]:
                del answers[key]
        return self._run.activate(act)

    def get_serialization_context(self, command_info: Any) -> SerializationContext | None:
        if command_info not in self._contexts:
            self._contexts[command_info] = self._run.get_serialization_context(command_info)
        return self._contexts[command_info]

    def get_external_store_context(self, command_info: Any) -> StorageDriverStoreContext:
        if command_info is not None and command_info.command_type == _ACTIVITY:
            # An activity's payloads are stored for the run itself (the SDK's rule: the
            # activity lives and dies with it): the run's own answer, no sandbox entry for
            # each model call.
            command_info = None
        if command_info not in self._stores:
            self._stores[command_info] = self._run.get_external_store_context(command_info)
        return self._stores[command_info]

    def get_info(self) -> Info:
        return self._run.get_info()

    def get_thread_id(self) -> int | None:
        return self._run.get_thread_id()


@dataclass(frozen=True)
class _ValidateOnce(SandboxedWorkflowRunner):
    """The SDK's sandbox, checking each workflow class once per process: the check (a
    throwaway sandbox, about a second for Tower's agents) cannot change its answer while
    the process runs the same code. Every run still gets a fresh sandbox."""

    def prepare_workflow(self, defn: Any) -> None:
        if defn.cls not in _VALIDATED:
            super().prepare_workflow(defn)
            _VALIDATED.add(defn.cls)

    def create_instance(self, det: WorkflowInstanceDetails) -> WorkflowInstance:
        return _Answers(super().create_instance(det))


def sandbox_runner(*passthrough: str) -> SandboxedWorkflowRunner:
    """The sandbox every worker and replayer uses (a replayer must match the worker): the
    engine and the modules named in ``passthrough`` (e.g. tool schemas) loaded once."""
    return _ValidateOnce(restrictions=SandboxRestrictions.default.with_passthrough_modules(
        *PASSED_THROUGH, *passthrough))


def project_packages(workflows: Iterable[type]) -> list[str]:
    """The project's own packages beside its workflows (its tools, scripted answers),
    loaded once outside the sandbox so an agent file imports them plainly; never one
    holding a workflow or a base of one, nor anything installed."""
    own: set[str] = set()
    roots: set[Path] = set()
    for cls in workflows:
        for base in cls.__mro__:
            own.add(base.__module__.split(".")[0])
        top = sys.modules.get(cls.__module__.split(".")[0])
        where = getattr(top, "__file__", None)
        if where is None:
            continue
        path = Path(where).resolve()
        root = path.parent.parent if path.name == "__init__.py" else path.parent
        if "site-packages" not in root.parts and "dist-packages" not in root.parts:
            roots.add(root)
    found = {entry.stem for root in roots for entry in root.iterdir()
             if (entry.is_dir() and (entry / "__init__.py").is_file())
             or (entry.suffix == ".py" and entry.stem.isidentifier())}
    return sorted(found - own - {"tower", "tests", "conftest", "setup"})
