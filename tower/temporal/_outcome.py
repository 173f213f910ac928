"""How a run ends to Temporal: DONE completes the workflow with the final state; FAILED
fails it with a non-retryable ``AgentFailed`` naming the agent, node and step, so a FAILED
run is a failed execution wherever Temporal users look (Web UI, list queries, alerts,
``result()``). ``tower.client._runs.run_state`` gives a client the final state either
way; an operator recovers a failed run with ``tower retry`` (a reset).
"""

from __future__ import annotations

from temporalio.exceptions import ApplicationError

from tower.contract.failures import AgentFailed, failure
from tower.core.engine import Transition
from tower.core.state import AgentState


def agent_failed(agent: str, state: AgentState, last: Transition | None) -> ApplicationError:
    """The error a FAILED run raises to fail its workflow execution."""
    node = last.source if last is not None else state.node
    reason = state.errors[-1] if state.errors else (last.reason if last else "failed")
    return failure(AgentFailed(reason, agent=agent, node=node, step=state.step))
