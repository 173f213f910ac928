"""The Tower engine: typed state, reducers, graphs, guards, budgets, the transition log.

Everything here except ``runtime`` and ``context`` is pure and imports no Temporal.
"""

from .engine import Transition, advance, fail, operator_retry, start
from .errors import IllegalTransition, InvalidGraph, NodeFailed, TowerError
from .graph import DONE, FAILED, START, TERMINALS, Budget, Graph, Machine
from .state import (
    ADD,
    APPEND,
    REPLACE,
    AgentState,
    Message,
    Reducer,
    Status,
    UpdateError,
    Usage,
    apply_update,
    custom,
)

__all__ = [
    "ADD", "APPEND", "DONE", "FAILED", "REPLACE", "START", "TERMINALS", "AgentState", "Budget",
    "Graph", "IllegalTransition", "InvalidGraph", "Machine", "Message", "NodeFailed", "Reducer",
    "Status", "TowerError", "Transition", "UpdateError", "Usage", "advance", "apply_update",
    "custom", "fail", "operator_retry", "start",
]
