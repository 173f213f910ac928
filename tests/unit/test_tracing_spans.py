"""The state span's context handling, without a server: a run evicted mid-state has its
coroutine closed in another context, and that must not log an error or end the span."""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Generator
from datetime import UTC, datetime

import pytest
from opentelemetry import trace

from tower import AgentState
from tower.core.engine import Transition
from tower.temporal._runtime import close_state, state_span


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


class Recording(trace.NonRecordingSpan):
    """A span that says whether it records and keeps what it is given."""

    def __init__(self, recording: bool) -> None:
        super().__init__(trace.INVALID_SPAN_CONTEXT)
        self.recording, self.attributes = recording, dict[str, object]()

    def is_recording(self) -> bool:
        return self.recording

    def set_attributes(self, attributes: object) -> None:
        self.attributes.update(attributes)  # type: ignore[call-overload]


def test_a_state_closes_with_its_move_only_on_a_recording_span() -> None:
    # Without a provider installed (tower replay, the replay helper) the span records
    # nothing, and the move's attributes are not even computed.
    move = Transition(step=2, source="listen", target="respond", reason="user message",
                      at=datetime(2026, 12, 3, tzinfo=UTC), calls=["model:scripted"])
    recording, silent = Recording(True), Recording(False)
    for span in (recording, silent):
        close_state(span, AgentState(), AgentState(step=2, node="respond"), [move])
    assert recording.attributes["tower.to"] == "respond"
    assert recording.attributes["tower.models"] == ["scripted"]
    assert silent.attributes == {}
