"""What waits for a decision, read from Temporal's visibility store alone (the search
attribute ``AgentGateRole`` and the memo ``tower_pending_gate``): no worker needed.

Anyone who may start a workflow can start one that looks parked. Given the ``Deployment``
(roster, agent types, queues), a listing asks only for the deployment's agents on its
queues and keeps a run only when the worker's attestation in its memo verifies and names
that very run.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property

from pydantic import ValidationError
from temporalio.client import Client, WorkflowExecution, WorkflowExecutionStatus

from tower.client.errors import ClientError
from tower.contract import search
from tower.contract.decisions import digest_of
from tower.contract.failures import Code
from tower.contract.pending import PendingView
from tower.contract.trust import AttestClaims, Roster
from tower.core.signing import SignatureRefused, verify_attestation

NAME = re.compile(r"[A-Za-z0-9_.-]{1,50}")
QUEUE = re.compile(r"[A-Za-z0-9_.:/@-]{1,200}")
WAITING = f"{search.AGENT_STATUS.name} = 'AWAITING_APPROVAL' AND ExecutionStatus = 'Running'"


@dataclass(frozen=True)
class Waiting:
    """One run waiting at a gate, as visibility shows it; ``memo`` None when this process
    cannot open it."""

    run: str
    agent: str
    node: str
    step: int | None
    started: datetime | None
    memo: object

    @cached_property
    def view(self) -> PendingView | None:
        return view_of(self.memo, self.agent)


@dataclass(frozen=True)
class Deployment:
    """What a listing trusts: the roster (members that ``attests`` vouch for requests), and
    the deployment's agent types and task queues."""

    roster: Roster
    agents: frozenset[str]
    queues: frozenset[str]

    def query(self) -> str:
        """The visibility filter: only the deployment's agent types on its queues."""
        agents = sorted(a for a in self.agents if NAME.fullmatch(a))
        queues = sorted(q for q in self.queues if QUEUE.fullmatch(q))
        if not agents or not queues:
            return "WorkflowType = '-'"  # nothing of this deployment: nothing listed
        return (f"TaskQueue IN ({', '.join(repr(q) for q in queues)}) AND "
                f"WorkflowType IN ({', '.join(repr(a) for a in agents)})")

    def refusal(self, run: WorkflowExecution, view: PendingView | None,
                now: float | None = None) -> str | None:
        """Why ``run``'s pending request is not a genuine one of this deployment (None: it is):
        the attestation must verify and name this very execution, agent, queue, gate, step and
        the digest of the proposal the memo shows."""
        if run.workflow_type not in self.agents or run.task_queue not in self.queues:
            return (f"agent {run.workflow_type!r} on task queue {run.task_queue!r} is not "
                    "one of this deployment's")
        if view is None or not view.attestation:
            return "no worker of this deployment vouched for its request (no attestation)"
        try:
            claims = verify_attestation(view.attestation, self.roster,
                                        now=time.time() if now is None else now)
        except SignatureRefused as exc:
            return f"its attestation does not verify: {exc}"
        return mismatch(run, view, claims)


def mismatch(run: WorkflowExecution, view: PendingView, claims: AttestClaims) -> str | None:
    """Why a verified attestation is not this execution's request as its memo shows it."""
    wanted = {"run": run.id, "execution": run.run_id, "agent": run.workflow_type,
              "task_queue": run.task_queue, "gate": view.gate, "step": view.step,
              "proposal": view.proposal_digest}
    wrong = [k for k, v in wanted.items() if getattr(claims, k) != v]
    if view.agent != run.workflow_type:
        wrong.append("memo agent")
    if wrong:
        return f"its attestation is for another request ({', '.join(wrong)} differ)"
    if not view.shown:
        return "its memo does not show the whole proposal (a run from an older version)"
    try:
        digest = digest_of(view.shown)
    except ValueError:  # ProposalNotCanonical, or text UTF-8 cannot hold (a lone surrogate)
        return "the proposal its memo shows cannot be canonicalized (RFC 8785)"
    if claims.proposal != digest:
        return "the proposal its memo shows is not the one attested (digests differ)"
    shown = view.shown
    if (shown.get("gate"), shown.get("node"), shown.get("when"), shown.get("editable")) != (
            view.gate, view.node, view.when, sorted(view.editable)):
        return "its memo's gate, node or editable fields differ from the proposal attested"
    return None


