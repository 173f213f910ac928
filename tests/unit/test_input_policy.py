"""Every agent's input refuses what would loosen the deployment's trust: unknown fields
(``approvals``, ``unsigned``, ``policy``) and a limit above the tenant's — client-side in
`tower run`, before a run starts (the run refuses them too: tests/test_redteam.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tower.cli.approvals import check_policy
from tower.cli.common import CliError, parse_input
from tower.cli.trust_files import dev_trust
from workflows.registry import AGENTS

SMUGGLED: list[dict[str, Any]] = [{"approvals": {"allow_unsigned": True}}, {"unsigned": True},
            {"policy": {"limit_cents": 10**9}}, {"allow_unsigned": True}]


# The gated agents' inputs (the demo's gated runs are in tower/cli/demo.py).
GATED: dict[str, dict[str, Any]] = {
    "refund": {"message": "Please refund $1,200 on invoice INV-2004"},
    "migration": {"database": "shop", "script": "DROP TABLE legacy_notes;"},
}


def example(agent: Any) -> dict[str, Any]:
    """A valid input for ``agent``: its demo input."""
    from tower.cli.demo import requests

    for name, request, _ in requests():
        if name == agent.machine.name:
            return dict(request.model_dump(mode="json", exclude_none=True))
    return GATED.get(agent.machine.name, {})


@pytest.mark.parametrize("name", sorted(AGENTS))
def test_every_agents_input_refuses_smuggled_trust_settings(name: str, tmp_path: Path) -> None:
    agent = AGENTS[name]
    base = example(agent)
    for extra in SMUGGLED:
        raw = {**base, **extra}
        # `approvals` is refused by name (saying where signing settings belong); the rest
        # fail the agent's input model.
        with pytest.raises(CliError, match="is invalid|may not set field approvals"):
            parse_input(agent, json.dumps(raw))
    assert "approvals" not in agent.Input.model_fields  # no agent takes signing settings


def test_a_limit_may_be_lowered_never_raised(tmp_path: Path) -> None:
    dev_trust(tmp_path, "default", approvers={}, agents={"refund": {"limit_cents": 50_000}})
    refund = AGENTS["refund"]
    lower = parse_input(refund, '{"message": "refund $1", "limit_cents": 100}')
    check_policy(refund, lower, "default", tmp_path)  # tightening is fine
    higher = parse_input(refund, '{"message": "refund $1", "limit_cents": 100000000}')
    with pytest.raises(CliError, match="would loosen the tenant's policy"):
        check_policy(refund, higher, "default", tmp_path)
