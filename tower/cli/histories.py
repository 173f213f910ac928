"""Replay with this project's settings: its agents, and its worker's sandbox and converter
(codec, payload store), which ``TowerPlugin`` gives the replayer as it gives the worker,
through the client (``tower.client.replay``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from temporalio.client import WorkflowHistory

from tower.cli.agents import agents
from tower.client._replay import replay as client_replay
from tower.testing.replay import (
    DEFAULT_NAMESPACE,
    HistoryError,
    Replayed,
    history_file_name,
    load,
    recorded_moves,
    workflow_id_of,
    workflow_name,
    workflow_type,
)

__all__ = ["HistoryError", "Replayed", "history_file_name", "load", "recorded_moves", "replay",
           "report_unreplayable", "workflow_id_of", "workflow_name", "workflow_type"]


async def replay(
    histories: Sequence[tuple[str, WorkflowHistory]], *, workflows: Sequence[type] | None = None,
    namespace: str = DEFAULT_NAMESPACE,
) -> list[Replayed]:
    """Replay each history; ``workflows`` replaces the project's agents (for tests of
    variants of an agent)."""
    return await client_replay(histories, workflows=list(workflows or agents().values()),
                               namespace=namespace)


async def report_unreplayable(folder: Path) -> int:
    """Replay a folder just recorded and name what does not replay: a fixture that fails
    the moment it is written is useless. Returns how many failed."""
    bad = [r for r in await replay(load([folder])) if not r.ok]
    for r in bad:
        print(f"does not replay: {r.source}: {r.failure or '; '.join(r.problems)}")
    return len(bad)
