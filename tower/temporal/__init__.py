"""The Temporal layer: the runtime loop, the node context, gates, fan-out, tracing, and
``TowerPlugin`` (tower.temporal.plugin): Tower's settings for clients, workers and replayers.
What a project's worker uses is exported here, and what an agent that uses Temporal itself
needs (``stored_reply``: an update that returns a model's reply); the rest are this
layer's own."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tower.activities.mcp import (
        McpConfigError,
        McpDiscoveryError,
        McpPolicyError,
        McpSources,
        load_sources,
    )
    from tower.activities.model import ModelSettings
    from tower.activities.own import WorkerSettings
    from tower.activities.prices import PriceError
    from tower.activities.wal import wal
    from tower.contract.wire import StoredReply
    from tower.temporal._process import run_main, serve, stop_on_signals
    from tower.temporal._replies import stored_reply
    from tower.temporal._start import agents_by_name
    from tower.temporal.plugin import TowerPlugin, WorkerMisconfigured
    from tower.temporal.telemetry import TracingConfigError
    from tower.temporal.worker import build_worker, tool_activities

# Loaded on use: importing one module of this layer does not load the plugin's (nor the
# MCP SDK, an optional extra: tower[mcp]).
_LAZY = {"TowerPlugin": "tower.temporal.plugin",
         "agents_by_name": "tower.temporal._start",
         "WorkerMisconfigured": "tower.temporal.plugin",
         "build_worker": "tower.temporal.worker", "tool_activities": "tower.temporal.worker",
         "run_main": "tower.temporal._process", "serve": "tower.temporal._process",
         "stop_on_signals": "tower.temporal._process",
         "TracingConfigError": "tower.temporal.telemetry",
         "ModelSettings": "tower.activities.model", "PriceError": "tower.activities.prices",
         "WorkerSettings": "tower.activities.own",
         "wal": "tower.activities.wal",  # SQLite in WAL mode, for a tools' database
         "StoredReply": "tower.contract.wire", "stored_reply": "tower.temporal._replies",
         **{name: "tower.activities.mcp" for name in (
             "McpConfigError", "McpDiscoveryError", "McpPolicyError", "McpSources",
             "load_sources")}}
__all__ = ["McpConfigError", "McpDiscoveryError", "McpPolicyError", "McpSources",
           "ModelSettings", "PriceError", "StoredReply", "TowerPlugin", "TracingConfigError",
           "WorkerMisconfigured", "WorkerSettings", "agents_by_name", "build_worker",
           "load_sources", "run_main", "serve", "stop_on_signals",
           "stored_reply", "tool_activities", "wal"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