def role_query(roles: Iterable[str]) -> str | None:
    """The visibility query for runs awaiting one of ``roles`` (None: no role, no runs)."""
    names = sorted({r for r in roles if NAME.fullmatch(r)})
    if not names:
        return None
    quoted = ", ".join(f"'{r}'" for r in names)
    # Open runs only: a terminated run keeps its last AgentStatus.
    return f"{WAITING} AND {search.AGENT_GATE_ROLE.name} IN ({quoted})"


async def pending(client: Client, *, roles: Iterable[str] | None = None,
                  agent: str | None = None, limit: int = 50,
                  deployment: Deployment | None = None) -> list[Waiting]:
    """Runs waiting at a gate, newest first (all, those ``roles`` may decide, or one
    ``agent``'s). With ``deployment``: only genuine requests, paging until ``limit``; without,
    the first ``limit`` runs whatever their memo says (unverified)."""
    query: str | None = WAITING
    if roles is not None:
        query = role_query(roles)
        if query is None:
            return []
    if agent:
        if not agent.isidentifier():
            raise ClientError(f"invalid agent name {agent!r}")
        query = f"{query} AND {search.AGENT_NAME.name} = '{agent}'"
    if deployment is not None:
        query = f"{query} AND {deployment.query()}"
    found: list[Waiting] = []
    now = time.time()
    async for wf in client.list_workflows(query, limit=None if deployment else limit,
                                          page_size=1000):
        sa = wf.typed_search_attributes
        waiting = Waiting(run=wf.id, agent=sa.get(search.AGENT_NAME) or "?",
                          node=sa.get(search.AGENT_NODE) or "?",
                          step=sa.get(search.AGENT_STEP), started=wf.start_time,
                          memo=await pending_memo(wf))
        if deployment is not None and deployment.refusal(wf, waiting.view, now) is not None:
            continue
        found.append(waiting)
        if len(found) >= limit:
            break
    return found


class NotGenuine(ClientError):
    """A run's pending request is not one a worker of this deployment vouched for."""

    CODE = Code.NOT_GENUINE


async def pending_of(client: Client, run: str, deployment: Deployment | None = None
                     ) -> tuple[WorkflowExecutionStatus | None, PendingView | None]:
    """One run's status and pending request (None when nothing waits), from describe().
    ``NotGenuine`` saying why when the run has a pending-request memo that cannot be read,
    or (with ``deployment``) one no worker of the deployment attested."""
    described = await client.get_workflow_handle(run).describe()
    view = None
    if described.status == WorkflowExecutionStatus.RUNNING:
        agent = described.typed_search_attributes.get(search.AGENT_NAME) or "?"
        try:
            raw = (await described.memo()).get(search.PENDING_MEMO)
        except Exception:  # whatever the codec or converter raises on bytes a starter chose
            raise NotGenuine("its memo cannot be decoded") from None
        view = view_of(raw, agent)
        if raw is not None and view is None:
            raise NotGenuine(f"its pending request is malformed ({_problem(raw)})")
        why = deployment.refusal(described, view) if deployment and view else None
        if why is not None:
            raise NotGenuine(f"it is not a genuine request of this deployment: {why}")
    return described.status, view


def _problem(raw: object) -> str:
    try:
        PendingView.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        return f"{'.'.join(str(p) for p in first['loc']) or 'memo'}: {first['msg']}"
    return "unreadable"


async def pending_memo(run: WorkflowExecution) -> object:
    """The run's pending-request memo, or None when this process cannot open it: whoever
    starts a run writes its memo, and one such run must hide itself, not fail the listing."""
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
