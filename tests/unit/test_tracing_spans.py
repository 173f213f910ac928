"""The state span's context handling, without a server: a run evicted mid-state has its
coroutine closed in another context, and that must not log an error or end the span."""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Generator

import pytest
from opentelemetry import trace

from tower import AgentState
from tower.temporal.tracing import state_span


class Gate:
    """An await that never comes back: the run parks here."""

    def __await__(self) -> Generator[str, None, None]:
        yield "parked"


async def parked(seen: list[trace.Span]) -> None:
    with state_span("refund", AgentState()) as span:
        seen.append(span)
        await Gate()


def test_a_state_closed_from_another_context_logs_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR, logger="opentelemetry.context")
    seen: list[trace.Span] = []
    coro = parked(seen)
    assert contextvars.copy_context().run(coro.send, None) == "parked"
    assert seen, "the state span was opened"
    contextvars.Context().run(coro.close)  # what eviction + garbage collection does
    assert not [r for r in caplog.records if "detach" in r.getMessage()], caplog.text


async def test_a_state_that_ends_restores_the_context() -> None:
    before = trace.get_current_span()
    with state_span("account", AgentState()) as span:
        assert trace.get_current_span() is span
    assert trace.get_current_span() is before


async def test_an_error_in_a_state_restores_the_context() -> None:
    before = trace.get_current_span()
    with pytest.raises(RuntimeError), state_span("account", AgentState()):
        raise RuntimeError("tool exploded")
    assert trace.get_current_span() is before
