"""The Temporal layer: the runtime loop, the node context, gates, fan-out, tracing, and
``TowerPlugin`` (tower.temporal.plugin): Tower's settings for clients, workers and replayers.
What a project's worker uses is exported here, and what an agent that uses Temporal itself
needs (``StoredReply``: an update that returns a model's reply); the rest are this
layer's own."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tower.activities.mcp import McpSources, load_sources
    from tower.activities.model import ModelSettings
    from tower.activities.own import WorkerSettings
    from tower.contract.wire import StoredReply
    from tower.temporal._process import run_main, serve, stop_on_signals
    from tower.temporal.plugin import TowerPlugin
    from tower.temporal.worker import build_worker

# Loaded on use: importing one module of this layer does not load the plugin's (nor the
# MCP SDK, an optional extra: tower[mcp]). The errors a worker's set-up raises are
# TowerErrors (tower.client.TowerError), each with its code.
_LAZY = {"TowerPlugin": "tower.temporal.plugin", "build_worker": "tower.temporal.worker",
         "run_main": "tower.temporal._process", "serve": "tower.temporal._process",
         "stop_on_signals": "tower.temporal._process",
         "ModelSettings": "tower.activities.model", "WorkerSettings": "tower.activities.own",
         "StoredReply": "tower.contract.wire",  # an update's reply, recorded once (.of)
         "McpSources": "tower.activities.mcp", "load_sources": "tower.activities.mcp"}
__all__ = ["McpSources", "ModelSettings", "StoredReply", "TowerPlugin", "WorkerSettings",
           "build_worker", "load_sources", "run_main", "serve", "stop_on_signals"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
