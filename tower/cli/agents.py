"""The agents the CLI knows: the project's ``workflows/registry.py`` ``AGENTS`` when it has
one, else every ``@agent`` class in its ``workflows`` package, or ``--agents MODULE,...``."""

from __future__ import annotations

import functools
import importlib.util
from typing import Any

_modules: list[str] = []


def use_agents(modules: str | None) -> None:
    _modules[:] = [m.strip() for m in (modules or "").split(",") if m.strip()]
    agents.cache_clear()


@functools.cache
def agents() -> dict[str, Any]:
    from tower.cli import project
    from tower.contract.failures import InvalidGraph
    from tower.temporal._start import load_agents

    folder = project.root()
    try:
        if _modules:
            return load_agents(*_modules)
        if importlib.util.find_spec("workflows.registry") is not None:
            return dict(importlib.import_module("workflows.registry").AGENTS)
        return load_agents("workflows")
    except (ImportError, ValueError, AttributeError, InvalidGraph) as exc:
        where = ",".join(_modules) or f"{folder}/workflows"
        raise ValueError(f"cannot load the agents of {where}: {exc}") from None


def project_agents() -> list[Any]:
    """The project's agents, to read a closed run's log with no worker; none outside a
    project (the log then comes from a worker, or is not shown)."""
    try:
        return list(agents().values())
    except ValueError:
        return []


def help_names() -> str:
    """For a command's help: the agents it can name (outside a project, says so)."""
    from tower.cli.errors import CliError

    try:
        return "one of: " + ", ".join(sorted(agents()))
    except (ValueError, CliError) as exc:
        return f"an agent's name ({exc})"


def scripted_reply(request: Any) -> Any:
    """The scripted model's answer from the known agents' own scripts (a ModelReply):
    what `tower model-server` and the loopback model server answer with."""
    from tower.activities.scripted import scripted_reply as reply
    from tower.temporal._start import scripts_of

    return reply(request, scripts_of(agents().values()))
