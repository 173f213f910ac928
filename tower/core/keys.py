"""The one rule for idempotency keys: one logical action, one key.

A side effect's key names *what* is being done, never *when* it was attempted nor who
approved it:

    <workflow id>/<chain first run id>/<node>@<visit>/<proposal digest or ->/<tool>#<n>/<args hash>

- chain (workflow id + the chain's first run id): continue-as-new and Temporal's reset
  (``tower retry``, ``tower fork``) keep both; a new run reusing a workflow id starts a new
  chain, a new request.
- node and its visit: the node visit (a reset rolls the visit count back with the state,
  so a fork repeating a visit repeats its action; a loop's next visit is a new one).
- the digest of the proposal the approval of this visit was for (``-`` without a gate):
  a fork, a re-approval, or a token replayed after a reset, for the SAME proposal is the
  same action; a changed proposal is a new one. Not the decision's id: a second decision
  on the same proposal must not pay twice.
- tool, ``n`` (its n-th call in this node visit) and a hash of the arguments: other
  arguments (an edited amount) are another action.

Pure: no Temporal here, so every case is unit-tested.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from tower.contract.decisions import GateStatus
from tower.core.state import AgentState


def action_of(state: AgentState, node: str) -> tuple[int, str]:
    """The request a visit of ``node`` acts on: its visit, and the digest of the proposal
    approved for that visit ("" when no gate approved it)."""
    visit = state.visits.get(node, 0)
    for record in reversed(state.approvals):
        if (record.node == node and record.visit == visit
                and record.status == GateStatus.APPROVED and record.decision is not None):
            return visit, record.decision.proposal  # the digest the approver signed
    return visit, ""


def effect_key(*, workflow_id: str, chain: str, node: str, visit: int, proposal: str,
               tool: str, nth: int, arguments: dict[str, Any]) -> str:
    shown = proposal.removeprefix("sha256:")[:16] or "-"
    return (f"{workflow_id}/{chain}/{node}@{visit}/{shown}/{tool}#{nth}/"
            f"{_digest(arguments)}")


def legacy_effect_key(*, workflow_id: str, chain: str, node: str, decision: str, tool: str,
                      nth: int, arguments: dict[str, Any]) -> str:
    """The key of runs started before ``tower.effects`` (it named the decision): what a
    replay of their histories, and their own reconciliation, must still compute."""
    return (f"{workflow_id}/{chain}/{node}/{decision or '-'}/{tool}#{nth}/"
            f"{_digest(arguments)}")


def _digest(arguments: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(arguments, sort_keys=True, default=str).encode()
                          ).hexdigest()[:16]


def legacy_pattern(key: str) -> tuple[str, str] | None:
    """The prefix and suffix every legacy key of ``key``'s action has, whatever its decision
    (``<wid>/<chain>/<node>/`` … ``/<tool>#<n>/<args hash>``); None for a key not in the
    action format. What a pre-``tower.effects`` record of the same action looks like."""
    parts = key.rsplit("/", 4)
    if len(parts) != 5 or "@" not in parts[1]:
        return None
    head, node_visit, _proposal, tool_nth, digest = parts
    node = node_visit.rsplit("@", 1)[0]
    return f"{head}/{node}/", f"/{tool_nth}/{digest}"
