"""Replay histories with a worker's settings — ``TowerPlugin``'s sandbox and converter
(codec, payload store), as the worker gets them — so a history that replays here replays on
the worker. The machinery is the library's (``tower.testing.replay``)."""

from __future__ import annotations

from collections.abc import Sequence

from temporalio.client import WorkflowHistory

from tower.temporal.plugin import TowerPlugin
from tower.testing.replay import DEFAULT_NAMESPACE, Replayed, load
from tower.testing.replay import replay as replay_with

__all__ = ["Replayed", "load", "replay"]


async def replay(
    histories: Sequence[tuple[str, WorkflowHistory]], *, workflows: Sequence[type],
    namespace: str = DEFAULT_NAMESPACE, passthrough: Sequence[str] = (),
) -> list[Replayed]:
    """Replay each ``(source, history)`` (``load`` reads files and folders of them)
    against ``workflows``, the project's agent classes; each result has the transition
    log, the state after every step, and what failed to replay. ``passthrough``: modules
    the project's worker passes through its sandbox beyond Tower's defaults."""
    return await replay_with(histories, workflows=list(workflows), namespace=namespace,
                             plugin=TowerPlugin(passthrough=passthrough))
