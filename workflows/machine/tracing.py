"""A span for each state a run passes through: agent, step, from/to, model, tokens.

Uses only the OpenTelemetry API. With no tracer provider installed every call is
a no-op; with Temporal's replay-safe provider (starter/telemetry.py) span ids are
deterministic and a replaying worker exports nothing, so no span is duplicated.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode

from .engine import Transition
from .state import AgentState

TRACER = "tower.agent"


@contextmanager
def state_span(agent: str, state: AgentState) -> Iterator[Span]:
    """Open the span of the state ``state`` stands on; model and tool spans nest in it."""
    tracer = trace.get_tracer(TRACER)
    with tracer.start_as_current_span(f"state {state.node}", attributes={
        "tower.agent": agent, "tower.node": state.node, "tower.step": state.step,
    }) as span:
        yield span


def close_state(span: Span, before: AgentState, after: AgentState,
                moves: list[Transition]) -> None:
    """Record where the state led and what it spent on models."""
    if not moves:
        return  # still parked (a gate): the span ends without a move
    last = moves[-1]
    models = sorted({c.split(":", 1)[1] for t in moves for c in t.calls if c.startswith("model:")})
    tools = [c.split(":", 1)[1] for t in moves for c in t.calls if c.startswith("tool:")]
    prompt = after.usage.prompt_tokens - before.usage.prompt_tokens
    completion = after.usage.completion_tokens - before.usage.completion_tokens
    span.set_attributes({
        "tower.from": last.source, "tower.to": last.target, "tower.reason": last.reason,
        "tower.to_step": last.step, "tower.models": models, "tower.tools": tools,
        "tower.prompt_tokens": prompt, "tower.completion_tokens": completion,
        "tower.tokens": prompt + completion,
        "tower.cost_usd": round(after.usage.cost_usd - before.usage.cost_usd, 8),
        "tower.status": after.status.value,
    })
    if after.node == "FAILED":
        span.set_status(Status(StatusCode.ERROR, last.reason))
