"""Tower: AI agents as explicit state machines, each run a durable Temporal workflow.

What an agent file needs, in one import line: ``from tower import Graph, AgentState, agent,
...`` (the names in ``__all__``). The rest is layered below it: ``tower.client`` (start,
follow, decide, replay from your own code), ``tower.testing`` (in-process runs, replay),
``tower.temporal`` (``TowerPlugin``, the worker's helpers), ``tower.contract`` (what crosses
to activities and clients), ``tower.activities`` (the model gateway, trust, notifier,
codec, payloads, MCP) and the engine's own ``tower.core``. Every name loads on first use,
so ``import tower.cli`` (``tower --help``) stays free of pydantic and the SDK.
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what __getattr__ loads, typed for mypy
    from tower.contract.decisions import GateStatus
    from tower.contract.failures import EffectRefused, NodeFailed
    from tower.contract.pending import EditLimit
    from tower.contract.wire import ToolCallRequest
    from tower.core import window
    from tower.core.context import Answer, NodeContext
    from tower.core.gates import Gate
    from tower.core.graph import DONE, FAILED, Graph
    from tower.core.policy import stricter
    from tower.core.state import ADD, APPEND, AgentState, Message, custom
    from tower.core.tools import Tool, tool
    from tower.temporal._fanout import FanOutPolicy, fan_out
    from tower.temporal._runtime import AgentWorkflow, EventWorkflow
    from tower.temporal._start import agent

# name -> the module that defines it, imported on first use.
_LAZY = {name: module for module, names in {
    "tower.contract.decisions": ("GateStatus",),
    "tower.contract.pending": ("EditLimit",),
    "tower.contract.wire": ("ToolCallRequest",),
    # The module itself: a chat's context window (WindowPolicy, WindowRef, Reduction).
    "tower.core": ("window",),
    "tower.core.context": ("Answer", "NodeContext"),
    "tower.contract.failures": ("EffectRefused", "NodeFailed"),
    "tower.core.gates": ("Gate",),
    "tower.core.graph": ("DONE", "FAILED", "Graph"),
    "tower.core.policy": ("stricter",),
    "tower.core.state": ("ADD", "APPEND", "AgentState", "Message", "custom"),
    "tower.core.tools": ("Tool", "tool"),
    "tower.temporal._fanout": ("FanOutPolicy", "fan_out"),
    "tower.temporal._runtime": ("AgentWorkflow", "EventWorkflow"),
    "tower.temporal._start": ("agent",),
}.items() for name in names}


class NeedsTowerPlugin(BaseException):
    """A Worker or Replayer without TowerPlugin loaded a Tower agent. A BaseException, so
    that the SDK's "Failed validating workflow" does not bury the one line saying so."""


# TowerPlugin passes all of ``tower`` through: loaded once, outside any run's sandbox.
# Loaded afresh inside one, this module was imported by a worker or replayer without it.
_workflow = sys.modules.get("temporalio.workflow")
_WITHOUT_PLUGIN = _workflow is not None and bool(_workflow.unsafe.in_sandbox())


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tower' has no attribute {name!r}")
    if _WITHOUT_PLUGIN:
        raise NeedsTowerPlugin(
            "Tower agents need TowerPlugin (its converter, sandbox and failure types): "
            "Replayer(workflows=[...], plugins=[TowerPlugin()]), or a Worker on a client "
            "connected with plugins=[TowerPlugin()] (from tower.temporal import TowerPlugin)")
    found = importlib.import_module(module)
    # `window` is a module: `from tower.core import window`.
    value = getattr(found, name) if hasattr(found, name) else importlib.import_module(
        f"{module}.{name}")
    globals()[name] = value  # later lookups skip __getattr__
    return value


__all__ = [
    "ADD",
    "APPEND",
    "AgentState",
    "AgentWorkflow",
    "Answer",
    "DONE",
    "EditLimit",
    "EffectRefused",
    "EventWorkflow",
    "FAILED",
    "FanOutPolicy",
    "Gate",
    "GateStatus",
    "Graph",
    "Message",
    "NodeContext",
    "NodeFailed",
    "ToolCallRequest",
    "Tool",
    "agent",
    "custom",
    "fan_out",
    "stricter",
    "tool",
    "window",
]
