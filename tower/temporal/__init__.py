"""The Temporal layer: the runtime loop, the node context, gates, fan-out, tracing, and
``TowerPlugin`` (tower.temporal.plugin): Tower's settings for clients, workers and replayers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tower.temporal.plugin import TowerPlugin

__all__ = ["TowerPlugin"]


def __getattr__(name: str) -> Any:
    # Loaded on use: importing one module of this layer does not load the plugin's.
    if name == "TowerPlugin":
        from tower.temporal.plugin import TowerPlugin

        return TowerPlugin
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
