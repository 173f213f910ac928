"""The CLI's side of decisions: ``--set`` edits, and the check, before a run starts, that
its input does not loosen the tenant's policy. Making, signing and sending a decision is
the client's (``tower.client._decisions``)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from tower.activities.trust import TrustError, read_trust, trust_dir
from tower.cli import project
from tower.cli.errors import CliError
from tower.client._pending import Deployment
from tower.core.policy import PolicyInvalid, PolicyLoosened, effective


def parse_edits(pairs: list[str] | None) -> dict[str, Any]:
    """``--set field=value``: the value is JSON when it parses (numbers, true), else text."""
    edits: dict[str, Any] = {}
    for pair in pairs or []:
        field, sep, raw = pair.partition("=")
        if not sep or not field.strip():
            raise CliError(f"--set expects field=value, got {pair!r}")
        try:
            edits[field.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            edits[field.strip()] = raw
    return edits


def check_policy(agent: Any, request: BaseModel, tenant: str,
                 root: Path | None = None) -> None:
    """Refuse, before the run starts, an input that would loosen the tenant's policy. Where
    this client cannot read the deployment's trust directory the run itself refuses it."""
    policy_model = getattr(agent, "Policy", None)
    if policy_model is None:
        return
    try:
        snapshot = read_trust(root or trust_dir(), tenant)
    except TrustError:
        return
    try:
        effective(policy_model, snapshot.policy.agents.get(agent.machine.name, {}), request)
    except (PolicyLoosened, PolicyInvalid) as exc:
        raise CliError(f"this input may not start a run: {exc}") from None


def deployment(tenant: str, root: Path | None = None) -> Deployment:
    """What `tower pending` and the inbox trust: the tenant's roster (its attesting worker
    keys), the project's agents and the deployment's task queues (TOWER_TASK_QUEUES,
    comma-separated; default the one queue ``tower``)."""
    from tower.cli.agents import agents

    try:
        roster = read_trust(root or trust_dir(), tenant).roster
        names = frozenset(agents())
    except (TrustError, ValueError) as exc:
        raise CliError(f"cannot tell genuine requests from forged ones: {exc}") from None
    queues = os.environ.get("TOWER_TASK_QUEUES") or project.task_queue()
    return Deployment(roster=roster, agents=names,
                      queues=frozenset(q.strip() for q in queues.split(",") if q.strip()))


def unattested(deployment: Deployment, tenant: str) -> str | None:
    """Why no request can be listed at all (None: the roster enrols an attestation key):
    only requests a worker key of the roster vouched for are shown."""
    if any(m.attests for m in deployment.roster.members):
        return None
    return (f"tenant {tenant!r}'s roster enrols no attestation key, so no worker can vouch "
            "for a request and none is listed: `tower keys worker` makes and enrols one "
            "(docs/production.md)")
