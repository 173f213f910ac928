"""What a run spent on models: per call, per node, per run. The model activity prices each
call, so its figure is in the history and replays unchanged.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from tower.core.state import AgentState, Usage


class CallUsage(BaseModel):
    model_config = ConfigDict(frozen=True)

    step: int
    node: str
    model: str
    usage: Usage


def cost_report(state: AgentState, calls: list[CallUsage]) -> dict[str, Any]:
    """The ``cost`` query's answer: the run's total, each node's and each call's."""
    return {
        "run": _figures(state.usage),
        "nodes": {node: _figures(u) for node, u in sorted(state.node_usage.items())},
        "calls": [{"step": c.step, "node": c.node, "model": c.model, **_figures(c.usage)}
                  for c in calls],
    }


def _figures(u: Usage) -> dict[str, Any]:
    return {"calls": u.calls, "prompt_tokens": u.prompt_tokens,
            "completion_tokens": u.completion_tokens, "tokens": u.tokens,
            "cost_usd": round(u.cost_usd, 8)}
