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

from types import CodeType
from typing import Any

from temporalio.worker.workflow_sandbox import _runner

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
