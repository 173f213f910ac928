"""``tower.testing``'s replay helpers with this project's agents (the sandbox and converter
are ``TowerPlugin``'s, as the worker's). A project of your own uses ``tower.testing`` directly:

    import pytest
    from tower.testing import assert_replays, history_files
    from workflows.registry import AGENTS

    @pytest.mark.parametrize("path", history_files("tests/histories"), ids=str)
    async def test_history_replays(path):
        await assert_replays(path, workflows=list(AGENTS.values()))
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tower.cli.agents import agents
from tower.testing.replay import Replayed, history_files
from tower.testing.replay import assert_replays as assert_replays_with

__all__ = ["assert_replays", "history_files"]


async def assert_replays(
    *paths: str | Path, workflows: Sequence[type] | None = None, namespace: str = "default",
) -> list[Replayed]:
    return await assert_replays_with(
        *paths, workflows=list(workflows or agents().values()), namespace=namespace)
