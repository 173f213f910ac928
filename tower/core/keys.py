"""The one rule for idempotency keys: one logical action, one key.

A side effect's key names *what* is being done, never *when* it was attempted nor who
approved it. A node visit that carries out an approved request acts for that request; any
other visit acts for its own call:

    approved request: <workflow id>/<chain first run id>/<gate>@<visit>/<proposal digest>/<tool>#<n>
    no gate:          <workflow id>/<chain first run id>/<node>@<visit>/-/<tool>#<n>/<args hash>

- chain (workflow id + the chain's first run id): continue-as-new and Temporal's reset
  (``tower retry``, ``tower fork``) keep both; a new run reusing a workflow id starts a new
  chain, a new request.
- an approved request is what the approver signed, less the Temporal run id a reset
  replaces: the gate, the visit of its node the request was opened for (one request per
  visit; a reset rolls the visit back with the state, a loop's next visit is a new request)
  and the digest of the proposal the approver was shown. Not the decision, not its edits,
  not the arguments they make: every re-approval of the request — after a fork, a retry
  from the gate's node, a reset to before the gate, a replayed token, with or without
  edits — returns the first effect and acts on nothing. A re-planned proposal (another
  digest) is a new request.
- without a gate, the node visit and a hash of the arguments: a retry or a fork repeating
  the same call finds it; other arguments are another action.
- tool and ``n`` (its n-th call in this node visit): a node making two calls of a tool
  for one request makes two effects, each found again on a repeat.

Pure: no Temporal here, so every case is unit-tested.
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
    """What a visit of ``node`` may do, as the runtime knows it: the run's limits (each
    field of the agent's ``policy`` model that its state records: the state is the run's
    truth, across continue-as-new and in a test) and the approval of this visit, if a gate
    gave one."""
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
    return f"{head}/{action.node}@{action.visit}/-/{tool}#{nth}/{_digest(arguments)}"


def _digest(arguments: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(arguments, sort_keys=True, default=str).encode()
                          ).hexdigest()[:16]
