"""The Temporal layer: the runtime loop, the node context, gates, fan-out, tracing, and
``TowerPlugin`` (tower.temporal.plugin): Tower's settings for clients, workers and replayers.
What a project's worker, registry and tests use is exported here; the rest are this
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
    from tower.temporal._agent import agents_by_name, load_agents, scripts_of
    from tower.temporal._machine_run import MachineRun
    from tower.temporal._process import run_main, serve, stop_on_signals
    from tower.temporal._stream_sink import publish_steps, stop_publishing
    from tower.temporal.payloads import tower_data_converter
    from tower.temporal.plugin import TowerPlugin, WorkerMisconfigured, has_tower_plugin
    from tower.temporal.telemetry import TracingConfigError
    from tower.temporal.worker import build_worker, tool_activities

# Loaded on use: importing one module of this layer does not load the plugin's (nor the
# MCP SDK, an optional extra: tower[mcp]).
_LAZY = {"TowerPlugin": "tower.temporal.plugin", "MachineRun": "tower.temporal._machine_run",
         "agents_by_name": "tower.temporal._agent", "load_agents": "tower.temporal._agent",
         "scripts_of": "tower.temporal._agent", "has_tower_plugin": "tower.temporal.plugin",
         "WorkerMisconfigured": "tower.temporal.plugin",
         "build_worker": "tower.temporal.worker", "tool_activities": "tower.temporal.worker",
         "run_main": "tower.temporal._process", "serve": "tower.temporal._process",
         "stop_on_signals": "tower.temporal._process",
         "publish_steps": "tower.temporal._stream_sink",
         "stop_publishing": "tower.temporal._stream_sink",
         "tower_data_converter": "tower.temporal.payloads",
         "TracingConfigError": "tower.temporal.telemetry",
         "ModelSettings": "tower.activities.model", "PriceError": "tower.activities.prices",
         "WorkerSettings": "tower.activities.own",
         "wal": "tower.activities.wal",  # SQLite in WAL mode, for a tools' database
         **{name: "tower.activities.mcp" for name in (
             "McpConfigError", "McpDiscoveryError", "McpPolicyError", "McpSources",
             "load_sources")}}
__all__ = ["MachineRun", "McpConfigError", "McpDiscoveryError", "McpPolicyError", "McpSources",
           "ModelSettings", "PriceError", "TowerPlugin", "TracingConfigError",
           "WorkerMisconfigured", "WorkerSettings", "agents_by_name", "build_worker",
           "has_tower_plugin",
           "load_agents", "load_sources", "publish_steps", "run_main", "scripts_of", "serve",
           "stop_on_signals", "stop_publishing", "tool_activities", "tower_data_converter", "wal"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
