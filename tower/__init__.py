"""Tower: AI agents as explicit state machines, each run a durable Temporal workflow.

An agent file needs one import line: ``from tower import Graph, AgentState, agent, ...``.
Every name loads on first use, so ``import tower.cli`` (``tower --help``) and
``import tower.core.x`` stay free of pydantic and the SDK. Types that cross to activities and
clients live in ``tower.contract``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what __getattr__ loads, typed for mypy
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
    from tower.temporal.agent import agent, agents_by_name, load_agents, scripts_of
    from tower.temporal.event_runtime import EventWorkflow
    from tower.temporal.fanout import FanOutPolicy, OnChildFailure, fan_out
    from tower.temporal.machine_run import MachineRun
    from tower.temporal.outcome import AGENT_FAILED, final_state
    from tower.temporal.runtime import AgentWorkflow

# name -> the module that defines it, imported on first use.
_LAZY = {
    "ADD": "tower.core.state",
    "advance": "tower.core.engine",
    "agent": "tower.temporal.agent",
    "AGENT_FAILED": "tower.temporal.outcome",
    "agents_by_name": "tower.temporal.agent",
    "AgentState": "tower.core.state",
    "AgentWorkflow": "tower.temporal.runtime",
    "Answer": "tower.core.context",
    "APPEND": "tower.core.state",
    "apply_update": "tower.core.state",
    "ApprovalSettings": "tower.core.legacy_trust",
    "Budget": "tower.core.graph",
    "Carry": "tower.core.carry",
    "Catalogue": "tower.core.tools",
    "check_log": "tower.core.audit",
    "custom": "tower.core.state",
    "Decision": "tower.contract.decisions",
    "DONE": "tower.core.graph",
    "EffectRefused": "tower.core.errors",
    "EventWorkflow": "tower.temporal.event_runtime",
    "fail": "tower.core.engine",
    "FAILED": "tower.core.graph",
    "fan_out": "tower.temporal.fanout",
    "FanOutPolicy": "tower.temporal.fanout",
    "final_state": "tower.temporal.outcome",
    "Gate": "tower.core.gates",
    "GateStatus": "tower.contract.decisions",
    "Graph": "tower.core.graph",
    "guard_rows": "tower.core.events",
    "IllegalTransition": "tower.core.errors",
    "InvalidGraph": "tower.core.errors",
    "Kind": "tower.core.engine",
    "load_agents": "tower.temporal.agent",
    "LogSummary": "tower.core.carry",
    "Machine": "tower.core.graph",
    "MachineRun": "tower.temporal.machine_run",
    "Message": "tower.core.state",
    "MessageRef": "tower.contract.wire",
    "node_error": "tower.core.engine",
    "NodeContext": "tower.core.context",
    "NodeError": "tower.core.state",
    "NodeFailed": "tower.core.errors",
    "OnChildFailure": "tower.temporal.fanout",
    "operator_abort": "tower.core.engine",
    "operator_retry": "tower.core.engine",
    "Outcome": "tower.core.gates",
    "Reducer": "tower.core.state",
    "Reduction": "tower.contract.wire",
    "REPLACE": "tower.core.state",
    "scripts_of": "tower.temporal.agent",
    "start": "tower.core.engine",
    "START": "tower.core.graph",
    "Status": "tower.core.state",
    "stricter": "tower.core.policy",
    "TERMINALS": "tower.core.graph",
    "to_dot": "tower.core.dot",
    "to_mermaid": "tower.core.mermaid",
    "ToolCallRequest": "tower.contract.wire",
    "ToolDef": "tower.core.tools",
    "ToolSpec": "tower.core.tools",
    "TowerError": "tower.core.errors",
    "Transition": "tower.core.engine",
    "UpdateError": "tower.core.state",
    "Usage": "tower.core.state",
    "Verdict": "tower.contract.decisions",
    "window": "tower.core",
    "WindowPolicy": "tower.core.window",
    "WindowRef": "tower.contract.wire",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tower' has no attribute {name!r}")
    found = importlib.import_module(module)
    # `window` is a module: `from tower.core import window`.
    value = getattr(found, name) if hasattr(found, name) else importlib.import_module(
        f"{module}.{name}")
    globals()[name] = value  # later lookups skip __getattr__
    return value


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
