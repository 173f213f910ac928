"""Which runs the inbox shows, to whom, and what it reads of them (``Scope``, ``waiting_runs``,
``run_story``). Runs waiting for a decision come from Temporal's visibility store only (the client's
``pending``), so the list works while no worker answers. A run's memo is written by whoever
started it: the agent, node and gate it names are checked against this deployment's agents
before anything is drawn or offered, and a request that cannot be read is left out of the
list (its own page says why).

A signed-in user sees a run only when one of their roles may decide its open gate, or could
have decided a gate it has passed, or when they hold a watcher role (read-only). For
everyone else the run does not exist: the same 404 as for a run id nobody started
(docs/inbox.md, "Who sees what").
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

from tower.cli.agents import agents
from tower.cli.inbox.identity import Approver
from tower.client import pending
from tower.client._pending import Deployment, Waiting
from tower.contract import names
from tower.contract.pending import PendingView
from tower.core.pictures import machine_svg

QUERY_SECONDS = 3.0  # a missing worker makes the page say so, never hang
MAX_MESSAGES = 30
MAX_CHARS = 2000


async def waiting_runs(client: Client, roles: Iterable[str], limit: int = 200,
                       deployment: Deployment | None = None) -> list[Waiting]:
    """Runs awaiting a decision that one of ``roles`` may take, newest request first; a run
    whose request this inbox cannot read, or could not have been made by an agent of this
    deployment (or, with ``deployment``, that its worker did not attest), is left out."""
    found = [w for w in await pending(client, roles=roles, limit=limit, deployment=deployment)
             if w.view is not None and not_ours(w.view) is None]
    return sorted(found, key=lambda w: w.view.requested_at if w.view else 0, reverse=True)


def not_ours(view: PendingView) -> str | None:
    """Why no agent of this deployment could have made ``view`` (it names an agent, node or
    gate the deployment does not have), else None."""
    agent = agents().get(view.agent)
    if agent is None:
        return f"it names agent {view.agent!r}, which this deployment does not have"
    if view.node not in agent.machine.nodes:
        return f"agent {view.agent!r} has no node {view.node!r}"
    gate = agent.machine.gates.get(view.node)
    if gate is None or gate.name != view.gate:
        return f"agent {view.agent!r} has no gate {view.gate!r} at node {view.node!r}"
    return None


@functools.lru_cache(maxsize=64)
def picture(agent: str, node: str) -> str:
    """The SVG of ``agent`` waiting at ``node`` (both checked by ``not_ours``)."""
    return machine_svg(agents()[agent].machine, node)


@dataclass(frozen=True)
class RunStory:
    """What the decision page shows beside the request."""

    messages: list[dict[str, str]] = field(default_factory=list)
    last_request: str = ""  # what became of the last approval request
    last_status: str = ""  # its status (GateStatus's value): what the pages read
    outcome: str = ""  # how a finished run ended (its last reply)
    answered: bool = True  # False: no worker answered within QUERY_SECONDS
    # The run itself says its deployment accepts UNSIGNED decisions. Never read from the
    # TowerUnsignedDecisions search attribute: whoever starts a run can set that one.
    unsigned: bool = False
    # The roles of the gates the run recorded (open or closed): who may see it.
    gate_roles: frozenset[str] = frozenset()


async def run_story(client: Client, run: str, status: WorkflowExecutionStatus | None) -> RunStory:
    handle = client.get_workflow_handle(run, result_type=dict)
    try:
        if status == WorkflowExecutionStatus.COMPLETED:
            state = await asyncio.wait_for(handle.result(), QUERY_SECONDS)
        elif status in (WorkflowExecutionStatus.RUNNING, WorkflowExecutionStatus.FAILED):
            # A FAILED run is a failed execution: a worker answers its state query.
            state = await asyncio.wait_for(handle.query(names.STATE.name, result_type=dict),
                                           QUERY_SECONDS)
        else:
            return RunStory()
    except (TimeoutError, RPCError):
        return RunStory(answered=False)
    messages = [{"role": str(m.get("role", "")), "name": str(m.get("name") or ""),
                 "content": _short(str(m.get("content", "")))}
                for m in state.get("messages", []) if isinstance(m, dict)][-MAX_MESSAGES:]
    replies = [m["content"] for m in messages if m["role"] == "assistant"]
    records = [r for r in state.get("approvals") or [] if isinstance(r, dict)]
    last = records[-1] if records else {}
    return RunStory(messages=messages, last_request=last_request(last),
                    last_status=str(last.get("status") or ""),
                    outcome=f"{state.get('status', '')}: {replies[-1] if replies else ''}"
                    .rstrip(": "), unsigned=state.get("unsigned_decisions") is True,
                    gate_roles=frozenset(str(r["role"]) for r in records if r.get("role")))


def last_request(r: dict[str, Any]) -> str:
    if not r:
        return ""
    decided = r.get("decision") or {}
    text = f"gate {r.get('gate')}: {r.get('status')}"
    if decided:
        text += f" by {decided.get('approver')} ({decided.get('role')})"
        if decided.get("note"):
            text += f": {decided['note']}"
    if r.get("reason"):
        text += f" — {r['reason']}"
    return text


def _short(text: str) -> str:
    return text if len(text) <= MAX_CHARS else text[: MAX_CHARS - 1] + "…"


@dataclass(frozen=True)
class Scope:
    """The inbox's visibility rule. ``watchers``: roles that may read every run of the
    tenant and decide none (empty unless the deployment configures one)."""

    watchers: frozenset[str] = frozenset()

    def watches(self, approver: Approver) -> bool:
        return bool(self.watchers & set(approver.roles))

    def list_roles(self, approver: Approver) -> set[str]:
        """The gate roles whose waiting runs the user's list shows: their own roles, or
        every gate role of the deployment's agents for a watcher."""
        roles = set(approver.roles)
        return roles | gate_roles() if self.watches(approver) else roles

    async def may_see(self, approver: Approver, view: PendingView | None,
                      past_roles: Callable[[], Awaitable[Iterable[str]]]) -> bool:
        """``view``: the open request (None if nothing waits); ``past_roles``: the roles of
        the gates the run recorded, asked for (a query) only when nothing else decides."""
        mine = set(approver.roles)
        if self.watches(approver) or (view is not None and view.role in mine):
            return True
        # Only roles some gate of this deployment's agents needs: a state that names a
        # made-up role grants nothing.
        return bool(mine & set(await past_roles()) & gate_roles())


def not_found(run: str, tenant: str) -> str:
    """The one answer for a run that is not there or not the user's to see."""
    return f"No run {run!r} in tenant {tenant!r}."


def gate_roles() -> frozenset[str]:
    """Every role a gate of this deployment's agents needs (``agents()`` is cached)."""
    return frozenset(gate.role for agent in agents().values()
                     for gate in agent.machine.gates.values())
