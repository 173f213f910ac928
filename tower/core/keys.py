"""The one rule for idempotency keys: one logical action, one key.

A side effect's key names *what* is being done, never *when* it was attempted:

    <workflow id>/<chain first run id>/<node>/<approving decision or ->/<tool>#<n>/<args hash>

- chain (workflow id + the chain's first run id): continue-as-new, Temporal's reset
  (``tower retry``, ``tower fork``) keep both, so they repeat an action under the same key;
  a new run that reuses a workflow id starts a new chain.
- node, tool and ``n`` (the n-th call of that tool in this node visit): the same call of the
  same node. No step number and no visit count: an operator taking a run back to a node
  repeats the node's action, it does not invent a new one.
- the decision that approved it: a new approval (a new decision id) is a new action.
- a hash of the arguments: different arguments (a lower amount, another script) are a
  different action.

So a repeat of the same approved action finds the effect already made; a genuinely new
action gets a new key. Pure: no Temporal here, so every case is unit-tested.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


def effect_key(*, workflow_id: str, chain: str, node: str, decision: str, tool: str, nth: int,
               arguments: dict[str, Any]) -> str:
    digest = hashlib.sha256(json.dumps(arguments, sort_keys=True, default=str).encode())
    return (f"{workflow_id}/{chain}/{node}/{decision or '-'}/{tool}#{nth}/"
            f"{digest.hexdigest()[:16]}")
