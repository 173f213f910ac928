"""A span for each state a run passes through: agent, step, from/to, model, tokens. Only
the OpenTelemetry API: a no-op without a provider; with Temporal's replay-safe one
(telemetry.py), span ids are deterministic and a replay exports nothing."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from opentelemetry import context, trace
from opentelemetry.trace import Span, Status, StatusCode

from tower.core.engine import Transition
from tower.core.state import AgentState

TRACER = "tower.agent"
# The API's tracer: it follows the provider installed later too, so one serves every run.
_tracer = trace.get_tracer(TRACER)


def installed() -> bool:
    """Whether a tracer provider is installed (without one, every span is dropped)."""
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


@contextmanager
def state_span(agent: str, state: AgentState) -> Iterator[Span]:
    """Open the span of the state ``state`` stands on; model and tool spans nest in it."""
    if not installed():
        yield trace.INVALID_SPAN  # every span would be dropped
        return
    span = _tracer.start_span(f"state {state.node}", attributes={
        "tower.agent": agent, "tower.node": state.node, "tower.step": state.step,
    })
    token = context.attach(trace.set_span_in_context(span))
    try:
        yield span
    except GeneratorExit:
        # The worker evicted the run mid-state and its coroutine is being closed, often in
        # another context (garbage collection), where the token cannot be detached. The
        # state is not over either: leave the span open; replaying the run reopens it.
        raise
    except Exception as exc:
        span.record_exception(exc)
        span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
        _close(span, token)
        raise
    else:
        _close(span, token)


def _close(span: Span, token: object) -> None:
    span.end()
    context.detach(token)  # type: ignore[arg-type]


def close_state(span: Span, before: AgentState, after: AgentState,
                moves: list[Transition]) -> None:
    """Record where the state led and what it spent on models."""
    if not moves or not span.is_recording():
        # Still parked (a gate): the span ends without a move. Not recording (no provider
        # installed): the attributes would be dropped, so they are not computed.
        return
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
