"""Replay histories with a worker's settings: its sandbox and the clients' converter
(codec, payload store), so a history that replays here replays on the worker. The
machinery is the library's (``tower.testing.replay``)."""

from __future__ import annotations

from collections.abc import Sequence

from temporalio.client import WorkflowHistory

from tower.activities.payloads import tower_data_converter
from tower.temporal.unopenable import guarded
from tower.temporal.worker import sandbox_runner
from tower.testing.replay import DEFAULT_NAMESPACE, Replayed, load
from tower.testing.replay import replay as replay_with

# What a project's worker passes through its sandbox (its tool schemas).
PASSTHROUGH = ("activities",)
__all__ = ["Replayed", "load", "replay"]


async def replay(
    histories: Sequence[tuple[str, WorkflowHistory]], *, workflows: Sequence[type],
    namespace: str = DEFAULT_NAMESPACE, passthrough: Sequence[str] = PASSTHROUGH,
) -> list[Replayed]:
    """Replay each ``(source, history)`` (``load`` reads files and folders of them)
    against ``workflows``, the project's agent classes; each result has the transition
    log, the state after every step, and what failed to replay."""
    return await replay_with(
        histories, workflows=list(workflows), namespace=namespace,
        # The worker's exact sandbox and converter: encrypted (TOWER_CODEC_KEYS) and stored
        # payloads read back, an input that could not be opened refused as it was live.
        runner=sandbox_runner(*passthrough), data_converter=guarded(tower_data_converter()))
