"""What each model endpoint does with a streaming request, learned from its answers.

The gateway asks to stream (with ``stream_options`` for the usage) when a run's stream is
watched. Not every OpenAI-compatible server does: some answer a streaming request with one
whole JSON completion, some reject ``stream_options`` (or ``stream``) with a 400. The first
time an endpoint (a base URL and a model) answers, the gateway finds out which: it reads a
JSON answer whole, and on a 400 asks again without ``stream_options``, then without
streaming. What worked is remembered for that endpoint, so later calls ask the way it
answers, and a 400 from an endpoint known to stream is a bad request, never retried.

The memory is this worker process's own (one ``ModelActivities``): a restarted worker
learns again, at the cost of one refused request per endpoint; nothing is shared.
"""

from __future__ import annotations

import sys
from enum import StrEnum

from tower.contract.failures import Code, TowerError


class Mode(StrEnum):
    STREAM = "stream"  # server-sent events, the usage included (stream_options)
    NO_OPTIONS = "no_options"  # server-sent events; stream_options refused
    WHOLE = "whole"  # whole completions only: its text is published at once


LADDER = (Mode.STREAM, Mode.NO_OPTIONS, Mode.WHOLE)


class StreamModes:
    """How to ask each endpoint, ``(base_url, model)``, once it has answered."""

    def __init__(self) -> None:
        self._known: dict[tuple[str | None, str], Mode] = {}

    def tries(self, base_url: str | None, model: str) -> tuple[Mode, ...]:
        """The ways to ask, in order: the one learned, else the whole ladder."""
        known = self._known.get((base_url, model))
        return (known,) if known is not None else LADDER

    def learn(self, base_url: str | None, model: str, mode: Mode) -> None:
        self._known[(base_url, model)] = mode


def refuses_streaming(exc: BaseException) -> bool:
    """A 400 (or 422) to a streaming request: maybe the streaming, so ask plainer."""
    openai = sys.modules.get("openai")
    return (openai is not None and isinstance(exc, openai.APIStatusError)
            and exc.status_code in (400, 422))


class EmptyReply(TowerError):
    """The server answered with no text, no tool call and no refusal."""

    CODE = Code.EMPTY_REPLY

    def __init__(self, model: str, base_url: str | None) -> None:
        where = base_url or "the OpenAI default endpoint"
        super().__init__(f"the server returned an empty reply (model {model} at {where})")
