"""Replay with this project's settings: its agents (TOWER_AGENTS), its worker's sandbox
and its clients' converter (codec). The machinery is the library's (tower.testing.replay)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from temporalio.client import WorkflowHistory

from tower.activities.payloads import tower_data_converter
from tower.cli.agents import agents
from tower.temporal.unopenable import guarded
from tower.temporal.worker import sandbox_runner
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
from tower.testing.replay import replay as replay_with

# What worker.py passes through its sandbox (not imported from it: the CLI may be serving
# a project whose own worker.py and workflows/ come first on the path).
PASSTHROUGH = ("activities",)
__all__ = ["HistoryError", "Replayed", "history_file_name", "load", "recorded_moves", "replay",
           "report_unreplayable", "workflow_id_of", "workflow_name", "workflow_type"]


async def replay(
    histories: Sequence[tuple[str, WorkflowHistory]], *, workflows: Sequence[type] | None = None,
    namespace: str = DEFAULT_NAMESPACE,
) -> list[Replayed]:
    """Replay each history; ``workflows`` replaces the project's agents (for tests of
    variants of an agent)."""
    return await replay_with(
        histories, workflows=list(workflows or agents().values()), namespace=namespace,
        # The worker's exact sandbox and converter: encrypted (TOWER_CODEC_KEYS) and stored
        # payloads read back, an input that could not be opened refused as it was live.
        runner=sandbox_runner(*PASSTHROUGH), data_converter=guarded(tower_data_converter()))


async def report_unreplayable(folder: Path) -> int:
    """Replay a folder just recorded and name what does not replay: a fixture that fails
    the moment it is written is useless. Returns how many failed."""
    bad = [r for r in await replay(load([folder])) if not r.ok]
    for r in bad:
        print(f"does not replay: {r.source}: {r.failure or '; '.join(r.problems)}")
    return len(bad)
