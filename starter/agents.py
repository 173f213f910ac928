"""The agents the CLI knows: the modules named by ``TOWER_AGENTS`` (or ``--agents``), else
Tower's own. A user's project points it at its own package (``TOWER_AGENTS=workflows``);
the current directory is searched first, as ``python worker.py`` there would."""

from __future__ import annotations

import functools
import os
import sys
from typing import Any

ENV = "TOWER_AGENTS"
DEFAULT = "workflows.registry"


def use_agents(modules: str | None) -> None:
    """``--agents MODULE[,MODULE]``: overrides TOWER_AGENTS for this process."""
    if modules:
        os.environ[ENV] = modules
        agents.cache_clear()


@functools.cache
def agents() -> dict[str, Any]:
    """``{name: agent class}`` from TOWER_AGENTS (comma-separated modules or packages)."""
    from tower import load_agents

    named = [m.strip() for m in os.environ.get(ENV, "").split(",") if m.strip()]
    if not named:
        from workflows.registry import AGENTS

        return dict(AGENTS)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return load_agents(*named)
    except (ImportError, ValueError) as exc:
        raise ValueError(f"{ENV}={','.join(named)}: {exc}") from None


def help_names() -> str:
    """For a command's help: the agents it can name (a broken TOWER_AGENTS says so)."""
    try:
        return "one of: " + ", ".join(sorted(agents()))
    except ValueError as exc:
        return f"an agent's name ({exc})"


def scripted_reply(request: Any) -> Any:
    """The scripted model's answer from the known agents' own scripts (a ModelReply):
    what `tower model-server` and the loopback model server answer with."""
    from activities.scripted import scripted_reply as reply
    from tower import scripts_of

    return reply(request, scripts_of(agents().values()))
