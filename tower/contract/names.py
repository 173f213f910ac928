"""Every query, update and signal a run answers, by name, with its input and result
types: the runtime registers its handlers under these names and every client calls them by
these names (``temporal workflow query --name status`` too), so no client imports the
runtime::

    status = await handle.query(STATUS.name, result_type=STATUS.result)
    outcome = await handle.execute_update(DECIDE.name, {"token": jws}, result_type=Outcome)

A result type that is the engine's own model (``Outcome``, ``Transition``...) is named in
the annotation and passed by the caller.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from tower.core.carry import LogSummary
    from tower.core.engine import Transition
    from tower.core.events import Rejection
    from tower.core.gates import Outcome

In = TypeVar("In")
Out = TypeVar("Out")


@dataclass(frozen=True)
class Query(Generic[Out]):
    """A query: no input, answers ``Out`` (``result``: its plain type, when it has one)."""

    name: str
    result: type | None = None


@dataclass(frozen=True)
class Update(Generic[In, Out]):
    """An update: takes ``In``, answers ``Out``; its validator refuses before the history."""

    name: str
    result: type | None = None


@dataclass(frozen=True)
class Signal(Generic[In]):
    """A signal: takes ``In``, answers nothing (refusals go to the run's audit trail)."""

    name: str


# Every agent run (MachineRun).
STATE: Query[dict[str, Any]] = Query("state", dict)  # the state, as JSON
STATUS: Query[str] = Query("status", str)  # RUNNING, WAITING, DONE, ... ("STARTING")
COST: Query[dict[str, Any]] = Query("cost", dict)  # tokens and dollars: run, nodes, calls
TRANSITIONS: Query[list[Transition]] = Query("transitions")  # this run's (not carried)
LOG_SUMMARY: Query[LogSummary] = Query("log_summary")  # of every run of the thread

# A run with gates (AgentWorkflow). A decision is ``{"token": JWS}`` (or ``{"unsigned":
# claims}`` where the deployment allows it).
APPROVALS: Query[dict[str, Any]] = Query("approvals", dict)  # pending, records, refused
DECIDE: Update[dict[str, Any], Outcome] = Update("decide")  # answers with the outcome
DECISION: Signal[dict[str, Any]] = Signal("decision")  # the same, not waited for
REFRESH_TRUST: Signal[None] = Signal("refresh_trust")  # re-read the roster (no authority)

# An event-driven run (EventWorkflow).
EVENT: Signal[dict[str, Any]] = Signal("event")  # joins the inbox, applied in order
SEND_EVENT: Update[dict[str, Any], str] = Update("send_event", str)  # the same, validated
REJECTED: Query[list[Rejection]] = Query("rejected")  # the newest refused events
REJECTED_TOTAL: Query[int] = Query("rejected_total", int)

