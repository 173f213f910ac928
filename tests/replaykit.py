"""Replay with the example's agents (``tower.temporal.replay``'s machinery, the worker's
sandbox and converter included): for the suite and its history recorders."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from temporalio.client import WorkflowHistory

from tower.temporal.replay import DEFAULT_NAMESPACE, Replayed, load
from tower.temporal.replay import replay as replay_with
from workflows.registry import AGENTS


async def replay(
    histories: Sequence[tuple[str, WorkflowHistory]], *, workflows: Sequence[type] | None = None,
    namespace: str = DEFAULT_NAMESPACE,
) -> list[Replayed]:
    """Replay each history; ``workflows`` replaces the example's agents."""
    return await replay_with(histories, workflows=list(workflows or AGENTS.values()),
                             namespace=namespace)


async def report_unreplayable(folder: Path) -> int:
    """Replay a folder just recorded and name what does not replay: a fixture that fails
    the moment it is written is useless. Returns how many failed."""
    bad = [r for r in await replay(load([folder])) if not r.ok]
    for r in bad:
        print(f"does not replay: {r.source}: {r.failure or '; '.join(r.problems)}")
    return len(bad)
