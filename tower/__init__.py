"""Tower: AI agents as explicit state machines, each run a durable Temporal workflow.

An agent file needs one import line: ``from tower import Graph, AgentState, agent, ...``.
The pure core (``tower.core``: state, reducers, graph, one step, the transition log) is
imported here eagerly and never loads temporalio; the Temporal layer's names
(``AgentWorkflow``, ``agent``, ``fan_out``, ...) load on first use, so ``import tower``
and ``import tower.core.x`` stay free of the SDK. Types that cross to activities and
clients live in ``tower.contract``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from tower.contract.decisions import Decision, GateStatus, Verdict
from tower.contract.wire import MessageRef, Reduction, ToolCallRequest, WindowRef
from tower.core import window
from tower.core.audit import check_log
from tower.core.carry import Carry, LogSummary
from tower.core.context import Answer, NodeContext
from tower.core.dot import to_dot
from tower.core.engine import (
    Kind,
    Transition,
    advance,
    fail,
    node_error,
    operator_abort,
    operator_retry,
    start,
)
from tower.core.errors import (
    EffectRefused,
    IllegalTransition,
    InvalidGraph,
    NodeFailed,
    TowerError,
)
from tower.core.events import guard_rows
from tower.core.gates import Gate, Outcome
from tower.core.graph import DONE, FAILED, START, TERMINALS, Budget, Graph, Machine
from tower.core.legacy_trust import ApprovalSettings
from tower.core.mermaid import to_mermaid
from tower.core.policy import stricter
from tower.core.state import (
    ADD,
    APPEND,
    REPLACE,
    AgentState,
    Message,
    NodeError,
    Reducer,
    Status,
    UpdateError,
    Usage,
    apply_update,
    custom,
)
from tower.core.tools import Catalogue, ToolDef, ToolSpec
from tower.core.window import WindowPolicy

if TYPE_CHECKING:  # what __getattr__ loads lazily, typed for mypy
    from tower.temporal.agent import agent, agents_by_name, load_agents, scripts_of
    from tower.temporal.event_runtime import EventWorkflow
    from tower.temporal.fanout import FanOutPolicy, OnChildFailure, fan_out
    from tower.temporal.machine_run import MachineRun
    from tower.temporal.outcome import AGENT_FAILED, final_state
    from tower.temporal.runtime import AgentWorkflow

# The Temporal layer, loaded on first use: name -> module.
_LAZY = {
    "AgentWorkflow": "tower.temporal.runtime",
    "AGENT_FAILED": "tower.temporal.outcome", "final_state": "tower.temporal.outcome",
    "EventWorkflow": "tower.temporal.event_runtime", "MachineRun": "tower.temporal.machine_run",
    "FanOutPolicy": "tower.temporal.fanout", "OnChildFailure": "tower.temporal.fanout",
    "fan_out": "tower.temporal.fanout",
    "agent": "tower.temporal.agent", "agents_by_name": "tower.temporal.agent",
    "load_agents": "tower.temporal.agent", "scripts_of": "tower.temporal.agent",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tower' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = [
    "ADD", "AGENT_FAILED", "APPEND", "DONE", "FAILED", "REPLACE", "START", "TERMINALS",
    "AgentState", "AgentWorkflow", "Answer", "ApprovalSettings", "Budget", "Carry", "Catalogue",
    "Decision", "EffectRefused", "EventWorkflow", "FanOutPolicy", "Gate", "GateStatus", "Graph",
    "IllegalTransition", "InvalidGraph", "Kind", "LogSummary", "Machine", "MachineRun", "Message",
    "MessageRef", "NodeContext", "NodeError", "NodeFailed", "OnChildFailure", "Outcome", "Reducer",
    "Reduction", "Status", "ToolCallRequest", "ToolDef", "ToolSpec", "TowerError", "Transition",
    "UpdateError", "Usage", "Verdict", "WindowPolicy", "WindowRef", "advance", "agent",
    "agents_by_name", "apply_update", "check_log", "custom", "fail", "fan_out", "final_state",
    "guard_rows", "load_agents", "node_error", "operator_abort", "operator_retry", "scripts_of",
    "start", "stricter", "to_dot", "to_mermaid", "window",
]
