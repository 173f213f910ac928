"""The one rule for idempotency keys: one logical action, one key, naming *what* is done,
never when it was attempted nor who approved it::

    approved request: <workflow id>/<chain first run id>/<gate>@<visit>/<proposal digest>/<tool>#<n>
    no gate:          <workflow id>/<chain first run id>/<node>@<visit>/-/<tool>#<n>/<args hash>

Continue-as-new and resets (``tower retry``, ``tower fork``) keep the chain; a new run
reusing the workflow id starts a new one. An approved request is what the approver signed
less the run id a reset replaces: every re-approval of it (a fork, a retry, a replayed
token, with or without edits) returns the first effect; a re-planned proposal is a new
request. Without a gate, a repeat of the same call finds it; other arguments are another
action. ``n`` counts a tool's calls in one visit.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from tower.contract.decisions import GateRecord, GateStatus
from tower.contract.wire import Authority
from tower.core.state import AgentState


@dataclass(frozen=True)
class Action:
    """What a visit of ``node`` acts for: the approved request of ``gate`` (the digest of
    the proposal its approver signed), or, with ``gate`` empty, the visit's own calls."""

    node: str
    visit: int
    gate: str = ""
    proposal: str = ""


def approved_request(state: AgentState, node: str) -> GateRecord | None:
    """The request a gate approved for this visit of ``node`` (None: no gate approved it)."""
    visit = state.visits.get(node, 0)
    return next((r for r in reversed(state.approvals) if r.node == node and r.visit == visit
                 and r.status == GateStatus.APPROVED and r.decision is not None), None)


def action_of(state: AgentState, node: str) -> Action:
    """The action a visit of ``node`` carries out, read from the run's recorded state."""
    visit, request = state.visits.get(node, 0), approved_request(state, node)
    if request is None or request.decision is None:
        return Action(node, visit)
    return Action(node, visit, request.gate, request.decision.proposal)


def authority_of(state: AgentState, node: str, policy: Any = None) -> Authority:
    """What a visit of ``node`` may do: the run's limits (the fields of the agent's
    ``policy`` model its state records) and this visit's approval, if a gate gave one."""
    request = approved_request(state, node)
    fields = policy.model_fields if isinstance(policy, type) and issubclass(
        policy, BaseModel) else {}
    limits = {f: getattr(state, f) for f in fields if f in type(state).model_fields}
    policy = to_jsonable_python(limits)
    if request is None or request.decision is None:
        return Authority(limits=policy)
    return Authority(limits=policy, decision_id=request.decision.decision_id,
                     proposal=dict(request.proposal), edits=dict(request.decision.edits))


def effect_key(*, workflow_id: str, chain: str, action: Action, tool: str, nth: int,
               arguments: dict[str, Any]) -> str:
    head = f"{workflow_id}/{chain}"
    if action.gate:
        digest = action.proposal.removeprefix("sha256:")[:16]
        return f"{head}/{action.gate}@{action.visit}/{digest}/{tool}#{nth}"
    args = hashlib.sha256(json.dumps(arguments, sort_keys=True, default=str).encode())
    return f"{head}/{action.node}@{action.visit}/-/{tool}#{nth}/{args.hexdigest()[:16]}"
