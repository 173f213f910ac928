"""The search attributes every run keeps current. Register each with the server (`tower
setup` does): an unknown attribute fails the workflow task forever.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from temporalio.client import WorkflowExecutionStatus
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes

from tower.contract.messages import Status

if TYPE_CHECKING:
    from tower.core.graph import Machine
    from tower.core.state import AgentState

AGENT_NAME = SearchAttributeKey.for_keyword("AgentName")
AGENT_NODE = SearchAttributeKey.for_keyword("AgentNode")
AGENT_STATUS = SearchAttributeKey.for_keyword("AgentStatus")
AGENT_STEP = SearchAttributeKey.for_int("AgentStep")
# What the run has spent on models so far: find expensive runs with a visibility query.
AGENT_COST_USD = SearchAttributeKey.for_float("AgentCostUsd")
AGENT_TOKENS = SearchAttributeKey.for_int("AgentTokens")
# The latest error of a run (truncated): why a FAILED run failed, searchable.
AGENT_ERROR = SearchAttributeKey.for_keyword("AgentError")

# Memo key of a run waiting at a gate: what approvers see of the pending request
# (tower.contract.pending.PendingView), so `tower pending` and the inbox list it from
# visibility alone, with no worker answering a query.
PENDING_MEMO = "tower_pending_gate"
# Set (true) on a run whose deployment accepts UNSIGNED decisions: a development setting.
UNSIGNED_DECISIONS = SearchAttributeKey.for_bool("TowerUnsignedDecisions")

# The role a run waiting at a gate needs ("" once decided): an approver's inbox lists
# the runs their roles may decide with one visibility query.
AGENT_GATE_ROLE = SearchAttributeKey.for_keyword("AgentGateRole")

ALL: list[SearchAttributeKey[Any]] = [
    AGENT_NAME, AGENT_NODE, AGENT_STATUS, AGENT_STEP, AGENT_COST_USD, AGENT_TOKENS, AGENT_ERROR,
    AGENT_GATE_ROLE, UNSIGNED_DECISIONS]


def state_attributes(agent: str, state: AgentState) -> list[tuple[SearchAttributeKey[Any], Any]]:
    """What a run publishes of its state (the runtime adds the error and the gate's role)."""
    return [(AGENT_NAME, agent), (AGENT_NODE, state.node), (AGENT_STATUS, state.status.value),
            (AGENT_STEP, state.step), (AGENT_COST_USD, state.usage.cost_usd),
            (AGENT_TOKENS, state.usage.tokens)]


def start_attributes(machine: Machine) -> TypedSearchAttributes:
    """The attributes a run of ``machine`` has after its first move, for
    ``start_workflow(search_attributes=...)``: the run upserts nothing then (one event fewer),
    and its end is read from ExecutionStatus (``status_clause``)."""
    pairs: list[tuple[SearchAttributeKey[Any], Any]] = [
        (AGENT_NAME, machine.name), (AGENT_NODE, machine.entry),
        (AGENT_STATUS, Status.RUNNING.value), (AGENT_STEP, 1), (AGENT_COST_USD, 0.0),
        (AGENT_TOKENS, 0)]
    if machine.gates:
        pairs.append((AGENT_GATE_ROLE, ""))
    return TypedSearchAttributes([SearchAttributePair(key, value) for key, value in pairs])


def started_with_attributes(attributes: TypedSearchAttributes) -> bool:
    """Was a run started with ``start_attributes`` (nothing else sets AgentNode at start)?"""
    return attributes.get(AGENT_NODE) is not None


def status_clause(status: str) -> str:
    """The visibility query clause for runs in ``status``: a completed execution is DONE;
    FAILED is a failed execution or a published FAILED; an open run is its AgentStatus."""
    if status == Status.DONE:
        return f"ExecutionStatus = 'Completed' AND {AGENT_STATUS.name} != 'FAILED'"
    if status == Status.FAILED:
        return f"(ExecutionStatus = 'Failed' OR {AGENT_STATUS.name} = 'FAILED')"
    return f"{AGENT_STATUS.name} = '{status}' AND ExecutionStatus = 'Running'"


def run_status(execution: WorkflowExecutionStatus | None,
               attributes: TypedSearchAttributes) -> str | None:
    """A run's status as ``status_clause`` finds it."""
    published = attributes.get(AGENT_STATUS)
    if execution in (None, WorkflowExecutionStatus.RUNNING) or published == Status.FAILED:
        return published
    if execution == WorkflowExecutionStatus.COMPLETED:
        return Status.DONE.value
    if execution == WorkflowExecutionStatus.FAILED:
        return Status.FAILED.value
    return execution.name
