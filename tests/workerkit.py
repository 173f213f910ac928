"""The example's tools as activities, for a test that assembles a plain ``Worker`` itself
(worker.py's ``build_worker`` binds them through ``TowerPlugin``), and a run's final state."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from temporalio.client import WorkflowFailureError, WorkflowHandle

from tower.contract import names
from tower.contract.failures import AgentFailed, rebuilt
from tower.core.state import AgentState
from tower.temporal.worker import tool_activities
from worker import bindings

S = TypeVar("S", bound=AgentState)


def activities(agents: Sequence[type], *, db_path: str | Path | None = None
               ) -> list[Callable[..., Any]]:
    """The activities of ``agents``' tools on the tools' database at ``db_path``."""
    return tool_activities(agents, bindings(db_path))


async def final_state(handle: WorkflowHandle[Any, Any], result_type: type[S]) -> S:
    """The run's final state, DONE or FAILED (a FAILED run fails its execution). A FAILED
    run's state comes from the ``state`` query (a worker answers it for a closed run);
    anything else re-raises."""
    try:
        return result_type.model_validate(await handle.result())
    except WorkflowFailureError as exc:
        if not isinstance(rebuilt(exc), AgentFailed):
            raise
    return result_type.model_validate(await handle.query(names.STATE.name, result_type=dict))
