"""What several commands share: agent lookup, input validation, printing a run."""

from __future__ import annotations

import importlib
import json
from typing import Any

from pydantic import BaseModel, ValidationError

from tower.cli.agents import agents
from tower.cli.errors import CliError
from tower.temporal._machine_run import MachineRun


def imported(option: str, spec: str) -> Any:
    """What ``MODULE:NAME`` names (a module that may import the project's packages)."""
    module, _, name = spec.partition(":")
    if not module or not name:
        raise CliError(f"{option} wants MODULE:NAME, got {spec!r}")
    from tower.cli import project

    if project.find() is not None:
        project.root()
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError) as exc:
        raise CliError(f"{option} {spec}: {exc}") from None


def agent_class(name: str) -> type[MachineRun]:
    known = agents()
    try:
        return known[name]
    except KeyError:
        raise CliError(
            f"unknown agent {name!r}; known agents: {', '.join(sorted(known))}") from None


# Input fields a requester never sets, and why.
NOT_FROM_REQUESTERS = {
    "carry": "only the run's own continue-as-new sets it",
    "approvals": "keys and unsigned mode belong to the deployment's roster and policy "
                 "(docs/approvals.md)",
}


def parse_input(agent: type[MachineRun], raw: str) -> BaseModel:
    """``--input`` validated by the agent's Input model; every problem in one line."""
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise CliError(f"--input is not valid JSON: {exc}") from None
    fields = [f for f in agent.Input.model_fields if f not in NOT_FROM_REQUESTERS]
    expected = f"expected fields: {', '.join(fields) or '(none)'}"
    if isinstance(data, dict):
        for name, why in NOT_FROM_REQUESTERS.items():
            if name in data:
                raise CliError(f"input for {agent.machine.name!r} may not set field {name}: "
                               f"{why} ({expected})")
    try:
        return agent.Input.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"field {'.'.join(map(str, e['loc'])) or '(root)'}: {e['msg']}" for e in exc.errors())
        raise CliError(
            f"input for {agent.machine.name!r} is invalid: {problems} ({expected})") from None
