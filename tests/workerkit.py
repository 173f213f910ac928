"""The example's tools as activities, for a test that assembles a plain ``Worker`` itself
(worker.py's ``build_worker`` binds them through ``TowerPlugin``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tower.temporal.worker import tool_activities
from worker import bindings


def activities(agents: Sequence[type], *, db_path: str | Path | None = None
               ) -> list[Callable[..., Any]]:
    """The activities of ``agents``' tools on the tools' database at ``db_path``."""
    return tool_activities(agents, bindings(db_path))
