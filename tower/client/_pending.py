"""What waits for a decision, read from Temporal's visibility store only.

A waiting run publishes the role its gate needs (search attribute ``AgentGateRole``) and
what approvers see (memo ``tower_pending_gate``), so listing needs no worker to answer a
query. Roles and agent names go into the query only after a strict name check.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property

from pydantic import ValidationError
from temporalio.client import Client, WorkflowExecution, WorkflowExecutionStatus

from tower.client.errors import ClientError
from tower.contract import search
from tower.contract.pending import PendingView

NAME = re.compile(r"[A-Za-z0-9_.-]{1,50}")
WAITING = f"{search.AGENT_STATUS.name} = 'AWAITING_APPROVAL' AND ExecutionStatus = 'Running'"


@dataclass(frozen=True)
class Waiting:
    """One run waiting at a gate, as visibility shows it. ``memo`` is the request the run
    published (None when this process cannot open it, or the run parked before runs
    published one); ``view`` is that memo read, when it can be."""

    run: str
    agent: str
    node: str
    step: int | None
    started: datetime | None
    memo: object

    @cached_property
    def view(self) -> PendingView | None:
        return view_of(self.memo, self.agent)


def role_query(roles: Iterable[str]) -> str | None:
    """The visibility query for runs awaiting one of ``roles`` (None: no role, no runs)."""
    names = sorted({r for r in roles if NAME.fullmatch(r)})
    if not names:
        return None
    quoted = ", ".join(f"'{r}'" for r in names)
    # Open runs only: a terminated run keeps its last AgentStatus.
    return f"{WAITING} AND {search.AGENT_GATE_ROLE.name} IN ({quoted})"


async def pending(client: Client, *, roles: Iterable[str] | None = None,
                  agent: str | None = None, limit: int = 50) -> list[Waiting]:
    """Runs waiting at a gate, newest first: all of them, or those one of ``roles`` may
    decide, or one ``agent``'s."""
    query: str | None = WAITING
    if roles is not None:
        query = role_query(roles)
        if query is None:
            return []
    if agent:
        if not agent.isidentifier():
            raise ClientError(f"invalid agent name {agent!r}")
        query = f"{query} AND {search.AGENT_NAME.name} = '{agent}'"
    found = []
    async for wf in client.list_workflows(query, limit=limit):
        sa = wf.typed_search_attributes
        found.append(Waiting(run=wf.id, agent=sa.get(search.AGENT_NAME) or "?",
                             node=sa.get(search.AGENT_NODE) or "?",
                             step=sa.get(search.AGENT_STEP), started=wf.start_time,
                             memo=await pending_memo(wf)))
    return found


async def pending_of(client: Client, run: str) -> tuple[WorkflowExecutionStatus | None,
                                                       PendingView | None]:
    """One run's status and pending request (None when nothing waits), from describe()."""
    described = await client.get_workflow_handle(run).describe()
    view = None
    if described.status == WorkflowExecutionStatus.RUNNING:
        agent = described.typed_search_attributes.get(search.AGENT_NAME) or "?"
        view = view_of(await pending_memo(described), agent)
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


def view_of(raw: object, agent: str) -> PendingView | None:
    if raw is None:
        return None
    try:
        view = PendingView.model_validate(raw)
    except ValidationError:
        return None  # a memo this version cannot read is not a decision to offer
    # A run that parked before the inbox published no agent: its search attribute has it.
    return view if view.agent else view.model_copy(update={"agent": agent})
