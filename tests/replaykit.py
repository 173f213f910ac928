"""Replay with the example's agents (``tower.temporal.replay``'s machinery, the worker's
sandbox and converter included)."""

from __future__ import annotations

from collections.abc import Sequence

from temporalio.client import WorkflowHistory

from tower.temporal.replay import DEFAULT_NAMESPACE, Replayed
from tower.temporal.replay import replay as replay_with
from workflows.registry import AGENTS


async def replay(
    histories: Sequence[tuple[str, WorkflowHistory]], *, workflows: Sequence[type] | None = None,
    namespace: str = DEFAULT_NAMESPACE,
) -> list[Replayed]:
    """Replay each history; ``workflows`` replaces the example's agents."""
    return await replay_with(histories, workflows=list(workflows or AGENTS.values()),
                             namespace=namespace)

