"""The Tower engine: typed state, reducers, graphs, guards, budgets, the transition log.

Everything here except ``runtime`` and ``context`` is pure and imports no Temporal.
"""

from .engine import (
    Transition,
    advance,
    fail,
    node_error,
    operator_abort,
    operator_retry,
    start,
)
from .errors import IllegalTransition, InvalidGraph, NodeFailed, TowerError
from .graph import DONE, FAILED, START, TERMINALS, Budget, Graph, Machine
from .state import (
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
    "Graph", "IllegalTransition", "InvalidGraph", "Machine", "Message", "NodeError", "NodeFailed",
    "Reducer", "Status", "TowerError", "Transition", "UpdateError", "Usage", "advance",
    "apply_update", "custom", "fail", "node_error", "operator_abort", "operator_retry", "start",
]
