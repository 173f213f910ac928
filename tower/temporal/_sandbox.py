"""The sandbox every Tower worker and replayer uses: the SDK's, through its public API.

Workflow code runs only inside the sandbox, with every restriction of the SDK's
(tests/unit/test_sandbox.py shows a forbidden call caught). What Tower changes is what
is loaded once outside it (``sandbox_runner``) and how often a workflow class is checked.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

__all__ = ["PASSED_THROUGH", "project_packages", "sandbox_runner"]

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



def project_packages(workflows: Iterable[type]) -> list[str]:
    """The project's own packages beside its workflows (its tools, scripted answers,
    ``worker.py``): loaded once outside the sandbox, as the engine is, so an agent file
    imports them plainly. Never a package holding a workflow or one of its bases (those
    load afresh in each run's sandbox), and nothing from an installed environment."""
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
