"""The Tower engine: typed state, reducers, graphs, guards, budgets, the transition log.

The pure core lives in ``tower.core`` (no temporalio), the types that cross to activities and
clients in ``tower.contract``, the Temporal layer in ``tower.temporal``.
"""

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
from tower.core.errors import IllegalTransition, InvalidGraph, NodeFailed, TowerError
from tower.core.graph import DONE, FAILED, START, TERMINALS, Budget, Graph, Machine
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

__all__ = [
    "ADD", "APPEND", "DONE", "FAILED", "REPLACE", "START", "TERMINALS", "AgentState", "Budget",
    "Graph", "IllegalTransition", "InvalidGraph", "Kind", "Machine", "Message", "NodeError",
    "NodeFailed", "Reducer", "Status", "TowerError", "Transition", "UpdateError", "Usage",
    "advance", "apply_update", "custom", "fail", "node_error", "operator_abort", "operator_retry",
    "start",
]
