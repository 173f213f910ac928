"""How a run ends to Temporal: DONE completes the workflow with the final state; FAILED
fails it with a non-retryable ``AgentFailed`` naming the agent, node and step, so a FAILED
run is a failed execution wherever Temporal users look (Web UI, list queries, alerts,
``result()``). ``final_state`` gives a client the final state either way; an operator
recovers a failed run with ``tower retry`` (a reset).
"""

from __future__ import annotations

from typing import Any, TypeVar

from temporalio.client import WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError

from tower.contract import names
from tower.contract.failures import AgentFailed, failure, rebuilt
from tower.core.engine import Transition
from tower.core.state import AgentState

S = TypeVar("S", bound=AgentState)


def agent_failed(agent: str, state: AgentState, last: Transition | None) -> ApplicationError:
    """The error a FAILED run raises to fail its workflow execution."""
    node = last.source if last is not None else state.node
    reason = state.errors[-1] if state.errors else (last.reason if last else "failed")
    return failure(AgentFailed(reason, agent=agent, node=node, step=state.step))


async def final_state(handle: WorkflowHandle[Any, Any], result_type: type[S]) -> S:
    """The run's final state, DONE or FAILED. A FAILED run's state comes from the
    ``state`` query (a worker answers it for a closed run); anything else re-raises."""
    try:
        return result_type.model_validate(await handle.result())
    except WorkflowFailureError as exc:
        if not isinstance(rebuilt(exc), AgentFailed):
            raise
    return result_type.model_validate(await handle.query(names.STATE.name, result_type=dict))
