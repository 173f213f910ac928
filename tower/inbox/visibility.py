"""Runs waiting for a decision, read from Temporal's visibility store only.

A waiting run publishes the role its gate needs (search attribute ``AgentGateRole``)
and what approvers see (memo ``tower_pending_gate``), so listing needs no worker to answer
a query. Roles and agent names go into the query only after a strict name check.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from pydantic import ValidationError
from temporalio.client import Client, WorkflowExecution, WorkflowExecutionStatus

from tower.contract import search
from tower.contract.pending import PendingView

NAME = re.compile(r"[A-Za-z0-9_.-]{1,50}")


@dataclass(frozen=True)
class Waiting:
    """One run waiting at a gate, as visibility shows it."""

    run: str
    view: PendingView
    started: datetime | None


def role_query(roles: Iterable[str]) -> str | None:
    """The visibility query for runs awaiting one of ``roles`` (None: no role, no runs)."""
    names = sorted({r for r in roles if NAME.fullmatch(r)})
    if not names:
        return None
    quoted = ", ".join(f"'{r}'" for r in names)
    return (f"{search.AGENT_STATUS.name} = 'AWAITING_APPROVAL' AND "
            f"{search.AGENT_GATE_ROLE.name} IN ({quoted}) AND ExecutionStatus = 'Running'")


async def waiting_runs(client: Client, roles: Iterable[str], limit: int = 200) -> list[Waiting]:
    """Runs awaiting a decision that one of ``roles`` may take, newest request first."""
    query = role_query(roles)
    if query is None:
        return []
    found = []
    async for wf in client.list_workflows(query, limit=limit):
        agent = wf.typed_search_attributes.get(search.AGENT_NAME) or "?"
        view = _view(await pending_memo(wf), agent)
        if view is not None:
            found.append(Waiting(run=wf.id, view=view, started=wf.start_time))
    return sorted(found, key=lambda w: w.view.requested_at, reverse=True)


class UnreadableRequest(ValueError):
    """A run's memo holds a pending request that cannot be read (forged, or from a version
    this one cannot read); the message says why."""


async def waiting_run(client: Client, run: str) -> tuple[WorkflowExecutionStatus | None,
                                                         PendingView | None]:
    """One run's status and pending request (None when nothing waits), from describe().
    Raises UnreadableRequest when the run has a pending-request memo it cannot read."""
    described = await client.get_workflow_handle(run).describe()
    view = None
    if described.status == WorkflowExecutionStatus.RUNNING:
        agent = described.typed_search_attributes.get(search.AGENT_NAME) or "?"
        try:
            raw = (await described.memo()).get(search.PENDING_MEMO)
        except Exception:  # whatever the codec or converter raises on bytes a starter chose
            raise UnreadableRequest("its memo cannot be decoded") from None
        view = _view(raw, agent)
        if raw is not None and view is None:
            problem = _problem(raw)
            raise UnreadableRequest(f"its pending request is malformed ({problem})")
    return described.status, view


async def pending_memo(run: WorkflowExecution) -> object:
    """The run's pending-request memo (listed or described), or None when this process
    cannot open its memo.
    Whoever starts a run writes its memo, payload metadata included ("encrypted under k9"):
    one such run must hide itself, not fail the listing for every approver."""
    try:
        return (await run.memo()).get(search.PENDING_MEMO)
    except Exception:  # whatever the codec or converter raises on bytes a starter chose
        return None


def _problem(raw: object) -> str:
    try:
        PendingView.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        return f"{'.'.join(str(p) for p in first['loc']) or 'memo'}: {first['msg']}"
    return "unreadable"


def _view(raw: object, agent: str) -> PendingView | None:
    if raw is None:
        return None
    try:
        view = PendingView.model_validate(raw)
    except ValidationError:
        return None  # a memo this version cannot read is not a decision to offer
    # A run that parked before the inbox published no agent: its search attribute has it.
    return view if view.agent else view.model_copy(update={"agent": agent})
